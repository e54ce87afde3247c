"""The methods a run trains, as objects: what model each starts from, what it trains, with which loss, in which
stages, and what it hands back.

A method (`Method`) turns the fine-tuned predecessor into a `Trainee`: the model to train and its `Stage` list
(each a checkpointed phase of the run, e.g. ``"replacing"`` or ``"baseline:kd"``), and the compact model once the
stages' best weights are in (`Trainee.finish`). A stage's `Objective` (the parameter groups, the loss, and for
Theseus the handle and its schedule) is built only when the stage trains, so a resumed run that finds a stage done
copies no teacher. `methods_of` builds a recipe's methods (`Recipe.method_names`) from their names through the
registry `theseus_zoo.methods.METHODS`, each the implementation its spec names: `Theseus` (the paper's, with the
recipe's extensions ``kd_weight``, ``consistency_weight``, ``unfreeze_at_one``, and the modifiers) and `Baseline`.

These are the seam `theseus compress`, `benchmarks.step_cost` and new methods share: a benchmark builds exactly the
model, parameters and loss a run trains, and `theseus_zoo.training.loop.optimizer_for` its optimizer.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import theseus_core as th
from theseus_core import primary_output, split_primary
from theseus_core.distillation import prediction_loss

from ..methods import METHODS, MethodName, MethodSpec, parse_method, report_keys
from ..recipes import Phase, Recipe
from ..tasks import Task
from ..tasks.protocols import BuildsDirect, ExampleInputs, ReplaceOptions
from .losses import ConsistencyLoss, frozen_teacher
from .optimization import (
    ParameterGroup,
    check_unfreeze,
    predecessor_parameters,
    replacing_schedule,
    unfrozen_at_one,
)

Loss = Callable[[nn.Module, Any], tuple[torch.Tensor, torch.Tensor]]
"""``loss(model, batch) -> (loss, logits)``: one forward of the model."""


@dataclass
class Objective:
    """What one stage trains: ``parameters`` (named groups; the last of two is frozen until p = 1), ``loss``, for
    a replacing stage the Theseus handle and ``schedule`` (p as a function of the stage's step), and ``unlabelled``:
    the part of the loss that needs no label, which a recipe with ``labelled_examples`` also applies to a batch of
    unlabelled examples each step (``None``: the loss needs labels throughout). ``outside_wrapper``: the loss calls
    trained modules directly, not through the model's forward, so the DDP wrapper of a run on several processes
    averages none of their gradients and the loop does (`ranks.average_gradients`)."""

    parameters: list[ParameterGroup]
    loss: Loss
    theseus: th.Theseus | None = None
    schedule: Callable[[int], float] | None = None
    unlabelled: Loss | None = None
    outside_wrapper: bool = False

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
    finish: Callable[[], nn.Module]


@dataclass
class Context:
    """What every method needs: the family's task, the recipe, the fine-tuned predecessor and the device; ``plan``:
    the plan Theseus replaces with instead of the family's (a budget search's choice; ``None``: `Task.plan`)."""

    task: Task
    recipe: Recipe
    predecessor: nn.Module
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    plan: th.Plan | None = None

    def fresh_predecessor(self) -> nn.Module:
        """The model as it was before the predecessor phase (the ``pretrained`` baseline's start)."""
        return self.task.build_predecessor()


class Method:
    """A way to train a compact model from the predecessor: the implementation a `theseus_zoo.methods.MethodSpec`
    names. ``spelled`` is the method's parsed name (its ``flags`` say what its modifiers ask for), ``name`` its key
    in the run's report (``"theseus"``, ``"baseline:kd"``) and ``suffix`` what its stages' names end with when
    another method of its base came first (`theseus_zoo.methods.report_keys`). Every method trains with the recipe
    as `Recipe.for_method` gives it (`Context.recipe`): its own arguments in place."""

    def __init__(self, spelled: MethodName, name: str, suffix: str = "") -> None:
        self.spelled, self.name, self.suffix = spelled, name, suffix

    @property
    def full_name(self) -> str:
        """The method's name in full, as `theseus_zoo.methods.parse_method` spells it (``"theseus+warmup+kd"``)."""
        return str(self.spelled)

    @property
    def flags(self) -> tuple[str, ...]:
        """What the modifiers ask this method to do (``"warmup"``, ``"kd"``), in order."""
        return self.spelled.flags

    def build(self, context: Context) -> Trainee:
        """The model (drawing any fresh initialisation from the global RNG now, in the run's order) and its
        stages."""
        raise NotImplementedError

    def check(self, task: Task, recipe: Recipe, predecessor: Callable[[], nn.Module]) -> None:
        """Raises `ValueError` where `build` or a stage's objective would, before anything trains (``recipe`` as
        `Recipe.for_method` gives it; ``predecessor()`` the predecessor as the family builds it, not yet fine-tuned,
        built on the first call only, to be left unchanged). Default: nothing to check."""


# ----------------------------------------------------------------------------- losses
def task_loss(task: Task) -> Loss:
    """The task's criterion on its logits."""

    def loss(model: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        logits = task.logits(model, batch)
        return task.criterion(logits, batch), logits

    return loss


def distillation_loss(context: Context, alpha: float, teacher: nn.Module | None = None) -> Loss:
    """Vanilla KD: ``alpha`` · task loss + ``(1 - alpha)`` · T² · KL(teacher ‖ student) at the recipe's temperature
    T (mean squared error between the outputs when they are single regression values), from one forward of the
    student. ``teacher``: a `frozen_teacher` of the predecessor to share (default: a copy of its own)."""
    return _distillation(context, alpha, 1 - alpha, teacher)


def soft_loss(context: Context, weight: float, teacher: nn.Module | None = None) -> Loss:
    """The label-free part of a distillation loss: ``weight`` · T² · KL(teacher ‖ student) of the frozen
    predecessor's logits (`distillation_loss`'s second term), for unlabelled batches: the task's criterion is never
    called. ``teacher`` as in `distillation_loss`."""
    return _distillation(context, 0.0, weight, teacher)


def _distillation(context: Context, task_weight: float, soft_weight: float, teacher: nn.Module | None) -> Loss:
    task, temperature = context.task, context.recipe.kd_temperature
    teacher = frozen_teacher(context.predecessor, context.device) if teacher is None else teacher

    def loss(student: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            target = task.logits(teacher, batch)
        logits = task.logits(student, batch)
        soft = soft_weight * prediction_loss(logits, target, temperature)
        return (task_weight * task.criterion(logits, batch) + soft if task_weight else soft), logits

    return loss


def replacing_loss(context: Context, theseus: th.Theseus, teacher: nn.Module | None = None) -> Loss:
    """The task loss, plus the extensions the recipe asks for (``kd_weight``, ``consistency_weight``: `Recipe`
    docs); the task loss alone, as the paper has it, when it asks for none. ``teacher`` as in `distillation_loss`."""
    task, recipe = context.task, context.recipe
    kd_weight, consistency_weight = recipe.kd_weight, recipe.consistency_weight
    if not kd_weight and not consistency_weight:
        return task_loss(task)
    if not kd_weight:
        teacher = None
    elif teacher is None:
        teacher = frozen_teacher(context.predecessor, context.device)
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
    recipe's curriculum until p = 1, then successor fine-tuning, in one stage ``"replacing"``; `finish` finalizes.

    Its flags (`theseus_zoo.methods`' modifiers; the others set recipe fields): ``"kd"`` trains on the ``kd``
    baseline's loss instead of the task loss (and the recipe's ``kd_weight`` / ``consistency_weight`` extensions);
    ``"warmup"`` first trains each successor alone on its group's real input and output (`BlockwiseWarmup`) for
    ``warmup_fraction`` of the replacing steps, in a stage ``"warmup"``, and replaces over the rest. ``name`` is the
    report's key; the stages of a second Theseus variant in one run are suffixed with it
    (``"replacing:theseus+kd"``)."""

    def check(self, task: Task, recipe: Recipe, predecessor: Callable[[], nn.Module]) -> None:
        """``+warmup`` needs a replacing budget to split (`split_budget`); ``+unfreeze`` (or the recipe's
        ``unfreeze_at_one``) a parameter outside the groups: a GCN's groups hold every one, and ``"head"`` needs a
        task that names its head (`HasHead`)."""
        try:
            if "warmup" in self.flags:
                split_budget(recipe)
        except ValueError as error:
            raise ValueError(f"{self.name}: {error}") from None
        unfreezes = any(name == "unfreeze" for name, _ in self.spelled.modifiers)
        try:
            if recipe.unfreeze_at_one is not None:
                check_unfreeze(predecessor(), recipe.unfreeze_at_one, task)
        except ValueError as error:
            raise ValueError(f"{self.name}: {'+unfreeze, ' if unfreezes else ''}{error}") from None

    def build(self, context: Context) -> Trainee:
        recipe = context.recipe
        model, theseus = replaced_copy(context)
        replacing, steps_to_one, stages = recipe.replacing, recipe.steps_to_one, []
        if "warmup" in self.flags:
            warmup, replacing, steps_to_one = split_budget(recipe)

            def warm() -> Objective:
                parameters = [("successors", list(theseus.successor_parameters()))]
                warmup_loss = BlockwiseWarmup(context.task, theseus)  # needs no label
                return Objective(
                    parameters, warmup_loss, theseus, lambda step: 0.0, unlabelled=warmup_loss, outside_wrapper=True
                )

            stages.append(Stage("warmup" + self.suffix, warmup, warm))

        def objective() -> Objective:
            distils = "kd" in self.flags or recipe.kd_weight > 0
            teacher = frozen_teacher(context.predecessor, context.device) if distils else None
            if "kd" in self.flags:
                loss = distillation_loss(context, recipe.kd_alpha, teacher)
                unlabelled = soft_loss(context, 1 - recipe.kd_alpha, teacher)
            else:
                loss = replacing_loss(context, theseus, teacher)
                unlabelled = soft_loss(context, recipe.kd_weight, teacher) if recipe.kd_weight else None
            schedule = replacing_schedule(recipe, steps_to_one)
            parameters = replacing_parameters(context, model, theseus, recipe.unfreeze_at_one)
            return Objective(parameters, loss, theseus, schedule, unlabelled=unlabelled)

        stages.append(Stage("replacing" + self.suffix, replacing, objective))
        return Trainee(model, stages, theseus.finalize)


def replaced_copy(context: Context) -> tuple[nn.Module, th.Theseus]:
    """`theseus_core.replace_` on a copy of the predecessor, prepared as the family must (`Task.plan`: a GNN's
    stepped form), with the run's options (`replace_options`): the search's plan (`Context.plan`), else the
    family's. Returns the copy and its handle."""
    model = copy.deepcopy(context.predecessor)
    options = replace_options(context.task, context.device)
    plan = context.task.plan(model)
    plan = plan if context.plan is None else context.plan
    return model, th.replace_(model, plan, seed=context.recipe.seed, **options)


def replace_options(task: Task, device: torch.device) -> dict[str, Any]:
    """The keyword arguments a run gives `theseus_core.replace_` on ``task``: the family's own
    (`ReplaceOptions`) and its example batches on ``device`` (`ExampleInputs`: replace_ runs them at rate 0 and
    refuses a wrong surgery)."""
    options = dict(task.replace_options) if isinstance(task, ReplaceOptions) else {}
    if isinstance(task, ExampleInputs):
        options["example_inputs"], options["example_kwargs"] = to_device(task.example_inputs(), device)
    return options


def split_budget(recipe: Recipe) -> tuple[Phase, Phase, int]:
    """``+warmup``'s share of the replacing budget: the warm-up phase (``warmup_fraction`` of ``replacing.steps``,
    at least one step), the replacing phase over the rest, and ``steps_to_one`` scaled to it (at least 1)."""
    phase, total = recipe.replacing, recipe.replacing.steps
    if total < 2:
        raise ValueError(f"+warmup splits the replacing budget, and replacing.steps is {total}: give it 2 or more")
    warm = min(total - 1, max(1, round(total * recipe.warmup_fraction)))
    rest = total - warm
    steps_to_one = min(rest, max(1, round(recipe.steps_to_one * rest / total)))
    warmup = dataclasses.replace(phase, steps=warm, eval_every=min(phase.eval_every, warm), warmup_steps=0)
    replacing = dataclasses.replace(
        phase, steps=rest, eval_every=min(phase.eval_every, rest), warmup_steps=min(phase.warmup_steps, rest)
    )
    return warmup, replacing, steps_to_one


class BlockwiseWarmup:
    """The loss of ``+warmup``: Σ over groups of MSE(successor(x), group(x)), with x the group's real input.

    One forward of the model with every group on its (frozen) predecessor, in eval mode and without gradient,
    records each group's input and output (forward hooks on the sites); each successor (with its projections) then
    runs in training mode on its group's recorded input, and the squared errors of the primary outputs are summed:
    every successor learns alone, all in the same pass (NetGraft's and LLM-Streamline's first stage). Returns the
    loss and the predecessor's logits."""

    def __init__(self, task: Task, theseus: th.Theseus) -> None:
        self.task, self.theseus = task, theseus
        self.records: dict[int, tuple[tuple, dict, Any]] = {}

    def __call__(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        theseus, self.records = self.theseus, {}
        handles = [
            site.register_forward_hook(self._record(index), with_kwargs=True)
            for index, site in enumerate(theseus.sites)
        ]
        route, training = theseus.eval_route, model.training
        theseus.eval_route = "predecessor"
        model.eval()
        try:
            with torch.no_grad():
                logits = self.task.logits(model, batch)
        finally:
            theseus.eval_route = route
            model.train(training)
            for handle in handles:
                handle.remove()
        terms = []
        for index, site in enumerate(theseus.sites):
            args, kwargs, output = self.records[index]
            primary, rest, named = split_primary(args, kwargs, site.successor.primary_name, f"the site at {site.path}")
            predicted = primary_output(site.successor(primary, *rest, **named))
            terms.append(F.mse_loss(predicted, primary_output(output)))
        return torch.stack(terms).sum(), logits

    def _record(self, index: int) -> Callable[..., None]:
        def hook(site: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            self.records[index] = (args, kwargs, output)

        return hook


def replacing_parameters(
    context: Context, model: nn.Module, theseus: th.Theseus, which: str | None
) -> list[ParameterGroup]:
    """The successors' parameters, and with ``which`` (``unfreeze_at_one``: ``"head"`` or ``"all"``) those it
    unfreezes at p = 1 (frozen until then: AdamW skips a parameter without gradient)."""
    groups = [("successors", list(theseus.successor_parameters()))]
    if which is not None:
        groups.append(("unfrozen at p = 1", unfrozen_at_one(model, theseus, which, context.task)))
    return groups


class Baseline(Method):
    """A baseline, trained in the replacing phase's budget as one stage named by its report key
    (``"baseline:<name>"``): ``truncated`` / ``pretrained`` (the successor-sized model cut from the fine-tuned or the
    pretrained predecessor), ``scratch``, ``kd`` (distilled into the truncated start) and ``direct`` (distilled
    into `Task.direct`), the base of its name. With ``+searched`` (``truncated``, ``kd``), the model is the budget
    search's choice instead (`searched_model`), trained like the truncated start."""

    @property
    def kind(self) -> str:
        return self.spelled.base

    def model(self, context: Context) -> nn.Module:
        """The baseline's model before its training; ``pretrained`` cuts a fresh `Task.build_predecessor`."""
        task = context.task
        if "searched" in self.flags:
            return searched_model(context)
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
            if not distils:
                return Objective(predecessor_parameters(model), task_loss(context.task))
            alpha, teacher = context.recipe.kd_alpha, frozen_teacher(context.predecessor, context.device)
            loss, unlabelled = distillation_loss(context, alpha, teacher), soft_loss(context, 1 - alpha, teacher)
            return Objective(predecessor_parameters(model), loss, unlabelled=unlabelled)

        return Trainee(model, [Stage(self.name, context.recipe.replacing, objective)], lambda: model)


def searched_model(context: Context) -> nn.Module:
    """The budget search's choice as the family's ordinary model: a copy of the predecessor whose groups
    `theseus_core.replace_` replaces by copies of the chosen candidates as the search distilled them (``keep``: the
    predecessor's own group), finalized (the plan's ``on_finalize``; the parameters outside the groups as trainable
    as the predecessor's, the successors trainable): the model Theseus' variants finalize into, before training."""
    if context.plan is None:  # `Recipe` refuses +searched without a budget; a Context built by hand may lack it
        raise ValueError(
            "+searched trains a budget search's choice, and this Context has no search plan (Context.plan: theseus "
            "compress sets it from the recipe's budget)"
        )
    _, theseus = replaced_copy(context)
    return theseus.finalize()


def methods_of(recipe: Recipe) -> list[Method]:
    """The recipe's methods in the order they train (`Recipe.method_names`), each built by the implementation its
    spec names (`theseus_zoo.methods.METHODS`), under its report key and stage suffix
    (`theseus_zoo.methods.report_keys`)."""
    names = recipe.method_names()
    return [
        implementation(METHODS.get(spelled.base))(spelled, key, suffix)
        for spelled, (key, suffix) in zip(map(parse_method, names), report_keys(names), strict=True)
    ]


def implementation(spec: MethodSpec) -> type[Method]:
    """The `Method` subclass a base's spec names, imported the first time (``"module:Class"``)."""
    found = spec.implementation
    if isinstance(found, str):
        module, _, attribute = found.partition(":")
        found = getattr(importlib.import_module(module), attribute)
    if not (isinstance(found, type) and issubclass(found, Method)):
        raise TypeError(f"method {spec.name!r}: its implementation {spec.implementation!r} is not a Method subclass")
    return found


def refine_stage(context: Context, name: str, model: nn.Module) -> Stage:
    """A recipe's ``refine`` phase for the compact model of method ``name``: prediction-layer distillation from the
    predecessor (the soft loss alone), stage ``"refine:<name>"``. `Task.refine_` must have turned ``model`` into its
    final form first."""
    refine = context.recipe.refine
    assert refine is not None

    def objective() -> Objective:
        loss = distillation_loss(context, alpha=0.0)  # the soft loss alone: label-free
        return Objective(predecessor_parameters(model), loss, unlabelled=loss)

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
