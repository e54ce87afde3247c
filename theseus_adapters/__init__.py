"""Family knowledge for theseus_core: each adapter returns a `theseus_core.Plan` for `replace_`.

- `theseus_adapters.bert`: BERT / RoBERTa / MPNet encoders from transformers;
- `theseus_adapters.resnet`: torchvision and timm ResNets;
- `theseus_adapters.gnn`: torch-geometric BasicGNN models and Sequential stacks.

Import the one you need; each imports its model library.
"""
