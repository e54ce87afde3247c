"""Family knowledge for theseus_core: each adapter returns a `theseus_core.Plan` for `replace_`.

- `theseus_adapters.hf`: any transformers model's layer stack (encoders, decoder LLMs, either stack of an
  encoder-decoder), finalized into a model transformers reloads;
- `theseus_adapters.bert`: the same under the name of the paper's BERT setup;
- `theseus_adapters.resnet`: torchvision and timm ResNets;
- `theseus_adapters.gnn`: torch-geometric BasicGNN models and Sequential stacks.

Import the one you need; each imports its model library.
"""
