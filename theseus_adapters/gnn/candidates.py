"""What a budget search (`theseus_core.search`) may put in place of each group of a stepped GNN's plan.

`candidates` gives, per group of ``plan(model, num_layers)``:

- ``keep``: the group's own layers;
- ``skip``: the identity, where the group keeps the width (`theseus_core.replace_` refuses it elsewhere, e.g. on the
  group that ends in the output layer);
- ``one``: the plan's default successor, one layer copied from the group's (`copy_step`);
- ``linear``: a `NodeLinear`, the layer without message passing, ``x W^T + b`` per node;
- ``mean``: a `MeanConv`, ``W mean_{j in N(i) + {i}} x_j + b``: an unnormalised mean, no degree normalisation.

``linear`` and ``mean`` map the group's input width to its output width and are followed by copies of the
post-processing (norm, activation, dropout) ``one`` copies. Each starts from the weight and bias that the layer
``one`` copies applies to a node's own features (`nodewise_weights`: a ``GCNConv``'s ``lin`` and bias, a
``SAGEConv``'s root weight and bias) when that layer is of a kind whose weights are known and fits the group's
widths, and is freshly initialised otherwise (GIN, GAT, ...). `theseus_adapters.gnn.layers` says what each computes.

`flatten_steps` runs before the plan's own finalize hook, so that any choice converts back into an ordinary GNN: a
kept group's layers spliced into the stack, a skipped group gone, ``linear`` and ``mean`` layers in the model's
``convs`` (`theseus_adapters.gnn.layers.export_config` describes it, `build_from_config` rebuilds it).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn
from torch_geometric.nn import GCNConv, SAGEConv

import theseus_core as th
from theseus_core.candidates import splice_

from .layers import LAYERS, start_from_
from .planning import _step_around, _template_step, plan
from .steps import GNNStack, GNNStep


def candidates(
    model: nn.Module, num_layers: int = 2, group_sizes: list[int] | None = None
) -> tuple[dict[str, list[th.ModuleSpec]], Callable[[nn.Module], object]]:
    """Name -> one spec per group of ``plan(model, num_layers, group_sizes=group_sizes)`` (module doc) and the hook
    a chosen plan finalizes with. ``model`` must be stepped (`to_steps_`); it is only read."""
    base = plan(model, num_layers, group_sizes=group_sizes)
    found = {"keep": th.keep_specs(base), "skip": th.skip_specs(base), "one": list(base)}
    for kind in LAYERS:
        found[kind] = [th.ModuleSpec(spec.path, successor=layer_successor(kind)) for spec in base]
    convert_back = base.on_finalize

    def finalize(model: nn.Module) -> object:
        flatten_steps(model)
        return convert_back(model) if convert_back is not None else None

    return found, finalize


class layer_successor:  # noqa: N801 - used like a function: successor=layer_successor("linear")
    """Successor factory: one layer of ``kind`` (`theseus_adapters.gnn.layers.LAYERS`) from the group's input width
    to its output width, followed by the post-processing `copy_step` would copy, started from that step's conv where
    `nodewise_weights` knows its weights and they fit, freshly initialised otherwise.

    Raises:
        ValueError: an unknown ``kind``; (when called) a group whose widths are unknown (lazy ``in_channels=-1``).
    """

    def __init__(self, kind: str) -> None:
        if kind not in LAYERS:
            raise ValueError(f"unknown layer kind {kind!r}; the kinds are {sorted(LAYERS)}")
        self.kind = kind

    def __call__(self, steps: list[GNNStep]) -> GNNStep:
        try:  # the step copy_step copies; where no step fits the group's widths, one for the post-processing
            template = _template_step(steps, check_widths=True)
        except ValueError:
            template = _template_step(steps, check_widths=False)
        in_channels, out_channels = steps[0].in_channels, steps[-1].out_channels
        if in_channels is None or out_channels is None:
            raise ValueError(f"the group's widths are unknown (lazy in_channels=-1?): no {self.kind!r} layer")
        layer = LAYERS[self.kind](in_channels, out_channels)
        weights = nodewise_weights(template.conv)
        if weights is not None and weights[0].shape == layer.lin.weight.shape:
            start_from_(layer, *weights)
        return _step_around(layer, template)

    def __repr__(self) -> str:
        return f"layer_successor({self.kind!r})"


def nodewise_weights(conv: nn.Module) -> tuple[Tensor, Tensor | None] | None:
    """The weight (``[out_channels, in_channels]``) and bias a message-passing layer applies to a node's own
    features, for the kinds where that is one linear map: a ``GCNConv``'s ``lin.weight`` and ``bias``; a ``SAGEConv``'s
    ``lin_r.weight`` and ``lin_l.bias`` (with its root weight, without ``project`` or ``normalize``). ``None``
    for any other layer."""
    if isinstance(conv, GCNConv):
        return conv.lin.weight, conv.bias
    if isinstance(conv, SAGEConv) and conv.root_weight and not conv.project and not conv.normalize:
        return conv.lin_r.weight, conv.lin_l.bias
    return None


def flatten_steps(model: nn.Module) -> None:
    """In place: in every `GNNStack` of ``model``, kept groups spliced in and skipped ones removed
    (`theseus_core.candidates.splice_`)."""
    for stack in [module for module in model.modules() if isinstance(module, GNNStack)]:
        splice_(stack)
