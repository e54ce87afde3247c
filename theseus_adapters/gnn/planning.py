"""Planning a compression: `plan`, the successor factories `copy_step` and `conv_successor`, and the plan's
``on_finalize`` hook that converts the finalized GNN back."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence

from torch import nn
from torch_geometric.nn import Sequential as PygSequential
from torch_geometric.nn.models.basic_gnn import BasicGNN

from theseus_core import (
    ModuleSpec,
    Plan,
    SuccessorRegistry,
    group_sizes_for,
    register_successor,
    registered_successor,
)
from theseus_core.checks import is_int
from theseus_core.spec import Projection

from .convert import _convert_back
from .records import _Record
from .steps import GNNStep, SteppedGNN, _forward_parameters, _layout


# --------------------------------------------------------------------------------------- successors
def _template_step(steps: Sequence[GNNStep], check_widths: bool) -> GNNStep:
    """The step of a group whose copy can stand for the group: the first (the paper's bottom-layer
    initialisation) or, when the group ends with a different layer (BasicGNN's last layer maps to
    ``out_channels`` and skips norm / act / dropout), the last."""
    first, last = steps[0], steps[-1]

    def fits(mine: int | None, wanted: int | None) -> bool:
        return mine is None or wanted is None or mine == wanted

    for candidate in (first, last):
        widths_ok = fits(candidate.in_channels, first.in_channels) and fits(candidate.out_channels, last.out_channels)
        if _layout(candidate) == _layout(last) and (widths_ok or not check_widths):
            return candidate
    raise ValueError(
        f"no layer of this group maps {first.in_channels} to {last.out_channels} channels with the group's "
        f"post-processing, so none can be copied; pass successor=conv_successor(lambda i, o: ...)"
    )


def copy_step(steps: list[GNNStep]) -> GNNStep:
    """Default successor factory (registered for `GNNStep`): a deep copy of one layer (step) of the group.

    The group's first layer, as BERT-of-Theseus initialises each successor from the bottom layer of its group;
    but the group that ends with a ``BasicGNN``'s last layer copies that last layer, which maps to
    ``out_channels`` and is not followed by norm / activation / dropout (unless ``jk`` is set). Raises
    `ValueError` when neither fits (one group for the whole model: no layer maps ``in_channels`` to
    ``out_channels``); use `conv_successor` then.
    """
    return copy.deepcopy(_template_step(steps, check_widths=True))


register_successor(GNNStep, fallback=True)(copy_step)


def _step_around(conv: nn.Module, template: GNNStep) -> GNNStep:
    """A step of ``conv`` followed by copies of ``template``'s post-processing, called as ``template`` calls its conv:
    ``edge_index`` first, and the keyword inputs of ``template`` that ``conv.forward`` takes."""
    takes = _forward_parameters(conv)
    return GNNStep(
        conv,
        [copy.deepcopy(module) for module in template.post],
        conv_args=template.conv_args[:1],
        conv_kwargs=[name for name in template.conv_kwargs if name in takes],
        post_args=template.post_args,
    )


class conv_successor:  # noqa: N801 - used like a function: successor=conv_successor(...)
    """Successor factory: one new message-passing layer of any kind, with the group's post-processing.

    ``conv_successor(lambda in_channels, out_channels: GCNConv(in_channels, out_channels))`` replaces each
    group (of GAT layers, say) by a GCN layer mapping the group's input width to its output width, followed
    by a copy of the norm / activation / dropout that `copy_step` would copy. The new conv gets
    ``edge_weight`` / ``edge_attr`` when the group's layers got them and its ``forward`` takes them.

    Args:
        make_conv: ``(in_channels, out_channels) -> MessagePassing``.
    """

    def __init__(self, make_conv: Callable[[int, int], nn.Module]) -> None:
        if not callable(make_conv):
            raise TypeError(f"conv_successor takes a callable (in_channels, out_channels) -> conv, got {make_conv!r}")
        self.make_conv = make_conv

    def __call__(self, steps: list[GNNStep]) -> GNNStep:
        template = _template_step(steps, check_widths=False)
        in_channels, out_channels = steps[0].in_channels, steps[-1].out_channels
        if in_channels is None or out_channels is None:
            raise ValueError("the group's widths are unknown (lazy in_channels=-1?); write the successor factory")
        return _step_around(self.make_conv(in_channels, out_channels), template)

    def __repr__(self) -> str:
        return f"conv_successor({getattr(self.make_conv, '__qualname__', self.make_conv)!r})"


# -------------------------------------------------------------------------------------------- plan
class _ConvertBack:
    """The plan's ``on_finalize``: turn the stepped GNN at ``path`` back into an ordinary model."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, model: nn.Module) -> Callable[[], None]:
        """Converts back; returns what undoes the change to the record (`Theseus.finalize` puts the modules back)."""
        gnn = model.get_submodule(self.path)
        record = gnn.__dict__["_steps_record"]
        unshared = list(record.unshared)
        if _convert_back(gnn, record) is not None:  # stays stepped: drop what only an undo needed
            record.unshared.clear()
            if isinstance(gnn, SteppedGNN):
                gnn.num_layers = len(gnn.steps)
        return lambda: record.unshared.__setitem__(slice(None), unshared)

    def __repr__(self) -> str:
        return f"convert_back({self.path!r})"


