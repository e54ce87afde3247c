"""theseus_core: framework-neutral Theseus compression (progressive module replacing).

Cut a model into groups of layers, give each group a smaller successor, and
train with each group randomly running its successor or its frozen original at
a rising rate; then keep only the successors. See BERT-of-Theseus (Xu et al.,
EMNLP 2020). This package imports no model library.
"""

from .engine import Theseus, replace_
from .registry import (
    DEFAULT_REGISTRY,
    SuccessorRegistry,
    build_successor,
    copy_module,
    even_group_sizes,
    group_sizes_for,
    list_successors,
    plan,
    register_successor,
    registered_successor,
)
from .schedule import AntiCurriculumSchedule, ConstantSchedule, LinearSchedule
from .site import PredecessorChain, Projected, ReplacementSite
from .spec import ModuleSpec, Plan
from .verify import VerificationError

__all__ = [
    "DEFAULT_REGISTRY",
    "AntiCurriculumSchedule",
    "ConstantSchedule",
    "LinearSchedule",
    "ModuleSpec",
    "Plan",
    "PredecessorChain",
    "Projected",
    "ReplacementSite",
    "SuccessorRegistry",
    "Theseus",
    "VerificationError",
    "build_successor",
    "copy_module",
    "even_group_sizes",
    "group_sizes_for",
    "list_successors",
    "plan",
    "register_successor",
    "registered_successor",
    "replace_",
]

__version__ = "0.1.0"
