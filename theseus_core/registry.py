"""Successors by predecessor type: the registry every plan consults, and the one lookup of a factory.

Users register how a group of their own module type is compressed::

    @th.register_successor(MyBlock)
    def half_width_block(group: list[MyBlock]) -> nn.Module:
        return MyBlock(width=group[0].width // 2)

`replace_` then uses it for every `ModuleSpec` without an explicit successor
whose group starts with a ``MyBlock`` (subclasses included, nearest type first).

Adapters register their defaults here too (``theseus_adapters.resnet`` for torchvision's and timm's
``BasicBlock`` / ``Bottleneck``, ``theseus_adapters.hf`` for transformers layers, ``theseus_adapters.gnn``
for ``GNNStep``), with ``fallback=True``, and their plans leave the choice to the registry: a user's
registration wins, from a private registry passed to `replace_` (consulted first) or by replacing the
default deliberately (``register_successor(BasicBlock, replace=True)``; `SuccessorRegistry.unregister`
undoes it). A type may also have named alternatives (``"mobilenet_v2"``) that a spec picks by name.

One factory style: a plain function ``factory(group)``, ``factory(group, model)`` or
``factory(group, model, *, option=...)``. The options are the spec's (`ModuleSpec.options`, filled by the
adapters' plans: the layer to copy, the stride of a downsampling group, ...); a factory gets the ones it
names (all of them with ``**options``), so a user's ``factory(group)`` works under any adapter's plan.

One lookup: `find_successor` walks the registries and each type's bases; `SuccessorRegistry.find` and ``lookup``,
`registered_successor` (what a plan checks before anything changes) and `factory_for` (what `replace_` builds) are
each one call of it. Planning (`plan`, `even_group_sizes`, `copy_module`) lives in `theseus_core.planning`.
"""

from __future__ import annotations

import fnmatch
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from torch import nn

from .spec import DEFAULT_SUCCESSOR, ModuleSpec, SuccessorFactory, resolve


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _slot_name(cls: type, name: str) -> str:
    return _type_name(cls) if name == DEFAULT_SUCCESSOR else f"{_type_name(cls)}:{name}"


def _describe(factory: object) -> str:
    return getattr(factory, "__qualname__", None) or repr(factory)


@dataclass(frozen=True)
class _Entry:
    factory: SuccessorFactory
    fallback: bool  # an adapter's default: it stays below any other registration for its slot


