"""Plans for consecutive groups: `plan` cuts a container into specs, `even_group_sizes` and `group_sizes_for`
size the groups (every adapter and task checks group sizes through `group_sizes_for`), `copy_module` is the
paper's successor initialisation."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from .checks import is_int
from .spec import ModuleSpec, Plan, Projection, SuccessorFactory, resolve


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
    if not is_int(num_groups) or not 1 <= num_groups <= total:
        raise ValueError(f"cannot split {total} modules into {num_groups!r} groups; use an integer in [1, {total}]")
    if group_sizes is None:
        return even_group_sizes(total, num_groups)
    sizes = list(group_sizes)
    if len(sizes) != num_groups or not all(is_int(size) and size >= 1 for size in sizes) or sum(sizes) != total:
        raise ValueError(f"group_sizes {sizes} must be {num_groups} positive integers summing to {total}")
    return sizes


def plan(
    model: nn.Module,
    container: str,
    *,
    group_sizes: Sequence[int] | None = None,
    num_groups: int | None = None,
    successor: SuccessorFactory | str | None = None,
    in_proj: Projection = None,
    out_proj: Projection = None,
    options: Mapping[str, Any] | None = None,
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
        successor, in_proj, out_proj, options: Passed to every `ModuleSpec`; ``successor=None``
            uses the registry's default for the group's type, a string one of its named alternatives.

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
        specs.append(ModuleSpec(f"{container}[{start}:{start + size}]", successor, in_proj, out_proj, options or {}))
        start += size
    return Plan(tuple(specs))
