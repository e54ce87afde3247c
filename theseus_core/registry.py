"""Default successors per predecessor type, and plans for consecutive groups.

Users register how a group of their own module type is compressed::

    @th.register_successor(MyBlock)
    def half_width_block(group: list[MyBlock]) -> nn.Module:
        return MyBlock(width=group[0].width // 2)

`replace_` then uses it for every `ModuleSpec` without an explicit successor
whose group starts with a ``MyBlock`` (subclasses included, nearest type first).
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Callable, Sequence

from torch import nn

from .spec import ModuleSpec, Plan, Projection, SuccessorFactory, resolve


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class SuccessorRegistry:
    """Maps predecessor module types to successor factories.

    Registering a type twice raises: silently overwriting a mapping hides bugs.
    `unregister` exists for notebooks that re-run a registering cell.
    """

    def __init__(self) -> None:
        self._factories: dict[type, SuccessorFactory] = {}

    def register(self, predecessor_type: type[nn.Module]) -> Callable[[SuccessorFactory], SuccessorFactory]:
        """Decorator registering a plain function as the default successor factory.

        Args:
            predecessor_type: The module type of the groups this factory compresses.

        Raises:
            TypeError: ``predecessor_type`` is not an ``nn.Module`` subclass.
            KeyError: ``predecessor_type`` already has a factory.
        """
        if not (isinstance(predecessor_type, type) and issubclass(predecessor_type, nn.Module)):
            raise TypeError(f"register_successor expects an nn.Module subclass, got {predecessor_type!r}")

        def decorator(factory: SuccessorFactory) -> SuccessorFactory:
            if not callable(factory):
                raise TypeError(f"a successor factory must be callable, got {factory!r}")
            existing = self._factories.get(predecessor_type)
            if existing is not None:
                raise KeyError(
                    f"a successor for {_type_name(predecessor_type)} is already registered "
                    f"({getattr(existing, '__qualname__', existing)!r}); unregister it first"
                )
            self._factories[predecessor_type] = factory
            return factory

        return decorator

    def unregister(self, predecessor_type: type[nn.Module]) -> SuccessorFactory:
        """Removes and returns the factory for ``predecessor_type``; raises `KeyError` if absent."""
        try:
            return self._factories.pop(predecessor_type)
        except KeyError:
            raise KeyError(f"no successor registered for {_type_name(predecessor_type)}") from None

    def lookup(self, group: Sequence[nn.Module]) -> SuccessorFactory:
        """The factory for a group, by the type of its first module (nearest registered base class)."""
        for cls in type(group[0]).__mro__:
            if cls in self._factories:
                return self._factories[cls]
        raise LookupError(
            f"no successor registered for {_type_name(type(group[0]))}; pass ModuleSpec(..., successor=...) "
            f"or register one with @register_successor({type(group[0]).__name__})"
        )

    def list(self, pattern: str = "*") -> list[str]:
        """Qualified names of the registered predecessor types matching a glob ``pattern``."""
        names = sorted(_type_name(cls) for cls in self._factories)
        return [name for name in names if fnmatch.fnmatchcase(name, pattern)]

    def __contains__(self, predecessor_type: object) -> bool:
        return predecessor_type in self._factories

    def __repr__(self) -> str:
        return f"SuccessorRegistry({self.list()})"


DEFAULT_REGISTRY = SuccessorRegistry()
register_successor = DEFAULT_REGISTRY.register
list_successors = DEFAULT_REGISTRY.list


class copy_module:  # noqa: N801 - used like a function: successor=copy_module(0)
    """Successor factory that deep-copies one module of the group (the paper's initialisation).

    ``copy_module(0)`` copies the group's first module, as BERT-of-Theseus
    initialises each successor from the bottom predecessor layer; ``-1`` copies
    the last.
    """

    def __init__(self, index: int = 0) -> None:
        self.index = index

    def __call__(self, group: list[nn.Module]) -> nn.Module:
        if not -len(group) <= self.index < len(group):
            raise IndexError(f"copy_module({self.index}) on a group of {len(group)} modules")
        return copy.deepcopy(group[self.index])

    def __repr__(self) -> str:
        return f"copy_module({self.index})"


def even_group_sizes(num_modules: int, num_groups: int) -> list[int]:
    """Splits ``num_modules`` into ``num_groups`` consecutive sizes differing by at most one,
    larger groups first (12 into 5 gives 3, 3, 2, 2, 2)."""
    if not 1 <= num_groups <= num_modules:
        raise ValueError(f"cannot split {num_modules} modules into {num_groups} groups; use 1 <= groups <= modules")
    size, extra = divmod(num_modules, num_groups)
    return [size + 1] * extra + [size] * (num_groups - extra)


def group_sizes_for(total: int, num_groups: int, group_sizes: Sequence[int] | None = None) -> list[int]:
    """Sizes of ``num_groups`` consecutive groups covering ``total`` modules: ``group_sizes`` checked, or
    `even_group_sizes` when it is ``None``. Every adapter and task validates group sizes through this one function.

    Raises:
        ValueError: ``num_groups`` is not an integer in ``[1, total]``, or ``group_sizes`` is not ``num_groups``
            positive integers summing to ``total``.
    """
    if not _is_int(num_groups) or not 1 <= num_groups <= total:
        raise ValueError(f"cannot split {total} modules into {num_groups!r} groups; use an integer in [1, {total}]")
    if group_sizes is None:
        return even_group_sizes(total, num_groups)
    sizes = list(group_sizes)
    if len(sizes) != num_groups or not all(_is_int(size) and size >= 1 for size in sizes) or sum(sizes) != total:
        raise ValueError(f"group_sizes {sizes} must be {num_groups} positive integers summing to {total}")
    return sizes


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def plan(
    model: nn.Module,
    container: str,
    *,
    group_sizes: Sequence[int] | None = None,
    num_groups: int | None = None,
    successor: SuccessorFactory | None = None,
    in_proj: Projection = None,
    out_proj: Projection = None,
) -> Plan:
    """Specs replacing every module of a container by consecutive groups.

    Args:
        model: The model holding the container (only read).
        container: Path of an ``nn.ModuleList`` / ``nn.Sequential``, e.g. ``"encoder.layer"``;
            ``""`` when the model itself is one (its specs are then ``"[0:2]"``, ...).
        group_sizes: Sizes of the consecutive groups, summing to the container's
            length; uneven sizes are fine (12 layers as 3, 3, 2, 2, 1, 1).
        num_groups: Instead of ``group_sizes``: this many groups as even as
            possible (`even_group_sizes`).
        successor, in_proj, out_proj: Passed to every `ModuleSpec`; ``successor=None``
            uses the registry.

    Returns:
        A `Plan` with one spec per group, in order.
    """
    if (group_sizes is None) == (num_groups is None):
        raise ValueError("pass exactly one of group_sizes or num_groups")
    if isinstance(in_proj, nn.Module) or isinstance(out_proj, nn.Module):
        raise TypeError("plan() would share one projection module between groups; pass 'linear' or write the specs")
    if container == "" and not isinstance(model, (nn.ModuleList, nn.Sequential)):
        raise ValueError(
            f"plan(model, '') groups the model's own children, so the model must be an nn.Sequential or "
            f"nn.ModuleList, not a {type(model).__name__}; name its block list instead, e.g. plan(model, 'blocks')"
        )
    whole = resolve(model, f"{container}[:]")
    total = len(whole.keys)
    if group_sizes is not None and (isinstance(group_sizes, (str, bytes)) or not isinstance(group_sizes, Sequence)):
        raise ValueError(f"group_sizes must be a sequence of integers, got {group_sizes!r}")
    count = num_groups if group_sizes is None else len(group_sizes)
    sizes = group_sizes_for(total, count, group_sizes)
    specs, start = [], 0
    for size in sizes:
        specs.append(ModuleSpec(f"{container}[{start}:{start + size}]", successor, in_proj, out_proj))
        start += size
    return Plan(tuple(specs))