class SuccessorRegistry:
    """Maps predecessor module types (and, per type, alternative names) to successor factories.

    A slot is a type and a name (``"default"`` unless given). Registering a slot twice raises: silently
    overwriting a mapping hides bugs. Replacing one takes ``replace=True``, and `unregister` undoes the
    latest registration of a slot, bringing back the one it replaced.
    """

    def __init__(self) -> None:
        self._slots: dict[tuple[type, str], list[_Entry]] = {}

    def register(
        self,
        predecessor_type: type[nn.Module],
        name: str = DEFAULT_SUCCESSOR,
        *,
        replace: bool = False,
        fallback: bool = False,
    ) -> Callable[[SuccessorFactory], SuccessorFactory]:
        """Decorator registering a plain function as the successor factory of a slot.

        Args:
            predecessor_type: The module type of the groups this factory compresses (a group is looked up
                by the type of its first module, nearest registered base class first).
            name: ``"default"`` for the factory specs use unless they name another, or the name of an
                alternative (``"mobilenet_v2"``) that a spec picks with ``successor="mobilenet_v2"``.
                (default: ``"default"``)
            replace: Register over an existing entry of the slot; `unregister` brings that entry back.
                (default: ``False``: an occupied slot raises)
            fallback: An adapter's default: it goes below whatever is already registered for the slot, so a
                user who registered first keeps their factory. A second fallback for a slot raises.
                (default: ``False``)

        Raises:
            TypeError: ``predecessor_type`` is not an ``nn.Module`` subclass, ``name`` not a string, or the
                factory is not callable.
            KeyError: the slot is taken and ``replace`` is not set.
        """
        if not (isinstance(predecessor_type, type) and issubclass(predecessor_type, nn.Module)):
            raise TypeError(f"register_successor expects an nn.Module subclass, got {predecessor_type!r}")
        if not isinstance(name, str) or not name:
            raise TypeError(f"a successor's name must be a non-empty string, got {name!r}")

        def decorator(factory: SuccessorFactory) -> SuccessorFactory:
            if not callable(factory):
                raise TypeError(f"a successor factory must be callable, got {factory!r}")
            entries = self._slots.setdefault((predecessor_type, name), [])
            if fallback:
                if entries and entries[0].fallback:
                    raise KeyError(
                        f"{_slot_name(predecessor_type, name)} already has a default "
                        f"({_describe(entries[0].factory)!r}); an adapter registers its defaults once"
                    )
                entries.insert(0, _Entry(factory, True))
            elif entries and not replace:
                raise KeyError(
                    f"a successor for {_slot_name(predecessor_type, name)} is already registered "
                    f"({_describe(entries[-1].factory)!r}); pass replace=True to use yours instead "
                    f"(unregister undoes it)"
                    + (
                        ", or register it in a private th.SuccessorRegistry() for replace_"
                        if self is DEFAULT_REGISTRY
                        else ""
                    )
                )
            else:
                entries.append(_Entry(factory, False))
            return factory

        return decorator

    def unregister(self, predecessor_type: type[nn.Module], name: str = DEFAULT_SUCCESSOR) -> SuccessorFactory:
        """Removes and returns the latest factory of a slot (the one it replaced, if any, is used again).

        Raises:
            KeyError: nothing is registered for the slot.
        """
        entries = self._slots.get((predecessor_type, name))
        if not entries:
            raise KeyError(f"no successor registered for {_slot_name(predecessor_type, name)}")
        entry = entries.pop()
        if not entries:
            del self._slots[(predecessor_type, name)]
        return entry.factory

    def get(self, predecessor_type: type[nn.Module], name: str = DEFAULT_SUCCESSOR) -> SuccessorFactory | None:
        """The factory registered for exactly this type and name (no base classes), or ``None``."""
        entries = self._slots.get((predecessor_type, name))
        return entries[-1].factory if entries else None

    def find(self, module_type: type, name: str = DEFAULT_SUCCESSOR) -> SuccessorFactory | None:
        """The factory for ``module_type`` and ``name`` from the nearest registered base class, or ``None``."""
        return find_successor(module_type, name, (self,), required=False)

    def names(self, module_type: type) -> list[str]:
        """The names registered for ``module_type`` or a base class of it: the successors a spec can pick."""
        bases = set(module_type.__mro__)
        return sorted({name for cls, name in self._slots if cls in bases})

    def lookup(self, group: Sequence[nn.Module], name: str = DEFAULT_SUCCESSOR) -> SuccessorFactory:
        """The factory for a group, by the type of its first module (nearest registered base class).

        Raises:
            LookupError: none registered; the message lists the names that are.
        """
        return find_successor(type(group[0]), name, (self,))

    def list(self, pattern: str = "*") -> list[str]:
        """The registered slots matching a glob ``pattern``: ``"pkg.Type"`` for a type's default,
        ``"pkg.Type:name"`` for a named alternative."""
        names = sorted(_slot_name(cls, name) for cls, name in self._slots)
        return [name for name in names if fnmatch.fnmatchcase(name, pattern)]

    def __contains__(self, predecessor_type: object) -> bool:
        return (predecessor_type, DEFAULT_SUCCESSOR) in self._slots

    def __repr__(self) -> str:
        return f"SuccessorRegistry({self.list()})"


DEFAULT_REGISTRY = SuccessorRegistry()
register_successor = DEFAULT_REGISTRY.register
list_successors = DEFAULT_REGISTRY.list


@overload
def find_successor(
    module_type: type,
    name: str = ...,
    registries: Sequence[SuccessorRegistry] = ...,
    *,
    required: Literal[True] = ...,
) -> SuccessorFactory: ...


@overload
def find_successor(
    module_type: type, name: str = ..., registries: Sequence[SuccessorRegistry] = ..., *, required: bool
) -> SuccessorFactory | None: ...


