"""What `replace_` does before it touches the model: check the arguments, resolve the groups, build
and check the successors. Nothing here mutates the model; every error names the path at fault."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin

from .registry import SuccessorRegistry, call_factory, factory_for
from .runs import ModelState, cuda_devices, evaluating
from .site import (
    Projected,
    ReplacementSite,
    Router,
    boundary_width,
    group_boundary_width,
    make_projection,
    primary_output,
    primary_parameter_name,
    with_primary_output,
)
from .spec import ModuleSpec, ResolvedGroup, resolve


@dataclass
class Prepared:
    """A group with everything built for it, before the model is touched."""

    spec: ModuleSpec
    group: ResolvedGroup
    successor: Projected


def prepare(model: nn.Module, specs: Sequence[ModuleSpec], registry: SuccessorRegistry | None) -> list[Prepared]:
    """Resolves every group and builds its successor, checking all of it; the model is only read.
    Specs without a factory look one up in ``registry`` first, then in the default registry."""
    groups = [resolve(model, spec.path) for spec in specs]
    _check_no_overlap(groups)
    prepared = [
        Prepared(spec, group, _build_successor(model, spec, group, registry))
        for spec, group in zip(specs, groups, strict=True)
    ]
    _check_no_sharing(model, prepared)
    return prepared


def check_eval_route(value: str) -> None:
    if value not in Router.EVAL_ROUTES:
        raise ValueError(f"eval_route must be one of {Router.EVAL_ROUTES}, got {value!r}")


def check_arguments(
    model: nn.Module,
    specs: Any,
    seed: Any,
    eval_route: str,
    compile: Any,
    example_inputs: Any,
    example_kwargs: Any,
) -> dict[str, Any] | None:
    """Checks what `replace_` got; returns the resolved ``torch.compile`` options (``None``: no compilation)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"replace_ expects an nn.Module, got {type(model).__name__}")
    if isinstance(specs, ModuleSpec) or not isinstance(specs, Sequence) or not specs:
        raise TypeError("replace_ expects a non-empty list (or Plan) of ModuleSpec")
    seen: set[str] = set()
    for spec in specs:
        if not isinstance(spec, ModuleSpec):
            raise TypeError(f"replace_ expects ModuleSpec items, got {type(spec).__name__}: {spec!r}")
        if spec.path in seen:
            raise ValueError(f"group {spec.path!r} appears twice in the specs; each group is replaced once")
        seen.add(spec.path)
    if not isinstance(seed, Integral) or isinstance(seed, bool):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    check_eval_route(eval_route)
    if example_inputs is not None and not isinstance(example_inputs, (tuple, list)):
        raise TypeError(
            f"example_inputs must be a tuple of the model's positional arguments, e.g. (x,), or a list of "
            f"batches (tuples or dicts of keyword arguments), got {type(example_inputs).__name__}"
        )
    if isinstance(example_inputs, list):
        if not example_inputs:
            raise ValueError("example_inputs is an empty list; give at least one batch, or None to skip verifying")
        for index, batch in enumerate(example_inputs):
            if not isinstance(batch, (tuple, Mapping)):
                raise TypeError(
                    f"example_inputs[{index}] must be a tuple of positional arguments or a dict of keyword "
                    f"arguments, got {type(batch).__name__}"
                )
    if example_kwargs is not None and not isinstance(example_kwargs, Mapping):
        raise TypeError(f"example_kwargs must be a mapping of keyword arguments, got {type(example_kwargs).__name__}")
    for name, module in model.named_modules():
        if isinstance(module, ReplacementSite):
            raise ValueError(
                f"{name} is already a Theseus site: finalize() or restore() the existing handle "
                f"before calling replace_ again"
            )
    return compile_options(compile)


