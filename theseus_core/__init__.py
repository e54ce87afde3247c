"""theseus_core: framework-neutral Theseus compression (progressive module replacing).

Cut a model into groups of layers, give each group a smaller successor, and
train with each group randomly running its successor or its frozen original at
a rising rate; then keep only the successors. See BERT-of-Theseus (Xu et al.,
EMNLP 2020). This package imports no model library.

The names below are imported on first use (PEP 562, as timm and torchao do), so ``import theseus_core.checks``
imports no torch: the zoo's torch-free layers share the argument checks.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .budget import Choice, Cost, CostTable, NonFiniteScoreError, measured_choice, solve
    from .candidates import Kept, Skip, keep_specs, skip_specs, splice_
    from .costs import latency_clock, multiply_adds
    from .distillation import prediction_loss
    from .engine import Theseus, replace_
    from .planning import copy_module, even_group_sizes, group_sizes_for, plan
    from .prepare import register_example_check
    from .registry import (
        DEFAULT_REGISTRY,
        SuccessorRegistry,
        build_successor,
        list_successors,
        register_successor,
        registered_successor,
    )
    from .schedule import AntiCurriculumSchedule, ConstantSchedule, LinearSchedule
    from .search import CandidateLibrary
    from .site import PredecessorChain, Projected, ReplacementSite, primary_output, split_primary
    from .spec import ModuleSpec, Plan
    from .verify import VerificationError

_MODULES = {
    "engine": ("Theseus", "replace_"),
    "planning": ("copy_module", "even_group_sizes", "group_sizes_for", "plan"),
    "prepare": ("register_example_check",),
    "registry": (
        "DEFAULT_REGISTRY",
        "SuccessorRegistry",
        "build_successor",
        "list_successors",
        "register_successor",
        "registered_successor",
    ),
    "schedule": ("AntiCurriculumSchedule", "ConstantSchedule", "LinearSchedule"),
    "budget": ("Choice", "Cost", "CostTable", "NonFiniteScoreError", "measured_choice", "solve"),
    "distillation": ("prediction_loss",),
    "search": ("CandidateLibrary",),
    "candidates": ("Kept", "Skip", "keep_specs", "skip_specs", "splice_"),
    "costs": ("latency_clock", "multiply_adds"),
    "site": ("PredecessorChain", "Projected", "ReplacementSite", "primary_output", "split_primary"),
    "spec": ("ModuleSpec", "Plan"),
    "verify": ("VerificationError",),
}
_HOMES = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "DEFAULT_REGISTRY",
    "AntiCurriculumSchedule",
    "CandidateLibrary",
    "Choice",
    "ConstantSchedule",
    "Cost",
    "CostTable",
    "Kept",
    "LinearSchedule",
    "ModuleSpec",
    "NonFiniteScoreError",
    "Plan",
    "PredecessorChain",
    "Projected",
    "ReplacementSite",
    "Skip",
    "SuccessorRegistry",
    "Theseus",
    "VerificationError",
    "build_successor",
    "copy_module",
    "even_group_sizes",
    "group_sizes_for",
    "keep_specs",
    "latency_clock",
    "list_successors",
    "measured_choice",
    "multiply_adds",
    "plan",
    "prediction_loss",
    "primary_output",
    "register_example_check",
    "register_successor",
    "registered_successor",
    "replace_",
    "skip_specs",
    "solve",
    "splice_",
    "split_primary",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Imports the module that holds ``name`` the first time it is asked for (PEP 562)."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
