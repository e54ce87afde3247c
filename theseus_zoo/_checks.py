"""Argument checks for the zoo (not part of the public API).

The zoo's recipe layer is read by ``theseus recipes`` without importing torch, so it cannot import
``theseus_core`` (whose package imports torch); this is the zoo's torch-free copy of
``theseus_core._checks.is_int``.
"""

from __future__ import annotations

from typing import TypeGuard


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer and not a bool (``True`` is an ``int`` to Python, never a count to us)."""
    return isinstance(value, int) and not isinstance(value, bool)
