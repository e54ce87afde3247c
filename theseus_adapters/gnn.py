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
    theseus = th.replace_(model, gnn.plan(model, num_layers=2))
    ...  # train as usual, model(x, edge_index, ...)
    theseus.finalize()  # the plan's on_finalize converts back: a GCN with num_layers=2
    # or: theseus.restore(); gnn.from_steps_(model)  -> the original model, bit-identical

While stepped, a ``BasicGNN`` is a `SteppedGNN` (its class is swapped, as ``torch.nn.utils.parametrize``
does, and swapped back by `from_steps_`); a ``Sequential`` keeps its class and gets one `GNNStack` child.
"""

from __future__ import annotations

import copy
import inspect
import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn
from torch_geometric.nn import Sequential as PygSequential
from torch_geometric.nn.conv import EdgeConv, MessagePassing
from torch_geometric.nn.models.basic_gnn import BasicGNN
from torch_geometric.nn.sequential import Child

from theseus_core import ModuleSpec, Plan, Projected, even_group_sizes
from theseus_core.spec import Projection

LAYER_OUTPUTS = "layer_outputs"
"""Input name under which a step appends its output to a list (for jumping knowledge)."""

BASIC_GNN_INPUTS = ("edge_index", "edge_weight", "edge_attr", "batch", "batch_size")
"""The inputs a stepped ``BasicGNN`` hands to every step, in ``BasicGNN.forward`` order."""

_POST_MODULES = (  # what may follow a conv inside a step of a Sequential stack
    "torch.nn.modules.activation",
    "torch.nn.modules.dropout",
    "torch.nn.modules.batchnorm",
    "torch.nn.modules.normalization",
    "torch.nn.modules.instancenorm",
    "torch_geometric.nn.norm",
)


# ----------------------------------------------------------------------------------------------- steps
class _Function(nn.Module):
    """A plain function (``act=torch.tanh``) as a stateless module, so that a step can hold it."""

    def __init__(self, function: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.function = function

    def forward(self, x: Tensor) -> Tensor:
        return self.function(x)

    def extra_repr(self) -> str:
        return getattr(self.function, "__name__", repr(self.function))


class GNNStep(nn.Module):
    """One message-passing layer and the modules applied after it: ``conv → post[0] → post[1] → ...``.

    Called as ``step(x, **inputs)``: ``inputs`` holds the graph (``edge_index=...``, ``edge_weight=...``);
    the step picks what its layers take. When ``inputs[LAYER_OUTPUTS]`` is a list, the output is appended
    to it (jumping knowledge).

    Args:
        conv: The message-passing layer, called
            ``conv(x, *[inputs[n] for n in conv_args], **{n: inputs.get(n) for n in conv_kwargs})``.
        post: Modules applied in order to the conv's output (activation, norm, dropout), each called
            ``post[i](x, *[inputs.get(n) for n in post_args[i]])``. (default: none)
        conv_args: Names of the inputs passed positionally after ``x``. (default: ``("edge_index",)``)
        conv_kwargs: Names of the inputs passed by keyword. (default: those of ``edge_weight`` and
            ``edge_attr`` that ``conv.forward`` takes)
        post_args: Per post module, the names of the inputs passed after ``x``. (default: none)

    Shapes:
        ``x``: ``[num_nodes, in_channels]`` → ``[num_nodes, out_channels]``.
    """

    def __init__(
        self,
        conv: nn.Module,
        post: Sequence[nn.Module] = (),
        *,
        conv_args: Sequence[str] = ("edge_index",),
        conv_kwargs: Sequence[str] | None = None,
        post_args: Sequence[Sequence[str]] | None = None,
    ) -> None:
        super().__init__()
        self.conv = conv
        self.post = nn.ModuleList(post)
        self.conv_args = tuple(conv_args)
        if conv_kwargs is None:
            conv_kwargs = [name for name in ("edge_weight", "edge_attr") if name in _forward_parameters(conv)]
        self.conv_kwargs = tuple(conv_kwargs)
        self.post_args = tuple(tuple(names) for names in post_args) if post_args is not None else ((),) * len(post)
        if len(self.post_args) != len(self.post):
            raise ValueError(f"post_args has {len(self.post_args)} entries for {len(self.post)} post modules")

    @property
    def in_channels(self) -> int | None:
        """Width of the step's input (``None`` when the conv does not tell, e.g. lazy ``-1``)."""
        return _conv_widths(self.conv)[0]

    @property
    def out_channels(self) -> int | None:
        """Width of the step's output."""
        return _conv_widths(self.conv)[1]

    def forward(self, x: Tensor, **inputs: Any) -> Tensor:
        missing = [name for name in self.conv_args if name not in inputs]
        if missing:
            raise TypeError(f"GNNStep needs the inputs {missing}; call it as step(x, edge_index=..., ...)")
        keywords = {name: inputs.get(name) for name in self.conv_kwargs}
        x = self.conv(x, *(inputs[name] for name in self.conv_args), **keywords)
        for module, names in zip(self.post, self.post_args, strict=True):
            x = module(x, *(inputs.get(name) for name in names))
        outputs = inputs.get(LAYER_OUTPUTS)
        if outputs is not None:
            outputs.append(x)
        return x

    def extra_repr(self) -> str:
        return f"conv_args={self.conv_args}, conv_kwargs={self.conv_kwargs}"


