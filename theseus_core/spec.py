"""What to replace: `ModuleSpec`, `Plan`, and the resolution of group paths.

A *group* is a module path inside a model: one module (``"layer3"``,
``"encoder.layer[4]"``) or a contiguous slice of an ``nn.ModuleList`` /
``nn.Sequential`` (``"bert.encoder.layer[0:2]"``). Resolution turns a path into
the container that holds the group and the keys of the group's modules in it;
it never mutates anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from torch import nn

SuccessorFactory = Callable[..., nn.Module]
"""Builds a successor from the list of predecessor modules of a group, in one style: ``factory(group)``,
``factory(group, model)`` (the model being replaced, before any change, e.g. to copy a layer outside the
group), and the keyword options of the spec that it names (``factory(group, model, *, stride)``)."""

DEFAULT_SUCCESSOR = "default"
"""The registry name of a type's default successor; other names are alternatives a spec picks."""

Projection = nn.Module | Literal["linear"] | None
"""A projection between widths: a module, ``"linear"`` to have one created, or ``None``."""

_COMPONENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*|\d+)?(?P<index>(\[-?\d+\])*)(?P<slice>\[-?\d*:-?\d*\])?$")


@dataclass(frozen=True)
class ModuleSpec:
    """One predecessor group and the successor that replaces it.

    Args:
        path: Where the group lives. One module (``"layer3"``, ``"blocks[2]"``) or
            a contiguous slice of an ``nn.ModuleList`` / ``nn.Sequential``
            (``"encoder.layer[0:2]"``, stop exclusive); a model that is itself an
            ``nn.Sequential`` is sliced with a bare ``"[0:2]"``. Never the whole
            model (``""``).
        successor: A factory called with the list of the group's predecessor
            modules that returns the successor module (e.g.
            ``lambda group: copy.deepcopy(group[0])``; see `copy_module`). A
            factory with a second parameter is called ``factory(group, model)``
            with the model being replaced, before any change: resolve what you
            copy from there, not from a model captured when the spec was made,
            so that the spec works on copies of the model too.
            ``None`` (default) asks the successor registry for the default of
            the type of the group's first module; a string asks it for that
            named alternative (``"mobilenet_v2"``).
        in_proj: Applied to the group's input before the successor, when the
            successor is narrower (or wider) than the predecessor. A module
            (each `replace_` uses a copy of it, as it builds a new successor),
            or ``"linear"`` to create a learned ``nn.Linear`` (a 1×1 convolution
            when the successor starts with a convolution) from the predecessor's
            input width to the successor's. (default: ``None``)
        out_proj: The same at the group's output, from the successor's output
            width back to the predecessor's. (default: ``None``)
        options: Keyword arguments for the successor factory, which gets those
            it names (all of them when it takes ``**options``): adapters put
            there what their builders need (the layer to copy, the stride of a
            downsampling group). Not part of the spec's hash. (default: none)

    The spec is inert: nothing is resolved or built until `replace_`.
    """

    path: str
    successor: SuccessorFactory | str | None = None
    in_proj: Projection = None
    out_proj: Projection = None
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.path, str):
            raise TypeError(f"ModuleSpec.path must be a string such as 'blocks[0:2]', got {type(self.path).__name__}")
        parse_path(self.path)  # raises with a readable message
        if not isinstance(self.options, Mapping) or not all(isinstance(key, str) for key in self.options):
            raise TypeError(f"ModuleSpec({self.path!r}).options must map option names to values, got {self.options!r}")
        object.__setattr__(self, "options", dict(self.options))  # the spec's own copy
        if isinstance(self.successor, str):
            if not self.successor:
                raise ValueError(f"ModuleSpec({self.path!r}).successor names no registered successor ('')")
            return self._check_projections()
        if isinstance(self.successor, nn.Module):
            raise TypeError(
                f"ModuleSpec({self.path!r}).successor got a module instance ({type(self.successor).__name__}), "
                f"but it takes a factory that builds a new successor from the group: pass `th.copy_module(0)` "
                f"or a function such as `lambda group: MyBlock(...)`"
            )
        if self.successor is not None and not callable(self.successor):
            raise TypeError(
                f"ModuleSpec({self.path!r}).successor must be a callable taking the list of predecessor "
                f"modules, got {type(self.successor).__name__}; pass a factory such as "
                f"theseus_core.copy_module(0), or None to use the registry"
            )
        self._check_projections()

    def _check_projections(self) -> None:
        for name in ("in_proj", "out_proj"):
            value = getattr(self, name)
            if value is not None and value != "linear" and not isinstance(value, nn.Module):
                raise TypeError(
                    f"ModuleSpec({self.path!r}).{name} must be an nn.Module, 'linear' or None, got {value!r}"
                )


@dataclass(frozen=True)
class Plan(Sequence[ModuleSpec]):
    """An ordered collection of `ModuleSpec` with an optional finalize hook.

    Adapters return plans: the hook fixes what their model family needs after
    `Theseus.finalize` (a config's layer count, ``num_layers`` attributes). A
    plain list of specs is accepted wherever a plan is.

    Args:
        specs: The groups to replace; they must not overlap.
        on_finalize: Called with the model after every site became its
            successor, before `Theseus.finalize` checks the finalized model. It
            may return a callable that undoes what it did beyond the model's
            modules (a config it edited), which finalize calls when it refuses;
            the modules' structure and attributes finalize puts back itself.
            (default: ``None``)
        more_examples: Called with the first example batch given to `replace_`
            (its positional and keyword arguments), returns more batches to verify
            on, as ``(args, kwargs)`` pairs: what the family's config says the
            user's batch may miss (`theseus_adapters.hf`: a sequence longer than
            any attention window). (default: ``None``)
    """

    specs: tuple[ModuleSpec, ...]
    on_finalize: Callable[[nn.Module], Callable[[], None] | None] | None = field(default=None, compare=False)
    more_examples: Callable[..., list[tuple[tuple, dict[str, Any]]]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "specs", tuple(self.specs))
        for spec in self.specs:
            if not isinstance(spec, ModuleSpec):
                raise TypeError(f"a Plan holds ModuleSpec objects, got {type(spec).__name__}")

    @overload
    def __getitem__(self, index: int) -> ModuleSpec: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ModuleSpec]: ...
    def __getitem__(self, index):
        return self.specs[index]

    def __len__(self) -> int:
        return len(self.specs)

    def __iter__(self) -> Iterator[ModuleSpec]:
        return iter(self.specs)


