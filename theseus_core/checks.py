"""Argument checks shared by the core and the adapters (not part of the public API; the zoo keeps a
torch-free copy in ``theseus_zoo._checks``)."""

from __future__ import annotations

from typing import TypeGuard


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer and not a bool (``True`` is an ``int`` to Python, never a count to us)."""
    return isinstance(value, int) and not isinstance(value, bool)
