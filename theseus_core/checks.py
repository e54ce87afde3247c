"""Argument checks the packages share: numbers that are not bools, finite numbers.

Imports nothing but the standard library, and ``theseus_core`` imports its modules lazily, so the zoo's torch-free
layers (the recipe catalogue that ``theseus recipes`` lists) use these checks without importing torch.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import TypeGuard


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer and not a bool (``True`` is an ``int`` to Python, never a count to us)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_integral(value: object) -> TypeGuard[Integral]:
    """Like `is_int`, for any ``numbers.Integral`` (a numpy integer, say) and still not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_real(value: object) -> TypeGuard[Real]:
    """Whether ``value`` is a ``numbers.Real`` and not a bool (NaN and the infinities included)."""
    return isinstance(value, Real) and not isinstance(value, bool)


def is_finite(value: float) -> bool:
    """``math.isfinite(value)``, and ``False`` for an integer too large for a float (where ``math.isfinite``
    raises ``OverflowError``)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def is_finite_number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is an ``int`` or ``float``, not a bool, and finite (`is_finite`)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and is_finite(value)


def check_probability(name: str, value: object) -> float:
    """``value`` as a float in [0, 1] (a bool or NaN is not one); raises ``ValueError`` naming ``name``."""
    if not is_real(value) or not 0 <= value <= 1:  # compared as given: NaN fails, a huge int never overflows
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)
