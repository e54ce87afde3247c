"""A ``torch_geometric.nn.Sequential`` to stepped form and back: its first run of message-passing layers (each with
the norm / activation / dropout modules after it) becomes one `GNNStack` child, and its generated forward one that
calls the regrouped children."""

from __future__ import annotations

import inspect
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from torch import nn
from torch_geometric.nn import Sequential as PygSequential
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.sequential import Child

from theseus_core import Projected

from .records import _finish_conversion, _Record, _shared_modules, _unshare
from .steps import GNNStack, GNNStep

_POST_MODULES = (  # what may follow a conv inside a step of a Sequential stack
    "torch.nn.modules.activation",
    "torch.nn.modules.dropout",
    "torch.nn.modules.batchnorm",
    "torch.nn.modules.normalization",
    "torch.nn.modules.instancenorm",
    "torch_geometric.nn.norm",
)


@dataclass
@dataclass
class _SequentialRecord(_Record):
    children: list[Child]
    forward: Any  # the instance's own forward before stepping (PyG generates one), or None
    start: int  # position of the first step child
    step_sizes: list[int]  # children per original step
    input_var: str
    output_var: str
    auto_names: bool  # children were named module_0, module_1, ... by PyG


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