def find_successor(
    module_type: type,
    name: str = DEFAULT_SUCCESSOR,
    registries: Sequence[SuccessorRegistry] = (DEFAULT_REGISTRY,),
    *,
    required: bool = True,
) -> SuccessorFactory | None:
    """The one lookup of a factory, which every other goes through: the factory for groups starting with a
    ``module_type``, from the first of ``registries`` that has one for the type or a base class of it (nearest
    first). `replace_` passes `lookup_order` (its ``registry`` first, then the default).

    Returns:
        The factory; ``None`` when no registry has one and ``required`` is false.

    Raises:
        LookupError: no registry has one and ``required`` is true (the default); the message lists the names they
            have for the type.
    """
    for registry in registries:
        for cls in module_type.__mro__:
            factory = registry.get(cls, name)
            if factory is not None:
                return factory
    if not required:
        return None
    available = sorted({n for registry in registries for n in registry.names(module_type)})
    if available:
        raise LookupError(
            f"no successor {name!r} registered for {_type_name(module_type)}; the registered ones are {available}"
        )
    named = "" if name == DEFAULT_SUCCESSOR else f" {name!r}"
    slot = module_type.__name__ + ("" if name == DEFAULT_SUCCESSOR else f", {name!r}")
    raise LookupError(
        f"no successor{named} registered for {_type_name(module_type)}; pass ModuleSpec(..., successor=...) "
        f"or register one with @register_successor({slot}) (an adapter registers its defaults "
        f"when it is imported)"
    )


def build_successor(model: nn.Module, spec: ModuleSpec, registry: SuccessorRegistry | None = None) -> Any:
    """The successor `replace_` builds for ``spec`` in ``model`` (before its projections), without changing
    anything: the spec's factory, or the one the registries give for its group (``registry`` first, then the
    default), called with the group, the model and the spec's options. To see what a plan will do.

    Raises:
        LookupError: no registry has a successor for the group (the message names the group).
    """
    group = list(resolve(model, spec.path).modules)
    return call_factory(factory_for(spec, type(group[0]), registry), group, model, spec.options)


def lookup_order(registry: SuccessorRegistry | None = None) -> tuple[SuccessorRegistry, ...]:
    """The registries `replace_` searches for a spec without a factory of its own: ``registry`` first, then the
    default one."""
    return (DEFAULT_REGISTRY,) if registry in (None, DEFAULT_REGISTRY) else (registry, DEFAULT_REGISTRY)


def registered_successor(
    module_type: type, registry: SuccessorRegistry | None = None, name: str = DEFAULT_SUCCESSOR
) -> SuccessorFactory | None:
    """What `replace_` (given ``registry``) builds for a group that starts with a ``module_type`` and names
    ``name`` or nothing, or ``None`` when no registry has it: plans call this to check, before anything changes,
    what the successor will be."""
    return find_successor(module_type, name, lookup_order(registry), required=False)


def factory_for(spec: ModuleSpec, module_type: type, registry: SuccessorRegistry | None = None) -> SuccessorFactory:
    """The factory of a spec whose group starts with a ``module_type``: its own, or the registries' for the
    name it gives (``registry`` first, then the default registry)."""
    if spec.successor is not None and not isinstance(spec.successor, str):
        return spec.successor
    try:
        return find_successor(module_type, spec.successor or DEFAULT_SUCCESSOR, lookup_order(registry))
    except LookupError as error:
        raise LookupError(f"group {spec.path!r}: {error}") from None


def call_factory(factory: SuccessorFactory, group: list[nn.Module], model: nn.Module, options: Mapping[str, Any]):
    """Calls a factory in the one style: ``factory(group)``, ``factory(group, model)``, with the keyword
    ``options`` it names (every option when it takes ``**options``). The model is passed when the factory's second
    positional parameter has no default or is named ``model``; ``factory(group, stride=1)`` gets options only."""
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: the group only
        return factory(group)
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_all = any(p.kind is p.VAR_KEYWORD for p in parameters)
    named = {p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    given = {key: value for key, value in options.items() if takes_all or key in named}
    # The model is the second positional parameter when it has no default (or is named ``model``): in
    # ``factory(group, source=None)`` the second parameter is an option, not the model.
    takes_model = (
        len(positional) >= 2 and (positional[1].default is inspect.Parameter.empty or positional[1].name == "model")
    ) or any(p.kind is p.VAR_POSITIONAL for p in parameters)
    for parameter in positional[: 2 if takes_model else 1]:
        given.pop(parameter.name, None)  # an option never shadows the group or the model
    return factory(group, model, **given) if takes_model else factory(group, **given)
