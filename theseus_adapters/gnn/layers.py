"""Layers cheaper than a message-passing layer, that a budget search may put in a ``BasicGNN``, and the config that
rebuilds a ``BasicGNN`` holding them.

Two kinds (`LAYERS`), each mapping ``in_channels`` to ``out_channels`` per node and called as a ``BasicGNN`` calls its
convs, ``layer(x, edge_index, edge_weight=..., edge_attr=...)``:

- `NodeLinear` (``"linear"``): no message passing, ``x' = x W^T + b`` for every node alone. With the weight and bias
  of a ``GCNConv`` that adds self-loops (the default), it is that layer on a graph without edges.
- `MeanConv` (``"mean"``): the unnormalised mean over a node and its neighbours, ``x'_i = W mean_{j in N(i) + {i}}
  x_j + b`` (``torch_geometric.nn.SimpleConv(aggr="mean", combine_root="self_loop")``). With a ``GCNConv``'s weight
  and bias, it is that layer on any regular graph (every node of one degree) without edge weights; on others the
  mean stands for GCN's symmetric normalisation, and costs no degree computation.

A ``BasicGNN`` whose convs include these stays an instance of its class (``GCN``, ``GraphSAGE``, ...), but its
state_dict no longer loads into ``GCN(**kwargs)``: `export_config` adds each layer's kind to the constructor's
arguments (``"theseus_layers"``), and `build_from_config` builds the model and puts those layers in place. This
module imports torch and PyTorch Geometric only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import SimpleConv
from torch_geometric.typing import Adj, OptTensor

LAYER_KINDS = "theseus_layers"
"""The config key that lists, per conv of a ``BasicGNN``, ``None`` (the model's own kind) or a layer's `config`."""


def _check_widths(kind: str, in_channels: int, out_channels: int) -> None:
    for name, value in (("in_channels", in_channels), ("out_channels", out_channels)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{kind}: {name} must be a positive integer, got {value!r}")


class _NodeLayer(nn.Module):
    """What the layers share: checked widths, ``lin`` (``x W^T + b``), and the config that rebuilds them."""

    kind = ""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        _check_widths(self.kind, in_channels, out_channels)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lin = nn.Linear(in_channels, out_channels)

    def reset_parameters(self) -> None:
        """Fresh weights, as ``torch.nn.Linear`` initialises them (``BasicGNN.reset_parameters`` calls it)."""
        self.lin.reset_parameters()

    def config(self) -> dict[str, Any]:
        """The constructor's arguments, with ``"kind"``: what `build_layer` takes."""
        return {"kind": self.kind, "in_channels": self.in_channels, "out_channels": self.out_channels}


class NodeLinear(_NodeLayer):
    """A layer without message passing: ``x'_i = W x_i + b`` for every node, the graph ignored.

    Args:
        in_channels, out_channels: Widths of the input and the output.

    Shapes:
        ``x``: ``[num_nodes, in_channels]`` → ``[num_nodes, out_channels]``; ``edge_index``, ``edge_weight`` and
        ``edge_attr`` are taken (so that a ``BasicGNN`` can call it as its convs) and not read.
    """

    kind = "linear"

    def forward(
        self, x: Tensor, edge_index: Adj = None, edge_weight: OptTensor = None, edge_attr: OptTensor = None
    ) -> Tensor:
        return self.lin(x)


class MeanConv(_NodeLayer):
    """``x'_i = W mean_{j in N(i) + {i}} x_j + b``: the mean over a node and its neighbours, then a linear map.

    The mean is ``torch_geometric.nn.SimpleConv(aggr="mean", combine_root="self_loop")``: every node gets one
    self-loop (``add_self_loops``), and edge weights, when given, scale the messages (the self-loop's by 1) while
    the mean still divides by the number of messages. The linear map and the mean commute, so the layer averages at
    the narrower of its two widths: it propagates ``x`` then maps it when ``in_channels <= out_channels``, and maps
    then propagates (adding ``b`` last) otherwise.

    Args:
        in_channels, out_channels: Widths of the input and the output.

    Shapes:
        ``x``: ``[num_nodes, in_channels]`` → ``[num_nodes, out_channels]``; ``edge_index`` ``[2, num_edges]``,
        ``edge_weight`` ``[num_edges]`` (optional); ``edge_attr`` is taken and not read.
    """

    kind = "mean"

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(in_channels, out_channels)
        self.mean = SimpleConv(aggr="mean", combine_root="self_loop")

    def forward(self, x: Tensor, edge_index: Adj, edge_weight: OptTensor = None, edge_attr: OptTensor = None) -> Tensor:
        if self.in_channels <= self.out_channels:
            return self.lin(self.mean(x, edge_index, edge_weight))
        mapped = nn.functional.linear(x, self.lin.weight)
        return self.mean(mapped, edge_index, edge_weight) + self.lin.bias


LAYERS: dict[str, type[_NodeLayer]] = {NodeLinear.kind: NodeLinear, MeanConv.kind: MeanConv}
"""The layers by kind: the candidate names ``theseus_adapters.gnn.candidates`` offers them under."""


def build_layer(config: dict[str, Any]) -> nn.Module:
    """A layer from its `config` (``{"kind": "linear", "in_channels": 64, "out_channels": 64}``)."""
    arguments = dict(config)
    kind = arguments.pop("kind", None)
    if kind not in LAYERS:
        raise ValueError(f"unknown layer kind {kind!r}; the kinds are {sorted(LAYERS)}")
    return LAYERS[kind](**arguments)


def export_config(model: nn.Module, config: dict[str, Any]) -> dict[str, Any]:
    """``config``, the arguments that build ``type(model)`` at ``model``'s shape, with ``"theseus_layers"``
    (`LAYER_KINDS`) added when some conv of ``model`` is one of `LAYERS`: per conv, ``None`` for one of the kind the
    class builds, the layer's `config` otherwise. When every conv is of the class's own kind, ``config`` comes back
    unchanged (a copy), so that ``type(model)(**config)`` builds it as before.

    Checked before it is returned: the model `build_from_config` builds from it loads ``model``'s state_dict with
    ``strict=True``.

    Raises:
        ValueError: ``model`` is a `SteppedGNN`, ``config`` already lists layers, or a conv is neither of the
            class's kind nor one of `LAYERS`, or the rebuilt model does not take ``model``'s state_dict.
    """
    from .steps import SteppedGNN  # steps builds on this module

    if isinstance(model, SteppedGNN):
        raise ValueError(
            "a SteppedGNN (a BasicGNN whose layers a successor could not be put back into) has no constructor "
            "config; save it whole (torch.save) or replace with a successor of the class's kind or one of "
            f"{', '.join(LAYERS)}"
        )
    if LAYER_KINDS in config:
        raise ValueError(f"the config already holds {LAYER_KINDS!r}; pass the class's constructor arguments")
    plain = type(model)(**config)
    kinds: list[dict[str, Any] | None] = []
    for index, (conv, built) in enumerate(zip(model.convs, plain.convs, strict=True)):
        if isinstance(conv, tuple(LAYERS.values())):
            kinds.append(conv.config())
        elif type(conv) is type(built):
            kinds.append(None)
        else:
            raise ValueError(
                f"convs[{index}] is a {type(conv).__name__}: a {type(model).__name__} config describes its own "
                f"{type(built).__name__} and the layers {', '.join(LAYERS)}"
            )
    described = dict(config)
    if any(kind is not None for kind in kinds):
        described[LAYER_KINDS] = kinds
    try:
        build_from_config(type(model), described, model.state_dict())
    except RuntimeError as error:  # load_state_dict: missing, unexpected or mis-shaped keys
        raise ValueError(f"the config does not rebuild this {type(model).__name__}: {error}") from None
    return described


def build_from_config(
    model_class: type[nn.Module], config: dict[str, Any], state_dict: dict[str, Tensor] | None = None
) -> nn.Module:
    """The model `export_config` described: ``model_class(**config)`` (``GCN``, ``GraphSAGE``, ...), then, when the
    config lists ``"theseus_layers"``, each listed layer put in place of its conv (`build_layer`). Freshly initialised
    unless ``state_dict`` is given, which it then loads with ``strict=True``.

    Example: ``build_from_config(GCN, json.load(open("config.json")), torch.load("model.pt"))``.

    Raises:
        ValueError: the layer list does not have one entry per conv, or names an unknown kind.
        RuntimeError: ``state_dict`` does not match (``load_state_dict``).
    """
    arguments = dict(config)
    kinds = arguments.pop(LAYER_KINDS, None)
    model = model_class(**arguments)
    if kinds is not None:
        if len(kinds) != len(model.convs):
            raise ValueError(f"{LAYER_KINDS!r} lists {len(kinds)} layers for {len(model.convs)} convs")
        for index, entry in enumerate(kinds):
            if entry is not None:
                model.convs[index] = build_layer(entry)
    if state_dict is not None:
        model.load_state_dict(state_dict, strict=True)
    return model


@torch.no_grad()
def start_from_(layer: _NodeLayer, weight: Tensor, bias: Tensor | None) -> _NodeLayer:
    """Copies ``weight`` (``[out_channels, in_channels]``) and ``bias`` (zeros when ``None``) into ``layer.lin``."""
    layer.lin.weight.copy_(weight)
    if bias is None:
        layer.lin.bias.zero_()
    else:
        layer.lin.bias.copy_(bias)
    return layer