@dataclass(frozen=True)
class ParsedPath:
    """A group path split into attribute steps and an optional final slice."""

    steps: tuple[str | int, ...]  # attribute names, or integer positions in a container
    slice: tuple[int | None, int | None] | None


def parse_path(path: str) -> ParsedPath:
    """Parses ``"a.b[1].c[0:2]"``; raises `ValueError` naming the path when malformed."""
    if path == "":
        raise ValueError("a group path cannot be the root (''); name a submodule such as 'blocks[0:2]'")
    steps: list[str | int] = []
    final_slice = None
    components = path.split(".")
    for position, component in enumerate(components):
        match = _COMPONENT.match(component)
        if match is None or (match["name"] is None and (position > 0 or not match.group(0))):
            raise ValueError(
                f"cannot parse group path {path!r} at {component!r}; use dotted attribute names with "
                f"optional [i] indices and an optional final [start:stop] slice, e.g. 'encoder.layer[0:2]'"
            )
        if match["name"] is not None:  # only the first component may start with an index: the model's own
            steps.append(match["name"])
        steps.extend(int(index) for index in re.findall(r"\[(-?\d+)\]", match["index"]))
        if match["slice"]:
            if position != len(components) - 1:
                raise ValueError(f"in group path {path!r} a [start:stop] slice may only end the path")
            start, stop = match["slice"][1:-1].split(":")
            final_slice = (int(start) if start else None, int(stop) if stop else None)
    return ParsedPath(tuple(steps), final_slice)


@dataclass(frozen=True)
class ResolvedGroup:
    """A group located in a model: its container, and its modules' keys there."""

    path: str
    container: nn.Module
    container_name: str  # qualified name of the container ('' for the root)
    keys: tuple[str, ...]  # consecutive child names of the group's modules in the container
    modules: tuple[nn.Module, ...]

    @property
    def qualified_names(self) -> tuple[str, ...]:
        prefix = f"{self.container_name}." if self.container_name else ""
        return tuple(prefix + key for key in self.keys)


def _child(module: nn.Module, step: str | int, walked: str, path: str) -> tuple[str, nn.Module]:
    """Returns (key, child) for one step; integer steps index a container by position."""
    if isinstance(step, int):
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            raise ValueError(
                f"group path {path!r}: {walked or 'the model'} is a {type(module).__name__}, not an "
                f"nn.ModuleList or nn.Sequential, so it cannot be indexed with [{step}]"
            )
        keys = list(module._modules)
        if not -len(keys) <= step < len(keys):
            raise ValueError(f"group path {path!r}: index {step} is out of range for {walked} ({len(keys)} modules)")
        key = keys[step]
    else:
        key = step
    child = module._modules.get(key)
    if child is None:
        available = ", ".join(name for name, value in module._modules.items() if value is not None)
        raise ValueError(
            f"group path {path!r}: {walked or 'the model'} ({type(module).__name__}) has no submodule "
            f"{key!r}; its submodules are: {available or 'none'}"
        )
    return key, child


def resolve(model: nn.Module, path: str) -> ResolvedGroup:
    """Locates the group named by ``path`` in ``model`` without changing anything."""
    parsed = parse_path(path)
    container: nn.Module = model
    container_name = ""
    if not parsed.steps:  # "[start:stop]": a slice of the model itself
        return _slice(model, "", parsed.slice, path)
    *walk, last = parsed.steps
    for step in walk:
        key, container = _child(container, step, container_name, path)
        container_name = f"{container_name}.{key}" if container_name else key
    if parsed.slice is None:
        key, module = _child(container, last, container_name, path)
        return ResolvedGroup(path, container, container_name, (key,), (module,))

    # A slice: `last` names the ModuleList / Sequential whose children form the group.
    key, sliced = _child(container, last, container_name, path)
    return _slice(sliced, f"{container_name}.{key}" if container_name else key, parsed.slice, path)


def _slice(sliced: nn.Module, container_name: str, bounds: tuple[int | None, int | None], path: str) -> ResolvedGroup:
    if not isinstance(sliced, (nn.ModuleList, nn.Sequential)):
        raise ValueError(
            f"group path {path!r}: {container_name or 'the model'} is a {type(sliced).__name__}; only an "
            f"nn.ModuleList or nn.Sequential can be sliced. Name a single module instead"
            + (f", e.g. {container_name!r}" if container_name else ", or the block list inside the model")
        )
    keys = list(sliced._modules)
    start, stop = bounds
    start = 0 if start is None else start + len(keys) if start < 0 else start
    stop = len(keys) if stop is None else stop + len(keys) if stop < 0 else stop
    if not 0 <= start < stop <= len(keys):
        raise ValueError(
            f"group path {path!r}: slice [{start}:{stop}] is out of range or empty for "
            f"{container_name or 'the model'}, which holds {len(keys)} modules; use 0 <= start < stop <= {len(keys)}"
        )
    group_keys = tuple(keys[start:stop])
    return ResolvedGroup(path, sliced, container_name, group_keys, tuple(sliced._modules[k] for k in group_keys))
