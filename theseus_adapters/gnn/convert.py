"""The in-place conversion: `to_steps_` and `from_steps_`, for a ``BasicGNN`` and a ``torch_geometric.nn.Sequential``.

`to_steps_` checks everything before its first change and leaves a record on the model from which `from_steps_`
(or the plan's ``on_finalize``) converts back.
"""

from __future__ import annotations

import copy
import inspect
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from torch import nn
from torch_geometric.nn import Sequential as PygSequential
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.models.basic_gnn import BasicGNN
from torch_geometric.nn.sequential import Child

from theseus_core import Projected

from .steps import BASIC_GNN_INPUTS, GNNStack, GNNStep, SteppedGNN, _Function, _layout

_POST_MODULES = (  # what may follow a conv inside a step of a Sequential stack
    "torch.nn.modules.activation",
    "torch.nn.modules.dropout",
    "torch.nn.modules.batchnorm",
    "torch.nn.modules.normalization",
    "torch.nn.modules.instancenorm",
    "torch_geometric.nn.norm",
)


# --------------------------------------------------------------------------------------- conversion
@dataclass
class _Record:
    """What `to_steps_` changed, kept on the stepped model so that `from_steps_` can undo it."""

    stack_name: str
    unshared: list[tuple[nn.Module, str, nn.Module]]  # (parent, child name, shared original) per copy


@dataclass
class _BasicGNNRecord(_Record):
    cls: type[BasicGNN]
    module_order: tuple[str, ...]
    conv_type: type[nn.Module]
    post_layout: tuple[Any, ...]  # layout of a step with post-processing, for checking successors


@dataclass
class _SequentialRecord(_Record):
    children: list[Child]
    forward: Any  # the instance's own forward before stepping (PyG generates one), or None
    start: int  # position of the first step child
    step_sizes: list[int]  # children per original step
    input_var: str
    output_var: str
    auto_names: bool  # children were named module_0, module_1, ... by PyG


def to_steps_(model: nn.Module) -> nn.Module:
    """Converts a ``BasicGNN`` or a ``torch_geometric.nn.Sequential`` into stepped form, in place.

    Outputs stay bit-identical (same tensors, same ops in the same order). Everything is checked before
    the first change: on any error the model is untouched.

    Args:
        model: The GNN itself: a ``BasicGNN`` subclass (GCN, GraphSAGE, GIN, GAT, PNA, EdgeCNN) with
            ``jk`` in ``None``, ``"last"``, ``"max"``, or a ``Sequential`` with a run of message-passing
            layers each followed by norm / activation / dropout modules (`GNNStep` tells the calls).

    Returns:
        The same object: a `SteppedGNN` for a ``BasicGNN``; a ``Sequential`` with one `GNNStack` child.

    Raises:
        TypeError: ``model`` is neither kind. ValueError: it cannot be compressed (``jk="cat"`` or
            ``"lstm"``, layers sharing parameters, no message-passing run), naming the reason.
    """
    if "_steps_record" in model.__dict__:
        raise ValueError(f"{type(model).__name__} is already in stepped form; use from_steps_ to convert it back")
    if isinstance(model, BasicGNN):
        _basic_gnn_to_steps(model)
    elif isinstance(model, PygSequential):
        _sequential_to_steps(model)
    else:
        raise TypeError(
            f"to_steps_ takes a torch_geometric BasicGNN (GCN, GraphSAGE, GIN, GAT, PNA, EdgeCNN) or a "
            f"torch_geometric.nn.Sequential, got {type(model).__name__}; for your own layers use theseus_core.plan"
        )
    return model


def from_steps_(model: nn.Module) -> nn.Module:
    """Converts a stepped GNN back, in place: the undo of `to_steps_`, also after `Theseus.restore`.

    After ``to_steps_`` (and ``replace_`` then ``restore``), this gives back the original model: same class,
    same conv and norm module objects, state_dict with the same keys in the same order and values. After
    ``finalize`` (which calls it through the plan), the successors become the layers of an ordinary model.

    Raises:
        ValueError: ``model`` is not stepped, or its steps cannot form the original kind (see `plan`).
        RuntimeError: a Theseus handle is still active on it: ``finalize()`` or ``restore()`` first.
    """
    record = model.__dict__.get("_steps_record")
    if record is None:
        raise ValueError(f"{type(model).__name__} is not in stepped form (see to_steps_)")
    reason = _convert_back(model, record)
    if reason is not None:
        raise ValueError(f"cannot convert this stepped GNN back: {reason}; it stays a working stepped model")
    return model


