"""Theseus compression for PyTorch Geometric: ``BasicGNN`` models and ``torch_geometric.nn.Sequential`` stacks.

The core groups *paths*: one module, or a slice of an ``nn.ModuleList`` / ``nn.Sequential``. A ``BasicGNN``
(GCN, GraphSAGE, GIN, GAT, PNA, EdgeCNN) keeps its convs and norms in two lists and applies activation,
normalization, dropout and jumping knowledge in its own loop, so one layer is not one module. This adapter
therefore turns the GNN, in place, into a *stepped form* whose layers are modules:

- `GNNStep`: one message-passing layer and what follows it, e.g. ``conv → norm → act → dropout``;
- `GNNStack`: an ``nn.Sequential`` of steps that threads the node features ``x`` through them and hands the
  other inputs (``edge_index``, ``edge_weight``, ``edge_attr``, ``batch``, ...) to every step. The core groups
  slices of it (``"steps[0:2]"``), so a group is a run of consecutive steps.

Contract of the conversion: `to_steps_` moves the very same parameter tensors into steps and runs the very
same ops in the same order, so the stepped model's outputs are bit-identical to the original's, in training
mode and with dropout too (same torch seed). `from_steps_` converts back; ``from_steps_(to_steps_(model))``
gives the original structure, state_dict (keys, order, values) and conv/norm module objects (the stateless
``Identity`` that ``BasicGNN`` keeps as its last norm without ``jk`` is made anew). Workflow::

    import theseus_core as th
    from theseus_adapters import gnn

    gnn.to_steps_(model)  # a GCN, GIN, GAT, ... or a torch_geometric.nn.Sequential; validates first
    theseus = th.replace_(model, gnn.plan(model, num_layers=2), example_inputs=(x, edge_index))  # verified on them
    ...  # train as usual, model(x, edge_index, ...)
    theseus.finalize()  # the plan's on_finalize converts back: a GCN with num_layers=2
    # or: theseus.restore(); gnn.from_steps_(model)  -> the original model, bit-identical

For a budget search (`theseus_core.search`), `candidates` offers per group ``keep``, ``skip``, ``one`` and two
cheaper layers (`theseus_adapters.gnn.layers`: `NodeLinear`, no message passing; `MeanConv`, a plain mean over
the neighbours). A ``BasicGNN`` holding them converts back into its class; `export_config` describes it and
`build_from_config` rebuilds it.

While stepped, a ``BasicGNN`` is a `SteppedGNN` (its class is swapped, as ``torch.nn.utils.parametrize``
does, and swapped back by `from_steps_`); a ``Sequential`` keeps its class and gets one `GNNStack` child.
"""

from .candidates import candidates, flatten_steps, layer_successor, nodewise_weights
from .convert import from_steps_, to_steps_
from .layers import LAYER_KINDS, LAYERS, MeanConv, NodeLinear, build_from_config, export_config
from .planning import conv_successor, copy_step, plan
from .steps import BASIC_GNN_INPUTS, LAYER_OUTPUTS, GNNStack, GNNStep, SteppedGNN

__all__ = [
    "BASIC_GNN_INPUTS",
    "LAYERS",
    "LAYER_KINDS",
    "LAYER_OUTPUTS",
    "GNNStack",
    "GNNStep",
    "MeanConv",
    "NodeLinear",
    "SteppedGNN",
    "build_from_config",
    "candidates",
    "conv_successor",
    "copy_step",
    "export_config",
    "flatten_steps",
    "from_steps_",
    "layer_successor",
    "nodewise_weights",
    "plan",
    "to_steps_",
]
