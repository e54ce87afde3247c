"""Family knowledge for theseus_core: each adapter returns a `theseus_core.Plan` for `replace_`.

- `theseus_adapters.hf`: any transformers model's layer stack (encoders, decoder LLMs, either stack of an
  encoder-decoder), finalized into a model transformers reloads;
- `theseus_adapters.bert`: the same under the name of the paper's BERT setup;
- `theseus_adapters.resnet`: torchvision and timm ResNets (and, in `theseus_adapters.resnet.successor_blocks`, the
  light successor architectures);
- `theseus_adapters.gnn`: torch-geometric BasicGNN models and Sequential stacks;
- `theseus_adapters.layer_selection` and `theseus_adapters.depth_baselines`: which layers of a transformers stack
  matter, and the ShortGPT and LLM-Streamline baselines built on it.

Import the one you need; each imports its model library.
"""