def _convert_back(model: nn.Module, record: _Record) -> str | None:
    """Converts back when possible; returns why not otherwise (leaving the model unchanged)."""
    stack = model._modules[record.stack_name]
    for child in stack:
        if not isinstance(child, (GNNStep, Projected)):
            raise RuntimeError(
                f"{type(model).__name__} still holds a Theseus site ({type(child).__name__}); call finalize() or "
                f"restore() on the handle first"
            )
    if isinstance(record, _BasicGNNRecord):
        return _basic_gnn_from_steps(model, record)
    return _sequential_from_steps(model, record)


def _finish_conversion(model: nn.Module, record: _Record) -> None:
    """Puts back the stateless modules that `to_steps_` copied (where their parent is still in the model) and
    drops the record."""
    present = {id(module) for module in model.modules()}
    for parent, name, original in record.unshared:
        if id(parent) in present:
            parent._modules[name] = original
    del model.__dict__["_steps_record"]


# ---------------------------------------------------------------------------------------- BasicGNN
def _basic_gnn_to_steps(model: BasicGNN) -> None:
    name = type(model).__name__
    if model.jk_mode not in (None, "last", "max"):
        raise ValueError(
            f"{name}(jk={model.jk_mode!r}) feeds every layer's output to its head, whose size then depends on "
            f"the number of layers; Theseus supports jk=None, 'last' or 'max'"
        )
    if isinstance(model.act, nn.Module) and _has_state(model.act):
        raise ValueError(f"{name}'s activation {type(model.act).__name__} has parameters shared by every layer")
    if not len(model.convs) == len(model.norms) == model.num_layers:
        raise ValueError(
            f"{name} has {len(model.convs)} convs, {len(model.norms)} norms, num_layers={model.num_layers}"
        )
    conv_kwargs = [
        kw for kw, on in (("edge_weight", model.supports_edge_weight), ("edge_attr", model.supports_edge_attr)) if on
    ]
    norm_args = ("batch", "batch_size") if model.supports_norm_batch else ()
    steps = []
    for index, (conv, norm) in enumerate(zip(model.convs, model.norms, strict=True)):
        post: list[nn.Module] = []
        # BasicGNN.forward: no activation / norm / dropout after the last layer unless jumping knowledge.
        if index < model.num_layers - 1 or model.jk_mode is not None:
            post = _basic_post(model, norm)
        post_args = [norm_args if module is norm else () for module in post]
        steps.append(GNNStep(conv, post, conv_args=("edge_index",), conv_kwargs=conv_kwargs, post_args=post_args))
    post = _basic_post(model, model.norms[0])
    post_layout = tuple((type(module), norm_args if module is model.norms[0] else ()) for module in post)
    shared = _shared_modules(steps, name)
    # --- nothing above this line changes the model ---
    record = _BasicGNNRecord(
        stack_name="steps",
        unshared=_unshare(steps, shared),
        cls=type(model),
        module_order=tuple(model._modules),
        conv_type=type(model.convs[0]),
        post_layout=post_layout,
    )
    children: OrderedDict[str, nn.Module | None] = OrderedDict()
    for key, child in model._modules.items():
        if key == "convs":
            children["steps"] = GNNStack(*steps, input_names=BASIC_GNN_INPUTS)
        elif key != "norms":
            children[key] = child
    model._modules.clear()
    model._modules.update(children)
    model.__dict__["_steps_record"] = record
    model.__class__ = SteppedGNN


def _basic_post(model: BasicGNN, norm: nn.Module) -> list[nn.Module]:
    """The modules ``BasicGNN.forward`` applies after a conv, in its order: [act], norm, [act], dropout.

    The activation and dropout are stateless and shared by all layers in the model; each step gets its own
    copy so that steps share no module (the core requires disjoint groups) and follow ``train()``/``eval()``.
    """
    act = model.act
    if act is not None:
        act = copy.deepcopy(act) if isinstance(act, nn.Module) else _Function(act)
    before, after = ([act], []) if model.act_first else ([], [act])
    modules = [*before, norm, *after, copy.deepcopy(model.dropout)]
    return [module for module in modules if module is not None]


def _basic_gnn_from_steps(model: nn.Module, record: _BasicGNNRecord) -> str | None:
    steps = list(model._modules[record.stack_name])
    jk = model.jk_mode is not None
    kwargs = tuple(
        kw
        for kw, on in (("edge_weight", record.cls.supports_edge_weight), ("edge_attr", record.cls.supports_edge_attr))
        if on
    )
    for index, step in enumerate(steps):
        if not isinstance(step, GNNStep):
            return f"layer {index} is a {type(step).__name__} (a successor with projections), not a plain GNNStep"
        if type(step.conv) is not record.conv_type:
            return (
                f"layer {index} is a {type(step.conv).__name__}, not a {record.conv_type.__name__} like the rest of "
                f"this {record.cls.__name__}"
            )
        expected = record.post_layout if index < len(steps) - 1 or jk else ()
        if step.conv_args != ("edge_index",) or step.conv_kwargs != kwargs or _layout(step) != expected:
            return f"layer {index} is not called as a {record.cls.__name__} calls its layers"
    norm_index = 1 if model.act is not None and model.act_first else 0
    convs = nn.ModuleList(step.conv for step in steps)
    norms = nn.ModuleList(step.post[norm_index] if len(step.post) else nn.Identity() for step in steps)
    current = dict(model._modules)
    model._modules.clear()
    for key in record.module_order:
        model._modules[key] = {"convs": convs, "norms": norms}.get(key, current.get(key))
    model.num_layers = len(steps)
    model.__class__ = record.cls
    _finish_conversion(model, record)
    return None


