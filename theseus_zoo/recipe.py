"""Recipes: everything a compression run needs, as typed, validated, named configs.

A recipe names a model family (which `Task` builds the model, data and plan),
that family's options, the training phases and the schedule. `theseus recipes`
lists the registered ones; `theseus compress --recipe NAME` runs one, with
fields overridden from a JSON file (``--config``) or flags.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASELINES = ("truncated", "scratch", "kd")
"""Baselines the trainer knows: ``truncated`` fine-tunes the successor-sized model initialised like the
successors (the predecessor's bottom layers); ``scratch`` trains the small architecture from a random
initialisation; ``kd`` is vanilla knowledge distillation into the ``truncated`` initialisation
(Hinton et al.: task loss plus soft cross-entropy to the frozen predecessor's logits)."""


@dataclass(frozen=True)
class Phase:
    """One training phase.

    Args:
        steps: Optimizer steps.
        lr: AdamW learning rate (constant: in the replacing phase the curriculum
            itself acts as the warm-up, BERT-of-Theseus §3.2).
        batch_size: Examples per step.
        eval_every: Evaluate on the dev set (and checkpoint) every this many steps,
            and at the end.
    """

    steps: int
    lr: float
    batch_size: int = 32
    eval_every: int = 100

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Phase.{name} must be an integer >= 1, got {value!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"Phase.lr must be a number > 0, got {self.lr!r}")


@dataclass(frozen=True)
class Recipe:
    """A named compression recipe.

    Args:
        name: How `theseus compress --recipe` finds it.
        family: The `Task` family that builds model, data and plan (``"toy"``, ...).
        description: One line for `theseus recipes`.
        options: The family's own options (model size, dataset, number of layers, ...).
        predecessor: How to fine-tune the predecessor; ``None`` when the family
            supplies one already fine-tuned.
        replacing: The compression phase: the curriculum runs until p reaches 1 at
            ``steps_to_one``, the remaining steps fine-tune the successors.
        schedule_base: The basic replacing rate b at step 0.
        steps_to_one: The step at which p = min(1, k·t + b) reaches 1 (sets k).
        patience: Stop the replacing phase after this many evaluations at p = 1
            without a better dev metric (``None``: never). The best dev state is kept.
        baselines: Baselines trained in the same harness and budget as ``replacing`` (see `BASELINES`).
        kd_alpha: Weight of the task loss in the ``kd`` baseline; the soft loss gets ``1 - kd_alpha``.
        kd_temperature: Softmax temperature of the ``kd`` baseline (the soft loss is scaled by its square).
        seed: Seeds data order, routes and initialisation.
    """

    name: str
    family: str
    description: str
    replacing: Phase
    steps_to_one: int
    options: Mapping[str, Any] = field(default_factory=dict)
    predecessor: Phase | None = None
    schedule_base: float = 0.3
    patience: int | None = None
    baselines: tuple[str, ...] = BASELINES
    kd_alpha: float = 0.5
    kd_temperature: float = 2.0
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", dict(self.options))
        object.__setattr__(self, "baselines", tuple(self.baselines))
        if not 0.0 <= self.schedule_base <= 1.0:
            raise ValueError(f"schedule_base must be in [0, 1], got {self.schedule_base}")
        if not isinstance(self.steps_to_one, int) or not 1 <= self.steps_to_one <= self.replacing.steps:
            limit = self.replacing.steps
            raise ValueError(
                f"steps_to_one must be an integer in [1, replacing.steps={limit}], got {self.steps_to_one}"
            )
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 1):
            raise ValueError(f"patience must be None or an integer >= 1, got {self.patience!r}")
        if not 0.0 <= self.kd_alpha <= 1.0 or not self.kd_temperature > 0:
            raise ValueError(
                f"kd_alpha must be in [0, 1] and kd_temperature > 0, got {self.kd_alpha}, {self.kd_temperature}"
            )
        unknown = [name for name in self.baselines if name not in BASELINES]
        if unknown:
            raise ValueError(f"unknown baselines {unknown}; available: {', '.join(BASELINES)}")

    def with_overrides(self, overrides: Mapping[str, Any]) -> Recipe:
        """A copy with fields replaced; nested dicts update ``options`` and the phases field by field."""
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in {f.name for f in dataclasses.fields(self)}:
                raise ValueError(
                    f"unknown recipe field {key!r}; fields: {', '.join(f.name for f in dataclasses.fields(self))}"
                )
            current = getattr(self, key)
            if key == "options":
                changes[key] = {**current, **value}
            elif isinstance(current, Phase) or (key == "predecessor" and isinstance(value, Mapping)):
                base = dataclasses.asdict(current) if current is not None else {}
                changes[key] = Phase(**{**base, **value})
            else:
                changes[key] = value
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_RECIPES: dict[str, Recipe] = {}


def register_recipe(recipe: Recipe) -> Recipe:
    """Adds a recipe to the catalogue; a name used twice raises `KeyError`."""
    if recipe.name in _RECIPES:
        raise KeyError(f"a recipe named {recipe.name!r} is already registered")
    _RECIPES[recipe.name] = recipe
    return recipe


def get_recipe(name: str) -> Recipe:
    if name not in _RECIPES:
        raise ValueError(f"unknown recipe {name!r}; `theseus recipes` lists them: {', '.join(sorted(_RECIPES))}")
    return _RECIPES[name]


def list_recipes(pattern: str = "*") -> list[Recipe]:
    return [_RECIPES[name] for name in sorted(_RECIPES) if fnmatch.fnmatchcase(name, pattern)]


def load_overrides(path: Path) -> dict[str, Any]:
    """Reads a JSON config file of recipe fields to override."""
    try:
        overrides = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"config file {path} does not exist") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"config file {path} is not valid JSON: {error}") from None
    if not isinstance(overrides, dict):
        raise ValueError(f"config file {path} must hold a JSON object of recipe fields")
    return overrides
