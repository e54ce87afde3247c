"""Family knowledge: BERT, ResNet and GNN adapters (see the adapter issues)."""