# -------------------------------------------------------------------------------------- Sequential
def _sequential_to_steps(model: PygSequential) -> None:
    children = list(model._children)
    start, groups, input_var, output_var = _find_run(model, children)
    stop = groups[-1][-1] + 1
    extras: list[str] = []
    for child in children[start:stop]:
        extras.extend(name for name in child.param_names[1:] if name not in extras)
    steps = []
    for group in groups:
        conv, *post = (children[index] for index in group)
        steps.append(
            GNNStep(
                getattr(model, conv.name),
                [getattr(model, child.name) for child in post],
                conv_args=conv.param_names[1:],
                conv_kwargs=(),
                post_args=[child.param_names[1:] for child in post],
            )
        )
    shared = _shared_modules(steps, "Sequential")
    stack_name = next(n for n in ("steps", *(f"steps_{i}" for i in range(len(children)))) if n not in model._modules)
    # --- nothing above this line changes the model ---
    names = [child.name for child in children]
    record = _SequentialRecord(
        stack_name=stack_name,
        unshared=_unshare(steps, shared),
        children=children,
        forward=model.__dict__.get("forward"),
        start=start,
        step_sizes=[len(group) for group in groups],
        input_var=input_var,
        output_var=output_var,
        auto_names=names == [f"module_{i}" for i in range(len(names))],
    )
    stack = GNNStack(*steps, input_names=extras)
    run_names = set(names[start:stop])
    modules: OrderedDict[str, nn.Module | None] = OrderedDict()
    for key, module in model._modules.items():
        if key == names[start]:
            modules[stack_name] = stack
        if key not in run_names:
            modules[key] = module
    model._modules.clear()
    model._modules.update(modules)
    model._children = [*children[:start], Child(stack_name, [input_var, *extras], [output_var]), *children[stop:]]
    model.__dict__["_steps_record"] = record
    model.forward = _SequentialForward(model)


def _find_run(model: PygSequential, children: list[Child]) -> tuple[int, list[list[int]], str, str]:
    """The first run of steps: (start, child indices per step, input name, output name)."""
    modules = [getattr(model, child.name) for child in children]
    start = next((i for i, module in enumerate(modules) if isinstance(module, MessagePassing)), None)
    if start is None:
        raise ValueError("this Sequential has no message-passing layer (MessagePassing) to group")
    var = input_var = children[start].param_names[0]
    made: set[str] = set()
    groups: list[list[int]] = []
    for index in range(start, len(children)):
        child, module = children[index], modules[index]
        threads = child.param_names[:1] == [var] and len(child.return_names) == 1
        if not threads or made.intersection(child.param_names[1:]):
            break
        if isinstance(module, MessagePassing):
            groups.append([index])
        elif _is_post_module(module):
            groups[-1].append(index)
        else:
            break
        var = child.return_names[0]
        made.add(var)
    if not groups:
        raise ValueError(f"the message-passing layer {children[start].name} of this Sequential must return one value")
    later = {name for child in children[groups[-1][-1] + 1 :] for name in child.param_names}
    leaked = sorted((made - {var}) & later)
    if leaked:
        raise ValueError(
            f"values {leaked} made inside this Sequential's message-passing run are used after it (e.g. jumping "
            f"knowledge over every layer); Theseus needs the run to hand on only its last output"
        )
    return start, groups, input_var, var


def _is_post_module(module: Any) -> bool:
    if isinstance(module, nn.Identity):
        return True
    return type(module).__module__.startswith(_POST_MODULES)


class _SequentialForward:
    """The generic ``torch_geometric.nn.Sequential.forward``, for one model whose children were regrouped.

    PyG gives each ``Sequential`` a forward generated from its children; after regrouping them, the model gets
    this one (an object rather than a bound method, so that the model still pickles whole).
    """

    def __init__(self, model: PygSequential) -> None:
        self.model = model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        model = self.model
        values = dict(zip(model.signature.param_dict, args, strict=False))
        for key, value in kwargs.items():
            if key in values:
                raise TypeError(f"'{type(model).__name__}' got multiple values for argument '{key}'")
            values[key] = value
        for child in model._children:
            outs = getattr(model, child.name)(*(values[name] for name in child.param_names))
            if len(child.return_names) == 1:
                values[child.return_names[0]] = outs
            else:
                values.update(zip(child.return_names, outs, strict=True))
        return outs