class GNNStack(nn.Sequential):
    """Steps run in order: ``x`` flows through, every other input goes to every step unchanged.

    Args:
        *steps: The `GNNStep` modules (or, during replacement, the core's sites standing for groups).
        input_names: Names of the inputs that may be passed positionally after ``x``, in order; keyword
            inputs are accepted too. (default: none)
    """

    def __init__(self, *steps: nn.Module, input_names: Sequence[str] = ()) -> None:
        super().__init__(*steps)
        self.input_names = tuple(input_names)

    def forward(self, x: Tensor, *args: Any, **inputs: Any) -> Tensor:
        if len(args) > len(self.input_names):
            raise TypeError(
                f"GNNStack takes x and at most {len(self.input_names)} positional inputs {self.input_names}"
            )
        inputs.update(zip(self.input_names, args, strict=False))
        for step in self:
            x = step(x, **inputs)
        return x


class SteppedGNN(nn.Module):
    """What a ``BasicGNN`` is while stepped: its layers as a `GNNStack` in ``steps``.

    Not constructed directly: `to_steps_` swaps the class of a ``BasicGNN`` to this one and keeps every
    other attribute (``jk``, ``lin``, ``in_channels``, ...); `from_steps_` swaps it back. Called like
    ``BasicGNN.forward``, minus ``num_sampled_nodes_per_hop`` trimming (a site changes how many layers
    run, so per-layer trimming cannot be known in advance). ``num_layers`` counts the steps.
    """

    def __init__(self) -> None:
        raise TypeError("a SteppedGNN is made by theseus_adapters.gnn.to_steps_(basic_gnn)")

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        edge_attr: Tensor | None = None,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        num_sampled_nodes_per_hop: list[int] | None = None,
        num_sampled_edges_per_hop: list[int] | None = None,
    ) -> Tensor:
        if num_sampled_nodes_per_hop is not None or num_sampled_edges_per_hop is not None:
            raise NotImplementedError(
                "a stepped GNN does not trim per layer (num_sampled_nodes_per_hop); call it without, "
                "outputs for the seed nodes are the same"
            )
        layer_outputs: list[Tensor] | None = [] if hasattr(self, "jk") else None
        x = self.steps(
            x,
            edge_index=edge_index,
            edge_weight=edge_weight,
            edge_attr=edge_attr,
            batch=batch,
            batch_size=batch_size,
            **{LAYER_OUTPUTS: layer_outputs},
        )
        if layer_outputs is not None:
            x = self.jk(layer_outputs)
        if hasattr(self, "lin"):
            x = self.lin(x)
        return x

    def extra_repr(self) -> str:
        return f"stepped {self._steps_record.cls.__name__}, num_layers={self.num_layers}"


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


def _forward_parameters(module: nn.Module) -> set[str]:
    try:
        return set(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _widths(layer: nn.Module) -> tuple[int, int] | None:
    if isinstance(layer, nn.Linear):
        return layer.in_features, layer.out_features
    widths = getattr(layer, "in_channels", None), getattr(layer, "out_channels", None)
    if all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths):
        return widths
    return None


def _conv_widths(conv: nn.Module) -> tuple[int | None, int | None]:
    """(input, output) feature widths of a message-passing layer; ``None`` where it cannot tell."""
    own = _widths(conv)
    if own is not None and not isinstance(conv, EdgeConv):
        heads = getattr(conv, "heads", 1)  # GAT, GATv2, Transformer: concatenated heads
        return own[0], own[1] * heads if getattr(conv, "concat", False) and isinstance(heads, int) else own[1]
    layers = [w for w in (_widths(m) for m in conv.modules() if m is not conv) if w is not None]
    if not layers:
        return None, None
    first = layers[0][0] // 2 if isinstance(conv, EdgeConv) else layers[0][0]  # EdgeConv: MLP on [x_i, x_j - x_i]
    return first, layers[-1][1]