def example_batches(example_inputs: Any, example_kwargs: Any, specs: Any) -> list[tuple[tuple, dict[str, Any]]]:
    """The (positional, keyword) arguments of every batch `replace_` verifies on: the user's (``example_kwargs``
    merged into each), then those the plan adds from the first (`Plan.more_examples`). Empty without examples."""
    if example_inputs is None and example_kwargs is None:
        return []
    shared = dict(example_kwargs or {})
    given = example_inputs if isinstance(example_inputs, list) else [tuple(example_inputs or ())]
    batches = [
        ((), {**shared, **batch}) if isinstance(batch, Mapping) else (tuple(batch), dict(shared)) for batch in given
    ]
    more = getattr(specs, "more_examples", None)
    if more is not None:
        batches += [(tuple(args), dict(kwargs)) for args, kwargs in more(*batches[0])]
    return batches


ExampleCheck = Callable[[nn.Module, list[tuple[tuple, dict[str, Any]]]], str | None]
"""``check(model, batches)``: why the example batches cannot verify this model (a config field naming a window
longer than every batch), or ``None``."""

_EXAMPLE_CHECKS: list[ExampleCheck] = []


def register_example_check(check: ExampleCheck) -> ExampleCheck:
    """Registers a check that every `replace_` with example batches runs on the model and all its batches (the
    user's and the plan's `Plan.more_examples`) before anything changes, whatever made the specs (`plan` or an
    adapter). Adapters register what their family's config says the batches must cover (`theseus_adapters.hf`:
    every window, chunk or bucket size a config names must be exceeded by one batch). Usable as a decorator.

    Raises:
        ValueError: ``check`` is registered already.
    """
    if check in _EXAMPLE_CHECKS:
        raise ValueError(f"{getattr(check, '__qualname__', check)!r} is registered as an example check already")
    _EXAMPLE_CHECKS.append(check)
    return check


def check_examples(model: nn.Module, batches: list[tuple[tuple, dict[str, Any]]]) -> None:
    """Runs the registered example checks; the first reason refuses the batches (`VerificationError`)."""
    from .verify import VerificationError

    for check in _EXAMPLE_CHECKS:
        reason = check(model, batches)
        if reason is not None:
            raise VerificationError(f"{reason}. The model is unchanged.")


def compile_options(compile: Any) -> dict[str, Any] | None:
    """``torch.compile`` options for ``compile``, checked by torch without compiling anything.

    Unless the caller says otherwise: static shapes (the graph break at every site would otherwise make
    dynamo mark sizes dynamic after the first recompilation, which breaks or slows some models: timm
    resnet26d and mobilevit, Swin), and each compiled module counts its own recompilations
    (``isolate_recompiles``): every site's branches run through the same two wrapper forward methods, whose
    graphs dynamo would otherwise count together against ``recompile_limit`` (8), so that a model with more than
    four differently shaped sites (a ResNet's stages) fell back to eager for the rest; on a torch without that
    option (before 2.14) the sites share dynamo's limit as before."""
    if compile is False:
        return None
    if not isinstance(compile, (bool, Mapping)):
        raise TypeError(f"compile must be a bool or a dict of torch.compile options, got {compile!r}")
    isolated = (
        {"isolate_recompiles": True} if "isolate_recompiles" in inspect.signature(torch.compile).parameters else {}
    )
    options = {"dynamic": False, **isolated, **(compile if isinstance(compile, Mapping) else {})}
    try:
        torch.compile(_nothing, **options)  # checks mode, backend and option names; compiles nothing yet
    except Exception as error:
        raise ValueError(f"compile={dict(compile) if compile is not True else True!r} is not valid: {error}") from error
    return options


def _nothing() -> None:
    pass


def _check_no_overlap(groups: list[ResolvedGroup]) -> None:
    """No module with state may belong to two groups, and no group may lie inside another (a site inside a
    group's frozen predecessor would never be finalized). A stateless module shared between groups (GIN puts
    one ReLU in every layer) is harmless: it computes the same thing whichever route runs."""
    owner: dict[int, int] = {}
    roots = {id(module): index for index, group in enumerate(groups) for module in group.modules}
    for index, group in enumerate(groups):
        for module in group.modules:
            for inner in module.modules():
                other = index if inner is module else roots.get(id(inner), index)
                if other != index:
                    raise ValueError(
                        f"group {groups[other].path!r} lies inside group {group.path!r}; groups must not overlap"
                    )
                if inner not in group.modules and not _has_state(inner):
                    continue
                other = owner.setdefault(id(inner), index)
                if other != index:
                    raise ValueError(
                        f"groups {groups[other].path!r} and {group.path!r} overlap (they share a module); "
                        f"each predecessor module may belong to one group only"
                    )


