"""The methods a run trains, as objects: what model each starts from, what it trains, with which loss, in which
stages, and what it hands back.

A method (`Method`) turns the fine-tuned predecessor into a `Trainee`: the model to train and its `Stage` list
(each a checkpointed phase of the run, e.g. ``"replacing"`` or ``"baseline:kd"``), and the compact model once the
stages' best weights are in (`Trainee.finish`). A stage's `Objective` (the parameter groups, the loss, and for
Theseus the handle and its schedule) is built only when the stage trains, so a resumed run that finds a stage done
copies no teacher. `methods_of` lists a recipe's methods; `build_method` makes one by name: ``theseus`` (the
paper's, with the recipe's extensions: ``kd_weight``, ``consistency_weight``, ``unfreeze_at_one``) and the
baselines of `theseus_zoo.recipes.BASELINES`.

These are the seam `theseus compress`, `benchmarks.step_cost` and new methods share: a benchmark times exactly the
step a run trains (`train_step` in `theseus_zoo.training.loop`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import theseus_core as th
from theseus_core.distillation import prediction_loss

from ..recipes import Phase, Recipe
from ..tasks import Task
from ..tasks.protocols import BuildsDirect, ExampleInputs, ReplaceOptions
from .losses import ConsistencyLoss, frozen_teacher
from .optimization import ParameterGroup, predecessor_parameters, replacing_schedule, unfrozen_at_one

Loss = Callable[[nn.Module, Any], tuple[torch.Tensor, torch.Tensor]]
"""``loss(model, batch) -> (loss, logits)``: one forward of the model."""


@dataclass
class Objective:
    """What one stage trains: ``parameters`` (named groups; the last of two is frozen until p = 1), ``loss``, and for
    a replacing stage the Theseus handle and ``schedule`` (p as a function of the stage's step)."""

    parameters: list[ParameterGroup]
    loss: Loss
    theseus: th.Theseus | None = None
    schedule: Callable[[int], float] | None = None

    @property
    def trained(self) -> list[nn.Parameter]:
        return [parameter for _, group in self.parameters for parameter in group]

    @property
    def late(self) -> list[nn.Parameter]:
        """The parameters frozen until p = 1 (``unfreeze_at_one``)."""
        return self.parameters[1][1] if len(self.parameters) > 1 else []


@dataclass
class Stage:
    """One checkpointed phase of a method: ``name`` is its key in the checkpoint and metrics (``"replacing"``,
    ``"baseline:kd"``), ``phase`` its steps and optimizer settings, ``objective()`` builds what it trains."""

    name: str
    phase: Phase
    objective: Callable[[], Objective]


@dataclass
class Trainee:
    """A method's model, its stages in order, and ``finish()``: the compact model once the last stage's weights are
    loaded (Theseus' `finalize`; a baseline's model as it is)."""

    model: nn.Module
    stages: list[Stage]
    finish: Callable[[], nn.Module] = field(default=lambda: None)  # type: ignore[assignment]


@dataclass
class Context:
    """What every method needs: the family's task, the recipe, the fine-tuned predecessor and the device."""

    task: Task
    recipe: Recipe
    predecessor: nn.Module
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    def fresh_predecessor(self) -> nn.Module:
        """The model as it was before the predecessor phase (the ``pretrained`` baseline's start)."""
        return self.task.build_predecessor()


class Method:
    """A way to train a compact model from the predecessor. ``name`` is how a recipe and the report call it
    (``"theseus"``, ``"baseline:kd"``)."""

    name: str

    def build(self, context: Context) -> Trainee:
        """The model (drawing any fresh initialisation from the global RNG now, in the run's order) and its
        stages."""
        raise NotImplementedError


# ----------------------------------------------------------------------------- losses
def task_loss(task: Task) -> Loss:
    """The task's criterion on its logits."""

    def loss(model: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        logits = task.logits(model, batch)
        return task.criterion(logits, batch), logits

    return loss


def distillation_loss(context: Context, alpha: float) -> Loss:
    """Vanilla KD: ``alpha`` · task loss + ``(1 - alpha)`` · T² · KL(teacher ‖ student) at the recipe's temperature
    T (mean squared error between the outputs when they are single regression values), from one forward of the
    student."""
    task, temperature = context.task, context.recipe.kd_temperature
    teacher = frozen_teacher(context.predecessor, context.device)

    def loss(student: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            target = task.logits(teacher, batch)
        logits = task.logits(student, batch)
        value = alpha * task.criterion(logits, batch) + (1 - alpha) * prediction_loss(logits, target, temperature)
        return value, logits

    return loss


def replacing_loss(context: Context, theseus: th.Theseus) -> Loss:
    """The task loss, plus the extensions the recipe asks for (``kd_weight``, ``consistency_weight``: `Recipe`
    docs); the task loss alone, as the paper has it, when it asks for none."""
    task, recipe = context.task, context.recipe
    kd_weight, consistency_weight = recipe.kd_weight, recipe.consistency_weight
    if not kd_weight and not consistency_weight:
        return task_loss(task)
    teacher = frozen_teacher(context.predecessor, context.device) if kd_weight else None
    consistency = ConsistencyLoss(theseus) if consistency_weight else None

    def loss(model: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if consistency is not None:
            consistency.reset()
        logits = task.logits(model, batch)
        value = task.criterion(logits, batch)
        if teacher is not None:
            with torch.no_grad():
                target = task.logits(teacher, batch)
            value = value + kd_weight * prediction_loss(logits, target, recipe.kd_temperature)
        if consistency is not None and consistency.terms:
            value = value + consistency_weight * consistency.value()
        return value, logits

    return loss


# ----------------------------------------------------------------------------- methods
class Theseus(Method):
    """Progressive module replacing (BERT-of-Theseus): `theseus_core.replace_` on a copy of the predecessor, the
    recipe's curriculum until p = 1, then successor fine-tuning, in one stage ``"replacing"``; `finish` finalizes."""

    name = "theseus"

    def build(self, context: Context) -> Trainee:
        task, recipe = context.task, context.recipe
        model = copy.deepcopy(context.predecessor)
        options = dict(task.replace_options) if isinstance(task, ReplaceOptions) else {}
        if isinstance(task, ExampleInputs):  # replace_ runs them at rate 0 and refuses a wrong surgery
            options["example_inputs"], options["example_kwargs"] = to_device(task.example_inputs(), context.device)
        theseus = th.replace_(model, task.plan(model), seed=recipe.seed, **options)

        def objective() -> Objective:
            return Objective(
                replacing_parameters(context, model, theseus),
                replacing_loss(context, theseus),
                theseus,
                replacing_schedule(recipe),
            )

        return Trainee(model, [Stage("replacing", recipe.replacing, objective)], theseus.finalize)


def replacing_parameters(context: Context, model: nn.Module, theseus: th.Theseus) -> list[ParameterGroup]:
    """The successors' parameters, and with ``unfreeze_at_one`` those it unfreezes at p = 1 (frozen until then:
    AdamW skips a parameter without gradient)."""
    groups = [("successors", list(theseus.successor_parameters()))]
    which = context.recipe.unfreeze_at_one
    if which is not None:
        groups.append(("unfrozen at p = 1", unfrozen_at_one(model, theseus, which, context.task)))
    return groups


class Baseline(Method):
    """A baseline of `theseus_zoo.recipes.BASELINES`, trained in the replacing phase's budget as one stage
    ``"baseline:<name>"``: ``truncated`` / ``pretrained`` (the successor-sized model cut from the fine-tuned or the
    pretrained predecessor), ``scratch``, ``kd`` (distilled into the truncated start) and ``direct`` (distilled
    into `Task.direct`)."""

    def __init__(self, kind: str) -> None:
        self.kind, self.name = kind, f"baseline:{kind}"

    def model(self, context: Context) -> nn.Module:
        """The baseline's model before its training; ``pretrained`` cuts a fresh `Task.build_predecessor`."""
        task = context.task
        if self.kind == "scratch":
            return task.scratch()
        if self.kind == "direct":
            if not isinstance(task, BuildsDirect):
                raise ValueError(f"the {context.recipe.family} family builds no direct baseline (no Task.direct)")
            return task.direct(context.predecessor)
        return task.truncated(context.fresh_predecessor() if self.kind == "pretrained" else context.predecessor)

    def build(self, context: Context) -> Trainee:
        model = self.model(context)
        distils = self.kind in ("kd", "direct")

        def objective() -> Objective:
            loss = distillation_loss(context, context.recipe.kd_alpha) if distils else task_loss(context.task)
            return Objective(predecessor_parameters(model), loss)

        return Trainee(model, [Stage(self.name, context.recipe.replacing, objective)], lambda: model)


def build_method(name: str) -> Method:
    """The method called ``name`` in a recipe: ``"theseus"`` or a baseline's name; raises `ValueError` naming the
    known ones."""
    from ..recipes import BASELINES

    if name == "theseus":
        return Theseus()
    if name in BASELINES:
        return Baseline(name)
    raise ValueError(f"unknown method {name!r}; known: theseus, {', '.join(BASELINES)}")


def methods_of(recipe: Recipe) -> list[Method]:
    """The recipe's methods in the order they train: Theseus (unless ``theseus: false``), then its baselines."""
    return [build_method(name) for name in (["theseus"] if recipe.theseus else []) + list(recipe.baselines)]


def refine_stage(context: Context, name: str, model: nn.Module) -> Stage:
    """A recipe's ``refine`` phase for the compact model of method ``name``: prediction-layer distillation from the
    predecessor (the soft loss alone), stage ``"refine:<name>"``. `Task.refine_` must have turned ``model`` into its
    final form first."""
    refine = context.recipe.refine
    assert refine is not None

    def objective() -> Objective:
        return Objective(predecessor_parameters(model), distillation_loss(context, alpha=0.0))

    return Stage(f"refine:{name}", refine, objective)


def to_device(batch: Any, device: torch.device) -> Any:
    """``batch`` (tensors, possibly nested in dicts, tuples and lists) on ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(value, device) for value in batch)
    return batch
