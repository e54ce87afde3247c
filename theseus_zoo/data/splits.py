"""Fixed, stratified train/dev/test splits that depend on a seed and the examples' ids, never on library versions.

Within each stratum (a class, or a valence quintile for regression) the examples are ordered by
``sha256(f"{seed}:{id}")``; the first ``round(n · dev_fraction)`` go to ``validation``, the next
``round(n · test_fraction)`` to ``test`` and the rest to ``train`` (halves round up); each split is then ordered
by the same key.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

Item = TypeVar("Item")
SPLITS = ("train", "validation", "test")


def check_fractions(dev_fraction: float, test_fraction: float) -> None:
    if not (dev_fraction >= 0 and test_fraction >= 0 and dev_fraction + test_fraction < 1):
        raise ValueError(
            f"dev_fraction and test_fraction must be ≥ 0 with a sum < 1, got {dev_fraction}, {test_fraction}"
        )


def stratified_split(
    items: Sequence[Item],
    *,
    identity: Callable[[Item], object],
    stratum: Callable[[Item], Hashable],
    seed: int = 0,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
) -> dict[str, list[Item]]:
    """``{"train", "validation", "test"}`` lists of ``items``, as the module docstring describes.

    Raises:
        ValueError: fractions that leave no training data, or two items with the same identity.
    """
    check_fractions(dev_fraction, test_fraction)
    ids = [str(identity(item)) for item in items]
    if len(set(ids)) != len(ids):
        raise ValueError("example ids must be unique: the split is keyed by them")
    keys = {
        id(item): hashlib.sha256(f"{seed}:{key}".encode()).hexdigest() for item, key in zip(items, ids, strict=True)
    }
    strata: dict[Hashable, list[Item]] = {}
    for item in items:
        strata.setdefault(stratum(item), []).append(item)
    splits: dict[str, list[Item]] = {name: [] for name in SPLITS}
    for name in sorted(strata, key=str):
        members = sorted(strata[name], key=lambda item: keys[id(item)])
        num_dev, num_test = round_half_up(len(members) * dev_fraction), round_half_up(len(members) * test_fraction)
        splits["validation"] += members[:num_dev]
        splits["test"] += members[num_dev : num_dev + num_test]
        splits["train"] += members[num_dev + num_test :]
    return {name: sorted(members, key=lambda item: keys[id(item)]) for name, members in splits.items()}


def quintile_boundaries(values: Sequence[float]) -> list[float]:
    """The four values that cut ``values`` into five strata of (as near as ties allow) equal size: the 20th, 40th,
    60th and 80th percentiles (the lower of two neighbours). Raises `ValueError` for no values."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quintiles need at least one value")
    return [ordered[(len(ordered) * q) // 5] for q in range(1, 5)]


def round_half_up(value: float) -> int:
    """Rounds halves up (Python's `round` rounds them to even)."""
    return math.floor(value + 0.5)