def _has_state(module: nn.Module) -> bool:
    return any(True for _ in (*module.parameters(recurse=False), *module.buffers(recurse=False)))


def _build_successor(
    model: nn.Module, spec: ModuleSpec, group: ResolvedGroup, registry: SuccessorRegistry | None
) -> Projected:
    factory = factory_for(spec, type(group.modules[0]), registry)
    try:
        successor = call_factory(factory, list(group.modules), model, spec.options)
    except Exception as error:
        error.add_note(f"(while building the successor for group {spec.path!r})")
        raise
    if not isinstance(successor, nn.Module):
        raise TypeError(
            f"the successor factory for {spec.path!r} returned {type(successor).__name__}, not an nn.Module"
        )
    in_proj = _projection(spec, "in_proj", group.modules, successor)
    out_proj = _projection(spec, "out_proj", group.modules, successor)
    branch = Projected(successor, in_proj, out_proj, primary_parameter_name(group.modules[0]))
    # The group's device and dtype; a group without floating-point tensors (a pooling stage) takes the model's.
    modules = (*group.modules, model)
    reference = next((t for m in modules for t in (*m.parameters(), *m.buffers()) if t.is_floating_point()), None)
    if reference is not None:
        branch.to(device=reference.device, dtype=reference.dtype)
    return branch


def _projection(
    spec: ModuleSpec, side: str, predecessors: Sequence[nn.Module], successor: nn.Module
) -> nn.Module | None:
    value = getattr(spec, side)
    if isinstance(value, nn.Module):  # a copy: the spec is inert, and may serve several replacements
        return copy.deepcopy(value)
    if value != "linear":
        return value
    end = "in" if side == "in_proj" else "out"
    theirs, ours = group_boundary_width(predecessors, end), boundary_width(successor, end)
    if theirs is None or ours is None:
        unknown = "predecessor" if theirs is None else "successor"
        raise ValueError(
            f"{side}='linear' for group {spec.path!r}: cannot infer the {unknown}'s {end}put width (no Linear, "
            f"convolution or in_channels/out_channels layer found); pass the projection module instead"
        )
    if side == "in_proj":
        return make_projection(theirs[0], ours[0], ours[1])
    return make_projection(ours[0], theirs[0], ours[1])


def _check_no_sharing(model: nn.Module, prepared: list[Prepared]) -> None:
    """Successors must be new modules: sharing a tensor with the model would freeze or alter it."""
    model_modules = {id(m) for m in model.modules()}
    model_tensors = {id(t) for t in (*model.parameters(), *model.buffers())}
    seen: dict[int, str] = {}
    for item in prepared:
        path = item.spec.path
        for module in item.successor.modules():
            if id(module) in model_modules:
                raise ValueError(
                    f"the successor for {path!r} contains a module of the model ({type(module).__name__}); "
                    f"successors must be new modules, e.g. copy.deepcopy(group[0]) or theseus_core.copy_module(0)"
                )
        for tensor in (*item.successor.parameters(), *item.successor.buffers()):
            if id(tensor) in model_tensors:
                raise ValueError(
                    f"the successor for {path!r} shares a parameter or buffer with the model; "
                    f"build it from copies (copy.deepcopy)"
                )
            other = seen.setdefault(id(tensor), path)
            if other != path:
                raise ValueError(f"the successors for {other!r} and {path!r} share a parameter; give each its own")