def _sequential_from_steps(model: PygSequential, record: _SequentialRecord) -> str | None:
    pieces: list[list[tuple[nn.Module, tuple[str, ...]]]] = []  # per step: (module, inputs after x)
    known = {*model.signature.param_dict, *(name for child in record.children for name in child.return_names)}
    for index, step in enumerate(model._modules[record.stack_name]):
        in_proj = out_proj = None
        if isinstance(step, Projected):
            step, in_proj, out_proj = step.inner, step.in_proj, step.out_proj
        conv_inputs = _positional_inputs(step, known) if isinstance(step, GNNStep) else None
        if conv_inputs is None:
            return f"layer {index} is not a GNNStep that a Sequential can call positionally"
        piece = [(step.conv, conv_inputs), *zip(step.post, step.post_args, strict=True)]
        before = [] if in_proj is None else [(in_proj, ())]
        after = [] if out_proj is None else [(out_proj, ())]
        pieces.append([*before, *piece, *after])
    old = record.children
    prefix, suffix = old[: record.start], old[record.start + sum(record.step_sizes) :]
    run_modules = [item for piece in pieces for item in piece]
    if [len(piece) for piece in pieces] == record.step_sizes:  # the original layers: restore names exactly
        children = list(old)
    else:
        run: list[Child] = []
        names = [child.name for child in old[record.start : record.start + sum(record.step_sizes)]]
        for index, (_, inputs) in enumerate(run_modules):
            source = record.input_var if index == 0 else record.output_var
            run.append(
                Child(
                    names[index] if index < len(names) else f"{names[-1]}_{index}",
                    [source, *inputs],
                    [record.output_var],
                )
            )
        children = [*prefix, *run, *suffix]
        if record.auto_names:
            children = [Child(f"module_{i}", c.param_names, c.return_names) for i, c in enumerate(children)]
    current = {child.name: getattr(model, child.name) for child in [*prefix, *suffix]}
    modules = [current[c.name] for c in prefix] + [m for m, _ in run_modules] + [current[c.name] for c in suffix]
    model._modules.clear()
    model._modules.update((child.name, module) for child, module in zip(children, modules, strict=True))
    model._children = children
    if children == record.children and record.forward is not None:
        model.forward = record.forward
    elif children == record.children:
        del model.__dict__["forward"]
    else:
        model.forward = _SequentialForward(model)
    _finish_conversion(model, record)
    return None


def _positional_inputs(step: GNNStep, known: set[str]) -> tuple[str, ...] | None:
    """The step's conv inputs as a Sequential passes them (positionally), or ``None`` if it cannot.

    Keyword inputs the Sequential does not have are left out (the step would pass ``None``, their default);
    the others must be the conv's next positional parameters, in order.
    """
    passed = [name for name in step.conv_kwargs if name in known]
    following = list(inspect.signature(step.conv.forward).parameters)[1 + len(step.conv_args) :]
    return (*step.conv_args, *passed) if following[: len(passed)] == passed else None


# ------------------------------------------------------------------------------------------ helpers
def _has_state(module: nn.Module) -> bool:
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def _shared_modules(steps: list[GNNStep], name: str) -> set[int]:
    """Ids of modules reachable from two steps; raises if one of them holds parameters or buffers.

    GIN and EdgeCNN put the model's one activation module inside every layer's MLP. It holds no state,
    but the core rejects groups that share a module, so `_unshare` gives each step a copy.
    """
    first_step: dict[int, int] = {}
    shared: dict[int, nn.Module] = {}
    for index, step in enumerate(steps):
        for module in step.modules():
            if first_step.setdefault(id(module), index) != index:
                shared[id(module)] = module
    stateful = sorted({type(m).__name__ for m in shared.values() if _has_state(m)})
    if stateful:
        raise ValueError(f"layers of this {name} share {stateful} with parameters; each layer needs its own")
    return set(shared)


def _unshare(steps: list[GNNStep], shared: set[int]) -> list[tuple[nn.Module, str, nn.Module]]:
    """Gives every step but the first holding it its own copy of each shared (stateless) module."""
    copies: list[tuple[nn.Module, str, nn.Module]] = []
    keeper: dict[int, int] = {}

    def visit(parent: nn.Module, index: int) -> None:
        for key, child in list(parent._modules.items()):
            if child is None:
                continue
            if id(child) in shared and keeper.setdefault(id(child), index) != index:
                parent._modules[key] = copy.deepcopy(child)
                copies.append((parent, key, child))
            else:
                visit(child, index)

    for index, step in enumerate(steps):
        visit(step, index)
    return copies