def _layout(step: GNNStep) -> tuple[Any, ...]:
    """How a step post-processes: the types of its post modules and their inputs."""
    return tuple((type(module), names) for module, names in zip(step.post, step.post_args, strict=True))


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
    """Default successor factory: a deep copy of one layer (step) of the group.

    The group's first layer, as BERT-of-Theseus initialises each successor from the bottom layer of its group;
    but the group that ends with a ``BasicGNN``'s last layer copies that last layer, which maps to
    ``out_channels`` and is not followed by norm / activation / dropout (unless ``jk`` is set). Raises
    `ValueError` when neither fits (one group for the whole model: no layer maps ``in_channels`` to
    ``out_channels``); use `conv_successor` then.
    """
    return copy.deepcopy(_template_step(steps, check_widths=True))


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
        conv = self.make_conv(in_channels, out_channels)
        takes = _forward_parameters(conv)
        return GNNStep(
            conv,
            [copy.deepcopy(module) for module in template.post],
            conv_args=template.conv_args[:1],
            conv_kwargs=[name for name in template.conv_kwargs if name in takes],
            post_args=template.post_args,
        )

    def __repr__(self) -> str:
        return f"conv_successor({getattr(self.make_conv, '__qualname__', self.make_conv)!r})"


# -------------------------------------------------------------------------------------------- plan
class _ConvertBack:
    """The plan's ``on_finalize``: turn the stepped GNN at ``path`` back into an ordinary model."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, model: nn.Module) -> None:
        gnn = model.get_submodule(self.path)
        record = gnn.__dict__["_steps_record"]
        if _convert_back(gnn, record) is not None:  # stays stepped: drop what only an undo needed
            record.unshared.clear()
            if isinstance(gnn, SteppedGNN):
                gnn.num_layers = len(gnn.steps)

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
    successor: Callable[[list[GNNStep]], nn.Module] | None = None,
    in_proj: Projection = None,
    out_proj: Projection = None,
) -> Plan:
    """Specs that compress a stepped GNN to ``num_layers`` layers, one successor per group of layers.

    Only reads the model. A group is a run of consecutive steps (conv, norm, activation, dropout); each
    becomes one successor layer, so the finalized model has ``num_layers`` layers. ``finalize()`` then
    converts back (the plan's ``on_finalize``): a ``BasicGNN`` of the original class when every successor is a
    plain `GNNStep` with the model's conv type, so its state_dict loads with ``strict=True`` into
    ``type(model)(..., num_layers=num_layers)``; otherwise (another conv kind, projections) the model stays a
    working `SteppedGNN`. A ``Sequential`` always becomes an ordinary ``Sequential`` again (projections become
    children of their own) unless a successor is not a `GNNStep`.

    Args:
        model: The model holding exactly one GNN converted by `to_steps_` (the GNN itself or a parent).
        num_layers: Layers of the compressed GNN, ``1 <= num_layers <`` the GNN's. (default: ``2``)
        group_sizes: Layers per group, in order, summing to the GNN's layer count, e.g. ``[3, 1]``.
            (default: as even as possible, larger groups first; its length must equal ``num_layers``)
        successor: Factory ``(list of GNNStep) -> nn.Module``. (default: `copy_step`; for another kind
            of layer, `conv_successor`)
        in_proj, out_proj: ``"linear"`` or ``None``, passed to every `theseus_core.ModuleSpec`: learned
            projections for successors whose widths differ from their group's. Not with ``jk="max"``,
            whose head takes every layer's output at the model's width. (default: ``None``)

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
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or not 1 <= num_layers < total:
        raise ValueError(
            f"num_layers must be an integer with 1 <= num_layers < {total} (the GNN's), got {num_layers!r}"
        )
    sizes = even_group_sizes(total, num_layers) if group_sizes is None else list(group_sizes)
    if len(sizes) != num_layers or any(not isinstance(s, int) or s < 1 for s in sizes) or sum(sizes) != total:
        raise ValueError(
            f"group_sizes {sizes} must be {num_layers} positive integers (num_layers) summing to {total} layers"
        )
    if (in_proj is not None or out_proj is not None) and getattr(gnn, "jk_mode", None) == "max":
        raise ValueError("jk='max' takes every layer's output at the model's width: projections cannot be used")
    specs = []
    for start, stop in itertools.pairwise(itertools.accumulate(sizes, initial=0)):
        group_path = f"{stack_path}[{start}:{stop}]"
        if successor is None:  # check now what copy_step will do inside replace_
            try:
                _template_step(steps[start:stop], check_widths=True)
            except ValueError as error:
                raise ValueError(f"group {group_path}: {error}") from None
        specs.append(ModuleSpec(group_path, copy_step if successor is None else successor, in_proj, out_proj))
    return Plan(tuple(specs), on_finalize=_ConvertBack(path))


__all__ = [
    "BASIC_GNN_INPUTS",
    "LAYER_OUTPUTS",
    "GNNStack",
    "GNNStep",
    "SteppedGNN",
    "conv_successor",
    "copy_step",
    "from_steps_",
    "plan",
    "to_steps_",
]