def _structure(value: Any) -> Any:
    """Shapes and container types of an output, for comparing a successor with its group."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_structure(v) for v in value))
    if isinstance(value, Mapping):
        return ("mapping", tuple((k, _structure(v)) for k, v in value.items()))
    return (type(value).__name__,)


def check_successors(prepared: list[Prepared], group_inputs: list[Any], group_outputs: list[Any]) -> None:
    """Runs each successor (eval mode, no grad) on its group's real input from the example run and checks
    that it returns what the group returned: the same structure and shapes. Each run leaves no trace: the
    successor's tensors, attributes and mode and the RNG are put back (a quantizer that takes its scale from its
    first input still takes it from the first training batch, not from an example); a successor holding lazy
    modules materialises them (their first call), and gets its modes back."""
    for item, (args, kwargs), group_output in zip(prepared, group_inputs, group_outputs, strict=True):
        path = item.spec.path
        # a lazy module materialises on its first call, for good, and the check may be that call: a successor holding
        # one cannot be snapshotted, and gets its modes back only
        lazy = any(isinstance(m, LazyModuleMixin) and m.has_uninitialized_params() for m in item.successor.modules())
        before = None if lazy else ModelState(item.successor, values=True)
        try:
            devices = cuda_devices(item.successor)
            with evaluating([item.successor]), torch.random.fork_rng(devices=devices), torch.no_grad():
                output = item.successor(*args, **kwargs)
        except Exception as error:
            error.add_note(
                f"(the successor for group {path!r} failed on the group's input from the first example batch"
                f"{_width_hint(item)})"
            )
            raise
        finally:
            if before is not None:
                before.restore()
        expected, actual = _structure(group_output), _structure(output)
        if expected != actual:
            raise ValueError(
                f"the successor for group {path!r} returns {actual}, but the group returns {expected}; "
                + _shape_hint(item.successor.inner, group_output, output, args)
            )


def _width_hint(item: Prepared) -> str:
    """Advice for a successor that failed on its group's input, when its widths say what is wrong."""
    hints = []
    for side, end, projection in (
        ("in_proj", "in", item.successor.in_proj),
        ("out_proj", "out", item.successor.out_proj),
    ):
        theirs, ours = group_boundary_width(item.group.modules, end), boundary_width(item.successor.inner, end)
        if projection is None and theirs is not None and ours is not None and theirs[0] != ours[0]:
            hints.append(f"its {end}put width is {ours[0]}, the group's {theirs[0]}: add {side}='linear'")
    return "; " + "; ".join(hints) if hints else ""


def _shape_hint(successor: nn.Module, expected: Any, actual: Any, args: tuple = ()) -> str:
    """What to do about a successor whose output differs: a width a projection fixes, a shape none does, or an
    output of another structure (a tuple of other items, dpn's pair of paths) that the successor must fix."""
    if args and not isinstance(args[0], torch.Tensor):
        return (
            f"the group's input is a {type(args[0]).__name__}, not a tensor (blocks that carry several tensors, such "
            f"as dpn's pair of paths), which no projection applies to; make the successor take and return what the "
            f"group does"
        )
    try:
        marker = torch.empty(0)
        rest = _structure(with_primary_output(expected, marker)), _structure(with_primary_output(actual, marker))
        expected, actual = primary_output(expected), primary_output(actual)
    except (TypeError, IndexError, StopIteration):
        return "fix the successor"
    structure = (
        "make the successor return what the group returns (it differs beyond the tensor that flows on, which no "
        "projection fixes)"
        if rest[0] != rest[1]
        else None
    )
    if expected.dim() != actual.dim():
        return structure or "fix the successor"
    differing = [d for d in range(expected.dim()) if expected.shape[d] != actual.shape[d]]
    last, width = expected.dim() - 1, boundary_width(successor, "out")
    features = {1, last} if width is None else {1} if width[1] else {last}  # channels first, or last
    if differing and not set(differing) <= features:
        return (
            f"they differ in dimension {', '.join(map(str, differing))} (a spatial size or sequence length: a "
            f"different stride?), which no projection fixes; make the successor keep the group's output shape"
        )
    if structure is not None:
        return structure + (", and add out_proj='linear' for its width" if differing else "")
    return "fix the successor or add out_proj='linear'"
