"""Testing helpers for users of theseus_core as much as for its own tests.

- `assert_replacement_equivalence`: the contract of a replacement, checked on
  copies of your model (yours is never touched).
- Toy models with ``example_inputs()``: `ToyStack` and `ToyConvNet` (torch only).
- Hypothesis strategies: `toy_stacks`, `groupings`, `replacement_cases`; these,
  and only these, need ``hypothesis`` (``pip install -e '.[testing]'`` in the clone),
  which is imported when one of them is first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from .equivalence import assert_replacement_equivalence
from .toys import ToyBlock, ToyConvBlock, ToyConvNet, ToyStack

_STRATEGIES = ("ReplacementCase", "groupings", "replacement_cases", "toy_stacks")

__all__ = [
    "ToyBlock",
    "ToyConvBlock",
    "ToyConvNet",
    "ToyStack",
    "assert_replacement_equivalence",
    *_STRATEGIES,
]


def __getattr__(name: str) -> Any:
    if name in _STRATEGIES:
        return getattr(importlib.import_module(".strategies", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
