"""Recipes: everything a compression run needs, as typed, validated, named configs.

A recipe names a model family (which `Task` builds the model, data and plan),
that family's options, the training phases and the schedule. `theseus recipes`
lists the registered ones; `theseus compress --recipe NAME` runs one, with
fields overridden from a JSON file (``--config``) or flags.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from theseus_core.budget import KINDS
from theseus_core.checks import is_finite_number, is_int
from theseus_zoo.methods import method_overrides, parse_method, report_keys, uses_search
from theseus_zoo.registry import Registry

BASELINES = ("truncated", "pretrained", "scratch", "kd", "direct")
"""Baselines the trainer knows: ``truncated`` fine-tunes the successor-sized model initialised like the
successors (the fine-tuned predecessor's layers the plan's ``init`` names: the bottom ones for the paper's
``"first"``, each group's last for ``"group_last"``); ``pretrained`` does the same from the model before the
predecessor phase (the pretrained checkpoint with a fresh head: the paper's "fine-tuned bottom 6L" row, BERT-PKD's
BERT6-FT; only for recipes with a predecessor phase); ``scratch`` trains the small architecture from a random
initialisation; ``kd`` is vanilla knowledge distillation into the ``truncated`` initialisation
(Hinton et al.: task loss plus soft cross-entropy to the frozen predecessor's logits); ``direct`` distils like
``kd`` into the *refined* form built directly from the predecessor (`Task.direct`), skipping the form every other
model passes through before its ``refine`` phase (BinaryBERT's weak baseline: weights binarized from full precision,
no ternary stage); it needs a recipe with a ``refine`` phase."""

DEFAULT_BASELINES = ("truncated", "scratch", "kd")
"""What a recipe trains when it names no baselines (``pretrained`` and ``direct`` are asked for by name)."""

LR_SCHEDULES = ("linear", "constant")
SCHEDULES = ("curriculum", "constant", "anti_curriculum")
UNFREEZE = ("head", "all")


@dataclass(frozen=True)
class Phase:
    """One training phase, set up as the reference ``run_glue.py`` of BERT-of-Theseus does.

    Args:
        steps: Optimizer steps.
        lr: Peak AdamW learning rate.
        batch_size: Examples per step (the global batch, shared among the processes). One at or above the size of
            the training split trains full-batch: every step sees the whole split, in a fresh order (the gnn
            recipes' ``FULL_BATCH``), and the batch is that size, not this. Otherwise an epoch's last partial batch
            is dropped.
        eval_every: Evaluate on the dev set (and checkpoint) every this many steps, and at the end.
        lr_schedule: ``"linear"`` (the reference: after the warm-up, decay linearly to 0 at ``steps``) or
            ``"constant"``. (default: ``"linear"``)
        warmup_steps: Steps of linear warm-up from 0 to ``lr``. (default: ``0``; in the replacing phase the
            curriculum itself acts as a warm-up, BERT-of-Theseus §3.2)
        weight_decay: AdamW weight decay, applied to weights only: biases and normalization weights get none, as in
            the reference code. (default: ``0.01``)
        max_grad_norm: Clip the gradient norm of the trained parameters to this (``None``: no clipping).
            (default: ``1.0``, the reference code's)
    """

    steps: int
    lr: float
    batch_size: int = 32
    eval_every: int = 100
    lr_schedule: str = "linear"
    warmup_steps: int = 0
    weight_decay: float = 0.01
    max_grad_norm: float | None = 1.0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_every"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ValueError(f"Phase.{name} must be an integer >= 1, got {value!r}")
        if not (is_finite_number(self.lr) and self.lr > 0):
            raise ValueError(f"Phase.lr must be a finite number > 0, got {self.lr!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"Phase.lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}")
        if not is_int(self.warmup_steps) or not 0 <= self.warmup_steps <= self.steps:
            raise ValueError(
                f"Phase.warmup_steps must be an integer in [0, steps={self.steps}], got {self.warmup_steps!r}"
            )
        if not (is_finite_number(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"Phase.weight_decay must be a finite number >= 0, got {self.weight_decay!r}")
        if self.max_grad_norm is not None and not (is_finite_number(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"Phase.max_grad_norm must be None or a finite number > 0, got {self.max_grad_norm!r}")

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based): a pure function of the step, so a resumed run
        needs nothing but its step back. The same values as ``transformers.get_linear_schedule_with_warmup`` (and
        its constant twin) give the reference code's optimizer steps: step 0 of a warm-up has lr 0, and the last
        step of a linear decay has ``lr / (steps - warmup_steps)``."""
        if step < self.warmup_steps:
            return self.lr * step / self.warmup_steps
        if self.lr_schedule == "constant":
            return self.lr
        return self.lr * max(0.0, self.steps - step) / max(1, self.steps - self.warmup_steps)


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
        schedule: How p moves before ``steps_to_one``: ``"curriculum"`` (the paper's p = min(1, k·t + b)),
            ``"constant"`` (p = b) or ``"anti_curriculum"`` (p = 1 − min(1, k·t + b)), the two baselines of the
            paper's Table 6. From ``steps_to_one`` on, p = 1 for each (successor fine-tuning).
        theseus: Train the Theseus compression at all; ``False`` trains only the predecessor and the baselines
            (a headroom scan: how much does truncation cost?).
        patience: Stop the replacing phase after this many evaluations at p = 1
            without a better dev metric (``None``: never). The best dev state is kept.
        baselines: Baselines trained in the same harness and budget as ``replacing`` (see `BASELINES`).
        kd_alpha: Weight of the task loss in the ``kd`` baseline; the soft loss gets ``1 - kd_alpha``.
        kd_temperature: Softmax temperature of the ``kd`` baseline (the soft loss is scaled by its square).
        seed: Seeds data order, routes and initialisation.
        refine: A second phase for every compressed model (the Theseus successor and each baseline), after the
            family's `Task.refine_` turned it into its final form (`Task.refinement` says what that does, e.g. a
            ternary model split into a binary one), trained on the soft loss of the frozen predecessor's logits
            alone (prediction-layer distillation at ``kd_temperature``), the best dev state kept. ``None``: no
            such phase, the models are final after their first. (default: ``None``)

    Extensions of the replacing phase, each a departure from the paper and off by default (each also a modifier
    that sets it for one Theseus variant: ``+unfreeze``, ``+consistency``, ``+soft``):

    Args:
        unfreeze_at_one: Once p = 1, also train ``"head"`` (the family's head: pooler and classifier) or ``"all"``
            (every parameter outside the groups: embeddings too). The paper keeps them frozen.
        consistency_weight: λ of λ·MSE(successor(y), group(y)), summed over the groups routed to their successor
            on a step, with the group's output computed under no-grad on the successor's own input (blockwise
            distillation, Wang et al. 2018). The paper uses the task loss alone.
        kd_weight: Adds this weight times the ``kd`` soft loss (temperature ``kd_temperature``) to the frozen
            predecessor's logits. The paper uses the task loss alone.

    Methods as composable names, overriding ``theseus`` and ``baselines`` when given:

    Args:
        methods: What to train, in order, by the names of `theseus_zoo.methods` (``"theseus+warmup+kd"``,
            ``"kd(alpha=0.7)"``, ``"truncated"``; `theseus methods` lists them). A method's arguments and modifiers
            set recipe fields for that method alone (`Recipe.for_method`); the recipe may not set them too. The first
            Theseus variant is reported as ``"theseus"`` (the run's Theseus, which every other model is compared
            with), later ones under their names (`theseus_zoo.methods.report_keys`). ``None``: Theseus (unless
            ``theseus`` is false) and ``baselines``, the older way, which ``methods`` may not be combined with.
            (default: ``None``)
        warmup_fraction: The share of the replacing budget (``replacing.steps``) that ``+warmup`` spends on
            blockwise distillation; the replacing stage gets the rest, with ``steps_to_one`` scaled alike.
            (default: ``0.2``)

    Few labels:

    Args:
        labelled_examples: Only this many training examples keep their labels: a fixed sample of the training
            split (the same for every seed, so that runs share one predecessor), the rest unlabelled. Every stage
            trains on batches of labelled examples (the predecessor's fine-tuning too); a stage whose loss has a
            label-free part (`theseus_zoo.training.methods.Objective.unlabelled`: the soft loss of ``kd``,
            ``direct``, ``+kd``, ``kd_weight`` and ``refine``, ``+warmup``'s blockwise loss) adds to each step a
            batch of as many unlabelled examples, scored by that part alone. One process only; not with
            ``consistency_weight``; labelled and unlabelled examples must each fill a batch (each is one batch, whole,
            in a full-batch phase). ``None``: every example is labelled.
            (default: ``None``)

    A successor per group:

    Args:
        budget: ``{"latency" | "params" | "macs": fraction of the predecessor's, "steps": ..., "lr": ...}``: a
            search chooses a candidate for each group within the budget (`theseus_core.search`, after ``steps`` of
            blockwise distillation at ``lr``), and every Theseus variant, and each baseline with ``+searched``
            (``kd+searched``, ``truncated+searched``), trains that choice; the other baselines train the family's
            successor-sized model. With ``"chosen"`` (group path -> candidate name, as a run's
            ``report.json["search"]["chosen"]``), the candidates are distilled as always and that choice is taken
            instead of solving for one: another method, or another seed's run on the same predecessor, trains the
            same architecture (a latency search's choice varies between runs with its measurements). ``None``: no
            search. (default: ``None``)
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
    baselines: tuple[str, ...] = DEFAULT_BASELINES
    kd_alpha: float = 0.5
    kd_temperature: float = 2.0
    seed: int = 0
    schedule: str = "curriculum"
    theseus: bool = True
    unfreeze_at_one: str | None = None
    consistency_weight: float = 0.0
    kd_weight: float = 0.0
    refine: Phase | None = None
    methods: tuple[str, ...] | None = None
    warmup_fraction: float = 0.2
    labelled_examples: int | None = None
    budget: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.options, Mapping):
            raise ValueError(f"options must be an object of the family's options, got {self.options!r}")
        if isinstance(self.baselines, (str, bytes)) or not isinstance(self.baselines, (list, tuple)):
            raise ValueError(f"baselines must be a list of names from {', '.join(BASELINES)}, got {self.baselines!r}")
        object.__setattr__(self, "options", dict(self.options))
        object.__setattr__(self, "baselines", tuple(self.baselines))
        if isinstance(self.budget, Mapping):
            object.__setattr__(self, "budget", dict(self.budget))
        if self.methods is not None:
            if (
                isinstance(self.methods, (str, bytes))
                or not isinstance(self.methods, (list, tuple))
                or not self.methods
            ):
                raise ValueError(f"methods must be a non-empty list of names like 'theseus+kd', got {self.methods!r}")
            object.__setattr__(self, "methods", tuple(self.methods))
        self._check_fields()
        self._check_methods()

    def _check_methods(self) -> None:
        """The methods' names (`theseus_zoo.methods`), each once, one report key each, and the recipe fields each
        sets for itself valid and not set by the recipe too (`method_overrides`)."""
        if self.methods is not None:
            for name in self.methods:
                parse_method(name)
            if len(set(self.methods)) != len(self.methods):
                raise ValueError(f"methods names one method twice: {list(self.methods)}")
            keys = [key for key, _ in report_keys(self.methods)]
            if len(set(keys)) != len(keys):
                raise ValueError(
                    f"methods {list(self.methods)}: plain theseus must come first among the Theseus variants (the "
                    f"first is reported as 'theseus')"
                )
        for name in self.method_names():
            self.for_method(name)
        if not self.method_names():
            raise ValueError("theseus is false and there are no baselines: nothing to train after the predecessor")
        searched = [name for name in self.method_names() if uses_search(name)]
        if self.budget is not None and not searched:
            raise ValueError(
                "a budget chooses the successors of Theseus (or of a baseline with +searched, e.g. kd+searched), and "
                "this run trains neither"
            )
        baselines = [name for name in searched if parse_method(name).base != "theseus"]
        if self.budget is None and baselines:
            raise ValueError(
                f"method {baselines[0]!r} trains the architecture a budget search chooses: give a budget (--budget "
                f"latency=0.4), or drop +searched"
            )
        trained = [parse_method(name).base for name in self.method_names()]
        if "direct" in trained and self.refine is None:
            raise ValueError(
                "the direct baseline is the refined form built directly from the predecessor, and this recipe has no "
                "refine phase: add one, or drop direct"
            )
        if "pretrained" in trained and self.predecessor is None:
            raise ValueError(
                "the pretrained baseline cuts the model from before the predecessor phase, and this recipe has none "
                "(its predecessor is used as given): use truncated"
            )

    def for_method(self, name: str) -> Recipe:
        """The recipe as method ``name`` trains with it: the fields its arguments and modifiers set
        (`theseus_zoo.methods.method_overrides`) in place of the recipe's. Raises `ValueError` in one line where the
        recipe sets one of them too, or the method sets one to an invalid value."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        overrides = method_overrides(name, fields, _field_defaults(Recipe))
        if not overrides:
            return self
        effective = copy.copy(self)
        for key, value in overrides.items():
            object.__setattr__(effective, key, value)
        try:
            effective._check_fields()
        except ValueError as error:
            raise ValueError(f"method {name!r}: {error}") from None
        return effective

    def _check_fields(self) -> None:
        """Every field but ``methods`` valid on its own."""
        if self.labelled_examples is not None and not (
            isinstance(self.labelled_examples, int)
            and not isinstance(self.labelled_examples, bool)
            and self.labelled_examples >= 1
        ):
            raise ValueError(f"labelled_examples must be null or an integer >= 1, got {self.labelled_examples!r}")
        if self.labelled_examples is not None and self.consistency_weight:
            raise ValueError(
                "consistency_weight with labelled_examples is not supported yet (its hooks would also fire on the "
                "unlabelled batch's forward): set one of them"
            )
        if not (is_finite_number(self.warmup_fraction) and 0 < self.warmup_fraction < 1):
            raise ValueError(f"warmup_fraction must be a number in (0, 1), got {self.warmup_fraction!r}")
        if not is_finite_number(self.schedule_base) or not 0.0 <= self.schedule_base <= 1.0:
            raise ValueError(f"schedule_base must be a number in [0, 1], got {self.schedule_base!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if not isinstance(self.theseus, bool):
            raise ValueError(f"theseus must be true or false, got {self.theseus!r}")
        if self.unfreeze_at_one is not None and self.unfreeze_at_one not in UNFREEZE:
            raise ValueError(
                f"unfreeze_at_one must be null or one of {', '.join(UNFREEZE)}, got {self.unfreeze_at_one!r}"
            )
        for name in ("consistency_weight", "kd_weight"):
            if not is_finite_number(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)!r}")
        if not is_int(self.seed) or not 0 <= self.seed < 2**31:
            raise ValueError(f"seed must be an integer in [0, 2**31), got {self.seed!r}")
        if not is_int(self.steps_to_one) or not 1 <= self.steps_to_one <= self.replacing.steps:
            limit = self.replacing.steps
            raise ValueError(
                f"steps_to_one must be an integer in [1, replacing.steps={limit}], got {self.steps_to_one}"
            )
        if self.patience is not None and (not is_int(self.patience) or self.patience < 1):
            raise ValueError(f"patience must be None or an integer >= 1, got {self.patience!r}")
        if not (is_finite_number(self.kd_alpha) and 0.0 <= self.kd_alpha <= 1.0) or not (
            is_finite_number(self.kd_temperature) and self.kd_temperature > 0
        ):
            raise ValueError(
                f"kd_alpha must be in [0, 1] and kd_temperature > 0, got {self.kd_alpha}, {self.kd_temperature}"
            )
        unknown = [name for name in self.baselines if name not in BASELINES]
        if unknown:
            raise ValueError(f"unknown baselines {unknown}; available: {', '.join(BASELINES)}")
        if self.budget is not None:
            check_budget(self.budget)
        if self.refine is not None and not isinstance(self.refine, Phase):
            raise ValueError(f"refine must be null or an object of Phase fields, got {self.refine!r}")

    def method_names(self) -> tuple[str, ...]:
        """What the run trains, in order: ``methods`` when given, else ``"theseus"`` (unless ``theseus`` is false)
        and the baselines."""
        return methods_trained(self.methods, self.theseus, self.baselines)

    def theseus_and(self, *baselines: str) -> dict[str, Any]:
        """Overrides that train the recipe's Theseus (its first Theseus variant) and ``baselines`` alone, in the way
        the recipe names what it trains: ``baselines`` when it has no ``methods``, else ``methods``."""
        if self.methods is None:
            return {"baselines": list(baselines)}
        variant = next((name for name in self.methods if parse_method(name).base == "theseus"), "theseus")
        return {"methods": [variant, *baselines]}

    def with_overrides(self, overrides: Mapping[str, Any]) -> Recipe:
        """A copy with fields replaced; nested dicts update ``options`` and the phases field by field. An invalid
        phase field raises `ValueError` naming it as given (``replacing.steps``)."""
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in {f.name for f in dataclasses.fields(self)}:
                raise ValueError(
                    f"unknown recipe field {key!r}; fields: {', '.join(f.name for f in dataclasses.fields(self))}"
                )
            current = getattr(self, key)
            if key == "options":
                if not isinstance(value, Mapping):
                    raise ValueError(f"options must be an object of the family's options, got {value!r}")
                changes[key] = {**current, **value}
            elif key in ("predecessor", "refine") and value is None:  # the optional phases: null drops them
                changes[key] = None
            elif isinstance(current, Phase) or (key in ("predecessor", "refine") and isinstance(value, Mapping)):
                if not isinstance(value, Mapping):
                    raise ValueError(f"{key} must be an object of Phase fields, got {value!r}")
                known = [f.name for f in dataclasses.fields(Phase)]
                unknown = sorted(set(value) - set(known))
                if unknown:
                    raise ValueError(f"unknown {key} fields {unknown}; Phase fields: {', '.join(known)}")
                base = dataclasses.asdict(current) if current is not None else {}
                changes[key] = _phase(key, {**base, **value})
            else:
                changes[key] = value
        methods = changes.get("methods", self.methods)
        ignored = [
            key
            for key in ("theseus", "baselines")
            if key in changes and _as_tuple(changes[key]) != _as_tuple(getattr(self, key))
        ]
        if methods is not None and ignored:
            raise ValueError(
                f"{' and '.join(ignored)} would be ignored beside methods {list(methods)}, which name what the run "
                f"trains: name the methods instead (or set methods to null)"
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def methods_trained(methods: Any, theseus: bool, baselines: Any) -> tuple[str, ...]:
    """What a run with these recipe fields trains, in order: ``methods`` when given, else ``"theseus"`` (unless
    ``theseus`` is false) and the baselines. `Recipe.method_names`, and a recorded recipe's (`Report.method_names`)."""
    if methods is not None:
        return tuple(methods)
    return (("theseus",) if theseus else ()) + tuple(baselines)


BUDGET_KINDS = KINDS
"""What a budget limits (`theseus_core.budget.KINDS`): measured latency, parameters, or multiply-adds, each as a
fraction of the predecessor's."""


def check_budget(budget: Any) -> None:
    """Raises `ValueError` in one line unless ``budget`` is ``{kind: fraction in (0, 1)}`` for one of
    `BUDGET_KINDS`, with optional ``steps`` (an integer >= 1), ``lr`` (> 0) and ``chosen`` (group path ->
    candidate name)."""
    if not isinstance(budget, Mapping):
        raise ValueError(f"budget must be an object like {{'latency': 0.5}}, got {budget!r}")
    unknown = sorted(set(budget) - {*BUDGET_KINDS, "steps", "lr", "chosen"})
    if unknown:
        raise ValueError(f"budget: unknown field {unknown[0]!r}; it takes latency, params or macs, steps, lr, chosen")
    kinds = [kind for kind in BUDGET_KINDS if kind in budget]
    if len(kinds) != 1:
        raise ValueError(f"a budget names one of latency=, params= or macs=, got {dict(budget)}")
    fraction = budget[kinds[0]]
    if not (is_finite_number(fraction) and 0 < fraction < 1):
        raise ValueError(f"a budget is a fraction of the predecessor's {kinds[0]} in (0, 1), got {fraction!r}")
    if "steps" in budget and not (is_int(budget["steps"]) and budget["steps"] >= 1):
        raise ValueError(f"budget steps must be an integer >= 1, got {budget['steps']!r}")
    if "lr" in budget and not (is_finite_number(budget["lr"]) and budget["lr"] > 0):
        raise ValueError(f"budget lr must be a number > 0, got {budget['lr']!r}")
    chosen = budget.get("chosen")
    if "chosen" in budget and not (
        isinstance(chosen, Mapping) and chosen and all(isinstance(v, str) for v in [*chosen, *chosen.values()])
    ):
        raise ValueError(
            f"budget chosen names a candidate per group, like a run's report.json search.chosen "
            f"({{'layer1[0:2]': 'skip', ...}}), got {chosen!r}"
        )


def with_defaults(recipe: Mapping[str, Any]) -> dict[str, Any]:
    """A recipe as an older version's `Recipe.to_dict` wrote it (in a checkpoint or a report), with the fields it
    predates at their defaults, in the recipe and in each of its phases: what `Recipe.to_dict` gives for the same
    run today, so that a run or a report made before a field existed (``refine``, say) still matches its recipe."""
    phase_defaults = _field_defaults(Phase)
    filled = {**_field_defaults(Recipe), **recipe}
    for name in ("predecessor", "replacing", "refine"):
        if isinstance(filled.get(name), Mapping):
            filled[name] = {**phase_defaults, **filled[name]}
    return filled


def _phase(name: str, fields: Mapping[str, Any]) -> Phase:
    """Phase ``name`` of a recipe (``"replacing"``, ...) from ``fields``. Raises `ValueError` in one line that names
    the setting as the recipe and its overrides spell it (``replacing.steps``), where `Phase` alone names its class
    (``Phase.steps``), and one for a phase the recipe lacks given without the fields it has no default for."""
    missing = [f.name for f in dataclasses.fields(Phase) if f.name not in fields and f.default is dataclasses.MISSING]
    if missing:
        raise ValueError(
            f"the recipe has no {name} phase to take {' and '.join(missing)} from: set "
            f"{' and '.join(f'{name}.{field}' for field in missing)} too"
        )
    try:
        return Phase(**fields)
    except ValueError as error:  # every message of Phase starts with "Phase.<field> "
        raise ValueError(f"{name}.{str(error).removeprefix('Phase.')}") from None


def _as_tuple(value: Any) -> Any:
    """A list as a tuple (JSON gives lists where a recipe keeps tuples); anything else as it is."""
    return tuple(value) if isinstance(value, list) else value


def _field_defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


CATALOGUE = tuple(f"theseus_zoo.recipes.{family}" for family in ("toy", "text", "images", "graphs", "causal_lm"))
"""The built-in recipe modules: data only (they import nothing but this module), so listing every recipe imports
no model library."""

ENTRY_POINT_GROUP = "theseus_zoo.recipes"
"""Other packages add recipes by naming a module in this entry-point group; importing it registers them."""

RECIPES: Registry[Recipe] = Registry(
    "recipe",
    entry_point_group=ENTRY_POINT_GROUP,
    entry_points="modules",
    modules=CATALOGUE,
    where="`theseus recipes` lists them",
)
"""Every recipe by name: the built-in catalogue, entry points and `register_recipe`."""


def register_recipe(recipe: Recipe) -> Recipe:
    """Adds a recipe to the catalogue; a name used twice raises `KeyError`."""
    return RECIPES.register(recipe.name, recipe)


def get_recipe(name: str) -> Recipe:
    """The recipe named ``name``, from the built-in catalogue, entry points and `register_recipe`."""
    return RECIPES.get(name)


def list_recipes(pattern: str = "*") -> list[Recipe]:
    """The recipes whose name matches the glob ``pattern``, sorted by name."""
    return RECIPES.list(pattern)


def load_overrides(path: Path) -> dict[str, Any]:
    """Reads a JSON config file of recipe fields to override."""
    try:
        overrides = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:  # a folder, a file it may not read, not UTF-8 text
        cause = getattr(error, "strerror", None) or error
        raise ValueError(f"config file {path} cannot be read as a JSON file ({cause})") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"config file {path} is not valid JSON: {error}") from None
    if not isinstance(overrides, dict):
        raise ValueError(f"config file {path} must hold a JSON object of recipe fields")
    return overrides