def _find_stepped(model: nn.Module) -> tuple[str, nn.Module]:
    stepped = [(name, m) for name, m in model.named_modules() if "_steps_record" in m.__dict__]
    if len(stepped) == 1:
        return stepped[0]
    if stepped:
        raise ValueError(f"{len(stepped)} stepped GNNs in this model ({[n for n, _ in stepped]}); plan one at a time")
    raw = [
        f"model.{name}" if name else "model"
        for name, m in model.named_modules()
        if isinstance(m, (BasicGNN, PygSequential))
    ]
    if raw:
        raise TypeError(
            f"convert the GNN first: theseus_adapters.gnn.to_steps_({raw[0]}) makes its layers groupable "
            f"(from_steps_ undoes it)"
        )
    raise TypeError(f"{type(model).__name__} holds no BasicGNN or torch_geometric.nn.Sequential")


def plan(
    model: nn.Module,
    num_layers: int = 2,
    *,
    group_sizes: Sequence[int] | None = None,
    successor: Callable[[list[GNNStep]], nn.Module] | str | None = None,
    in_proj: Projection = None,
    out_proj: Projection = None,
    registry: SuccessorRegistry | None = None,
) -> Plan:
    """Specs that compress a stepped GNN to ``num_layers`` layers, one successor per group of layers.

    Only reads the model. A group is a run of consecutive steps (conv, norm, activation, dropout); each
    becomes one successor layer, so the finalized model has ``num_layers`` layers. ``finalize()`` then
    converts back (the plan's ``on_finalize``): a ``BasicGNN`` of the original class when every successor is a
    plain `GNNStep` with the model's conv type, so its state_dict loads with ``strict=True`` into
    ``type(model)(..., num_layers=num_layers)``, or with one of the layers of `theseus_adapters.gnn.layers` (then
    ``build_from_config(type(model), export_config(model, kwargs))`` rebuilds it); otherwise (another conv kind,
    projections) the model stays a working `SteppedGNN`. A ``Sequential`` always becomes an ordinary
    ``Sequential`` again (projections become children of their own) unless a successor is not a `GNNStep`.

    Args:
        model: The model holding exactly one GNN converted by `to_steps_` (the GNN itself or a parent).
        num_layers: Layers of the compressed GNN, ``1 <= num_layers <`` the GNN's. (default: ``2``)
        group_sizes: Layers per group, in order, summing to the GNN's layer count, e.g. ``[3, 1]``.
            (default: as even as possible, larger groups first; its length must equal ``num_layers``)
        successor: Factory ``(list of GNNStep) -> nn.Module``, or the name of one registered for `GNNStep`.
            (default: ``None``, the registry's default for `GNNStep`: `copy_step` unless a user registered
            another; for another kind of layer, `conv_successor`)
        in_proj, out_proj: ``"linear"`` or ``None``, passed to every `theseus_core.ModuleSpec`: learned
            projections for successors whose widths differ from their group's. Not with ``jk="max"``,
            whose head takes every layer's output at the model's width. (default: ``None``)
        registry: The private registry you will pass to ``replace_``: the check that every group can be
            copied runs only when the successor it resolves to is `copy_step`. (default: ``None``, the
            default registry only)

    Returns:
        A `theseus_core.Plan` for ``theseus_core.replace_(model, plan, ...)``.

    Raises:
        TypeError: no stepped GNN in ``model`` (convert it with `to_steps_` first).
        ValueError: ``num_layers`` or ``group_sizes`` out of range; a group the default successor cannot
            copy; projections with ``jk="max"``.
    """
    path, gnn = _find_stepped(model)
    record: _Record = gnn.__dict__["_steps_record"]
    stack_path = f"{path}.{record.stack_name}" if path else record.stack_name
    steps = list(gnn._modules[record.stack_name])
    if not all(isinstance(step, GNNStep) for step in steps):
        raise ValueError(f"{stack_path} is already under replacement (finalize() or restore() the handle first)")
    total = len(steps)
    if not is_int(num_layers) or not 1 <= num_layers < total:
        raise ValueError(
            f"num_layers must be an integer with 1 <= num_layers < {total} (the GNN's), got {num_layers!r}"
        )
    sizes = group_sizes_for(total, num_layers, group_sizes)
    if (in_proj is not None or out_proj is not None) and getattr(gnn, "jk_mode", None) == "max":
        raise ValueError("jk='max' takes every layer's output at the model's width: projections cannot be used")
    specs = []
    for start, stop in itertools.pairwise(itertools.accumulate(sizes, initial=0)):
        group_path = f"{stack_path}[{start}:{stop}]"
        if successor is None and registered_successor(GNNStep, registry) is copy_step:  # as replace_ will
            try:
                _template_step(steps[start:stop], check_widths=True)
            except ValueError as error:
                raise ValueError(f"group {group_path}: {error}") from None
        specs.append(ModuleSpec(group_path, successor, in_proj, out_proj))
    return Plan(tuple(specs), on_finalize=_ConvertBack(path))
