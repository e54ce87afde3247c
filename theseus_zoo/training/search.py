"""The budget search of a run (`Recipe.budget`): a successor per group, chosen before Theseus trains.

`BudgetSearch.check` runs before anything trains: the family must offer candidates
(`theseus_zoo.tasks.protocols.OffersCandidates`), and the budget must be reachable by the cheapest ones, measured on the
predecessor as the family builds it (costs depend on the architecture, not on the weights; latency is measured, so the
check builds the candidates, but distils, scores and solves nothing). Once the predecessor is fine-tuned,
`BudgetSearch.run` builds every candidate of every group (`theseus_core.search.CandidateLibrary`), distils them
blockwise on training batches (``budget["steps"]``), scores each alone in the predecessor on a held-out part of the
training split (its last batches, never seen by the distillation; not dev, not test), and solves for the choice (for a
latency budget, each choice assembled and measured and the solver corrected by what it measured, the uniform choices
measured beside, the best summed score of those within the budget kept:
`theseus_core.search.CandidateLibrary.choose_measured`, the trail in ``measured_choices``); every Theseus
variant of the run then trains that choice (`Context.plan`), starting from the distilled weights. The outcome goes into
the checkpoint (a resumed run keeps its choice and distils again, deterministically) and into ``report.json["search"]``.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

import theseus_core as th
from theseus_core.search import CandidateLibrary, Cost

from ..recipes.recipe import BUDGET_KINDS, Recipe
from ..tasks import Task
from ..tasks.protocols import ExampleInputs, OffersCandidates
from .data_order import DataOrder, labelled_split
from .figures import new_figure, save
from .methods import replace_options, to_device
from .timing import latency_ratio, macs_of

SCORE_BATCHES = 2
"""Batches at the end of the training split that score the candidates; the distillation never sees them."""


FRONTIER = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""The budgets whose choices the report plots beside the run's own (the solver's best at each, no training)."""


def frontier(
    library: CandidateLibrary, scores: dict[tuple[str, str], float], costs: tuple[dict, Cost], kind: str
) -> list[dict[str, Any]]:
    """The solver's choice at each budget of `FRONTIER` that the candidates can reach: budget, predicted cost ratio,
    summed score and the choice."""
    points = []
    for budget in FRONTIER:
        try:
            choice = library.choose(scores, costs, budget, kind)
        except ValueError:  # below the cheapest choice
            continue
        points.append(
            {
                "budget": budget,
                "predicted_ratio": choice.predicted_ratio,
                "score": choice.score,
                "chosen": choice.chosen,
            }
        )
    return points


def measure_frontier(
    search: dict[str, Any], task: Task, recipe: Recipe, predecessor: nn.Module, device: torch.device
) -> dict[str, Any]:
    """``search`` (a run's record) with every frontier point and every uniform choice assembled and measured
    (`BudgetSearch.measure`: ``params_ratio``, ``measured_latency_ratio``), so that the plot can put each at what it
    costs rather than at what the solver predicted."""
    paths = list(search["candidates"])
    uniform = {name: dict.fromkeys(paths, name) for name in search["uniform"]}
    choices = [point["chosen"] for point in search["frontier"]] + list(uniform.values())
    measured = BudgetSearch(task, recipe, device).measure(predecessor, choices)
    frontier = [
        {**point, **cost} for point, cost in zip(search["frontier"], measured[: len(search["frontier"])], strict=True)
    ]
    costs = dict(zip(uniform, measured[len(search["frontier"]) :], strict=True))
    return {
        **search,
        "frontier": frontier,
        "uniform": {name: {**point, **costs[name]} for name, point in search["uniform"].items()},
    }


def plot_search(search: dict[str, Any], png: Path) -> None:
    """The summed score of the solver's choice at every budget of the frontier against its cost ratio, the run's
    own choice marked, and each uniform choice (one kind of candidate for every group) as a point. A latency search
    puts each choice at its measured latency, once assembled (`measure_frontier`), and the solver's predictions
    beside them as crosses; a parameters search at its parameters (exact)."""
    (kind,) = search["budget"]
    measured = {"latency": "measured_latency_ratio", "params": "params_ratio", "macs": "macs_ratio"}[kind]

    def x(point: dict[str, Any]) -> float | None:
        return point.get(measured, point["predicted_ratio"] if kind != "latency" else None)

    figure, axis = new_figure(figsize=(6, 4))
    axis.axvline(search["budget"][kind], linestyle="--", color="grey", linewidth=1, label="budget")
    points = [p for p in search["frontier"] if x(p) is not None]
    axis.plot([x(p) for p in points], [p["score"] for p in points], "o-", label="searched")
    if kind == "latency":
        predicted = search["frontier"]
        axis.plot(
            [p["predicted_ratio"] for p in predicted],
            [p["score"] for p in predicted],
            "x",
            color="grey",
            label="searched, as predicted",
        )
    total = sum(search["candidates"][path][name]["score"] for path, name in search["chosen"].items())
    own = search.get("measured_latency_ratio") if kind == "latency" else search["predicted_ratio"]
    if own is not None:
        axis.plot([own], [total], "*", markersize=14, label="this run's choice")
    for name, point in search["uniform"].items():
        if x(point) is not None:
            axis.plot([x(point)], [point["score"]], "s", label=f"uniform {name}")
    axis.set_xlabel(f"{'measured ' if kind == 'latency' else ''}{kind} / the predecessor's")
    axis.set_ylabel("summed score (minus soft loss, 0 = predecessor)")
    axis.legend(fontsize=7)
    figure.tight_layout()
    save(figure, png)


class BudgetSearch:
    """The search a recipe's ``budget`` asks for, on ``task`` (module doc)."""

    def __init__(self, task: Task, recipe: Recipe, device: torch.device) -> None:
        assert recipe.budget is not None
        self.task, self.recipe, self.device = task, recipe, device
        self.kind = next(kind for kind in BUDGET_KINDS if kind in recipe.budget)
        self.fraction = float(recipe.budget[self.kind])
        self.steps, self.lr = int(recipe.budget.get("steps", 100)), float(recipe.budget.get("lr", 1e-3))
        self.given: dict[str, str] | None = recipe.budget.get("chosen")

    def library(self, predecessor: nn.Module) -> CandidateLibrary:
        """Every candidate the family offers for ``predecessor``'s groups, built and verified."""
        if not isinstance(self.task, OffersCandidates):
            raise ValueError(
                f"the {self.recipe.family} family offers no candidates for a budget search (its Task does not "
                "implement theseus_zoo.tasks.protocols.OffersCandidates)"
            )
        # a copy, since a family may convert the model it plans (a GNN's stepped form), on the device the candidates
        # are timed on and the inputs go to (the check's predecessor is built on the CPU)
        predecessor = copy.deepcopy(predecessor).to(self.device)
        candidates, on_finalize = self.task.candidates(predecessor)
        inputs = (
            to_device(self.task.example_inputs(), self.device) if isinstance(self.task, ExampleInputs) else (None, None)
        )
        return CandidateLibrary(
            predecessor, candidates, example_inputs=inputs[0], example_kwargs=inputs[1], on_finalize=on_finalize
        )

    def batches(self) -> tuple[list[Any], list[Any]]:
        """The distillation's batches (``steps`` of them, in a seeded order of the training split but its last
        `SCORE_BATCHES` batches) and those last batches, which score."""
        train, distilling, scoring = self._split()
        size = self.recipe.replacing.batch_size
        order = DataOrder(distilling, min(size, len(distilling)), self.recipe.seed, "search")
        score_batches = [self._collate(train, scoring[start : start + size]) for start in range(0, len(scoring), size)]
        return [self._collate(train, order.batch(step)) for step in range(self.steps)], score_batches

    def cost_batch(self) -> Any:
        """The batch costs are measured on: the first of the scoring batches of `batches`, collated alone."""
        train, _, scoring = self._split()
        return self._collate(train, scoring[: self.recipe.replacing.batch_size])

    def _split(self) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """The training split, and the indices of its labelled examples that distil and those that score."""
        train = self.task.dataset("train")
        labelled, _ = labelled_split(len(train), self.recipe.labelled_examples)
        held = min(len(labelled) // 2, SCORE_BATCHES * self.recipe.replacing.batch_size)
        return train, labelled[: len(labelled) - held], labelled[len(labelled) - held :]

    def _collate(self, train: Any, indices: torch.Tensor) -> Any:
        return to_device(self.task.collate([train[int(i)] for i in indices]), self.device)

    def check(self, predecessor: nn.Module) -> tuple[dict[tuple[str, str], Cost], Cost]:
        """Before any training: every candidate's measured cost (what `run` chooses by); raises `ValueError` in one
        line when the family offers none or the budget is below the cheapest choice. ``predecessor`` is only read.

        Measured latency needs every candidate built and run on its group's real input, and which candidates exist
        is what `replace_` verifies (one it refuses must not count as the cheapest), so this builds the
        `CandidateLibrary`, and nothing more: one batch collated (`cost_batch`), nothing distilled or scored
        (`CandidateLibrary.check_budget`). Candidates timed alone may over-predict the assembled model, so a
        latency budget below the cheapest choice by their times is refused only when that choice, assembled
        (`measure`), measures over it too: `run` then searches from it (`CandidateLibrary.choose_measured`)."""
        library = self.library(predecessor)
        if self.given is not None:
            try:
                library.check_choice(self.given)
            except ValueError as error:
                raise ValueError(f"budget chosen: {error}") from None
        costs = library.costs(self.cost_batch(), self.task.logits)
        if self.given is not None:  # chosen under this budget before: nothing to refuse by its predicted cost
            return costs
        try:
            library.check_budget(costs, self.fraction, self.kind)
        except ValueError as predicted:
            if self.kind != "latency" or not 0 < self.fraction < 1:
                raise
            cheapest = library.cheapest(costs, self.kind)
            (cost,) = self.measure(predecessor, [cheapest.chosen], library)
            measured = cost.get("measured_latency_ratio", float("inf"))
            if not measured <= self.fraction:
                raise ValueError(
                    f"{predicted}; assembled, the cheapest choice with a parameter to train measures "
                    f"{measured:.3f} of it"
                ) from None
        return costs

    def measure(
        self, predecessor: nn.Module, choices: list[dict[str, str]], library: CandidateLibrary | None = None
    ) -> list[dict[str, Any]]:
        """What each choice costs once assembled, as the run assembles its own (the family's preparation,
        `replace_` with the library's plan, `finalize`), against ``predecessor``: ``params_ratio`` and
        ``macs_ratio`` (exact: `theseus_core.multiply_adds`) and ``measured_latency_ratio`` (`timing.latency_ratio`),
        both on `Task.latency_batch`, eager. Weights do not change what an architecture costs, so the candidates are
        assembled as built, undistilled; the run's random streams are left as they were. A choice that does not
        assemble gets ``{"refused": reason}``; a choice met twice is assembled once. ``library``: the candidates to
        assemble from (default: built afresh)."""
        batch = to_device(self.task.latency_batch(), self.device)
        options = replace_options(self.task, self.device)
        total = sum(p.numel() for p in predecessor.parameters())
        whole_macs = macs_of(self.task.forward, predecessor, batch)  # counted once, not per choice
        measured: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            library = self.library(predecessor) if library is None else library  # building it draws
            for choice in choices:
                key = tuple(sorted(choice.items()))
                if key in measured:
                    continue
                model = copy.deepcopy(predecessor)
                self.task.plan(model)  # the family's preparation (a GNN's stepped form), as a run's
                try:
                    compact = th.replace_(model, library.plan(choice), seed=self.recipe.seed, **options).finalize()
                except (ValueError, TypeError, RuntimeError) as error:  # what the library refuses a candidate for
                    measured[key] = {"refused": f"{type(error).__name__}: {error}"}
                    continue
                measured[key] = {
                    "params_ratio": sum(p.numel() for p in compact.parameters()) / total,
                    "macs_ratio": macs_of(self.task.forward, compact, batch) / whole_macs if whole_macs else None,
                    "measured_latency_ratio": latency_ratio(
                        self.task.forward, predecessor, compact, batch, self.device
                    ),
                }
                del model, compact
        return [measured[tuple(sorted(choice.items()))] for choice in choices]

    def run(
        self,
        predecessor: nn.Module,
        costs: tuple[dict[tuple[str, str], Cost], Cost] | None,
        saved: dict[str, Any] | None = None,
        agree: Callable[[dict[str, Any]], dict[str, Any]] = lambda record: record,
        progress: bool = False,
    ) -> tuple[th.Plan, dict[str, Any]]:
        """Distils every candidate, then (unless ``saved`` holds an earlier choice of this run) scores and chooses;
        returns the plan of the choice and the record for the checkpoint and the report. ``costs``: what `check`
        measured (``None`` only with ``saved``, which needs none). ``agree`` turns this
        process's record into the one every process takes (a run on several processes: rank 0's, since measured
        costs differ between processes; default: its own). ``progress``: bars for the distillation and for the
        choices measured."""
        started = time.perf_counter()
        library = self.library(predecessor)
        distill, score = self.batches()
        with tqdm(total=self.steps, desc="search: distil", disable=not progress, leave=False) as bar:

            def step(_: int, loss: float) -> None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4g}", refresh=False)

            losses = library.distill_(distill, self.task.logits, steps=self.steps, lr=self.lr, on_step=step)
        if saved is not None:
            return library.plan(saved["chosen"]), saved
        if costs is None:
            raise ValueError("BudgetSearch.run needs the costs check measured, or the saved choice of this run")
        scores = library.scores(score, self.task.logits)
        try:
            choice, within, trail = self._choose(library, predecessor, scores, costs, progress)
        except th.NonFiniteScoreError as error:  # the core advises a lower lr, which here is another recipe
            raise ValueError(
                f"the search's distillation diverged: candidate {error.name!r} of the group at {error.path} scored "
                f"{error.value} after {self.steps} steps at lr {self.lr:g}; a lower lr (the config's budget.lr, or "
                "--budget ...,lr=) is another recipe, so a new run: --predecessor-from this run's directory keeps its "
                "fine-tuned predecessor"
            ) from None
        per_key, rest = costs
        total = rest.of(self.kind) + sum(per_key[(path, "keep")].of(self.kind) for path in library.paths)
        record = {
            "budget": {self.kind: self.fraction},
            "steps": self.steps,
            "chosen": choice.chosen,
            "given": self.given is not None,  # the recipe's budget named it (budget.chosen)
            "predicted_ratio": choice.predicted_ratio,
            "measured_choices": trail,
            "within_budget": within,
            "candidates": {
                path: {
                    name: {
                        "score": scores[(path, name)],
                        "latency": per_key[(path, name)].latency,
                        "params": per_key[(path, name)].params,
                        "macs": per_key[(path, name)].macs,
                    }
                    for name in library.names(path)
                }
                for path in library.paths
            },
            "refused": {f"{path} {name}": reason for (path, name), reason in library.refused.items()},
            "rest": {"latency": rest.latency, "params": rest.params, "macs": rest.macs},
            "distillation_loss": {"first": losses[0] if losses else None, "last": losses[-1] if losses else None},
            "frontier": frontier(library, scores, costs, self.kind),
            "uniform": {  # one kind of candidate for every group, as the runs without a budget have it
                name: {
                    "predicted_ratio": (
                        rest.of(self.kind) + sum(per_key[(path, name)].of(self.kind) for path in library.paths)
                    )
                    / total,
                    "score": sum(scores[(path, name)] for path in library.paths),
                }
                for name in dict.fromkeys(name for path in library.paths for name in library.names(path))
                if all((path, name) in scores for path in library.paths)
            },
            "seconds": time.perf_counter() - started,
        }
        record = agree(record)
        return library.plan(record["chosen"]), record

    def _choose(
        self,
        library: CandidateLibrary,
        predecessor: nn.Module,
        scores: dict[tuple[str, str], float],
        costs: tuple[dict[tuple[str, str], Cost], Cost],
        progress: bool,
    ) -> tuple[th.Choice, bool | None, list[dict[str, Any]] | None]:
        """``(choice, within_budget, trail)``: the recipe's own choice priced, else the solver's (by measured latency
        under a latency budget, the trail of choices measured). Raises what the core's choosing raises."""
        trail = None
        if self.given is not None:  # the recipe's choice: priced, not solved for (its exported cost is measured)
            choice = library.priced(self.given, scores, costs, self.kind)
            within = None if self.kind == "latency" else dataclasses.replace(choice, budget=self.fraction).within_budget
            if within is False:
                print(
                    f"theseus: warning: the recipe's choice (budget.chosen) costs {choice.predicted_ratio:.3f} of the "
                    f"predecessor's {self.kind}, over the budget of {self.fraction:g}; it is the one trained",
                    file=sys.stderr,
                )
        elif self.kind == "latency":  # the candidates' times need not add up: each choice assembled and measured
            bars: list[tqdm] = []  # drawn at the first measurement: nothing drawn for a refusal before it

            def measure(chosen: dict[str, str]) -> float:
                if not bars:
                    bars.append(tqdm(desc="search: measure choices", unit="choice", disable=not progress, leave=False))
                (bar,) = bars
                (cost,) = self.measure(predecessor, [chosen], library)
                ratio = cost.get("measured_latency_ratio", float("inf"))  # one that does not assemble never fits
                bar.update(1)
                bar.set_postfix(latency=f"{ratio:.3f}", refresh=False)
                return ratio

            # The uniform choices (what the runs without a budget train) are measured beside the solver's, and
            # compete by the summed score. Comparing the choices within the budget as wholes instead (assess=
            # CandidateLibrary.assembled_score after the blockwise distillation) picked, on GCN PolBlogs at 0.25,
            # layers without message passing that trained to 0.61-0.71 (0.834 over 10 seeds against 0.906): not used.
            try:
                choice, trail = library.choose_measured(
                    scores, costs, self.fraction, measure, self.kind, also=library.uniform_choices()
                )
            finally:
                for bar in bars:
                    bar.close()
            within = choice.within_budget
            if not within:  # the cheapest measured is the one taken
                print(
                    f"theseus: warning: no choice measured within the latency budget of {self.fraction:g}; the "
                    f"cheapest measured {choice.measured_ratio:.3f} of the predecessor's latency and is the one "
                    f"trained",
                    file=sys.stderr,
                )
        else:  # parameters and multiply-adds add up exactly
            choice = library.choose(scores, costs, self.fraction, self.kind)
            within = choice.within_budget
        return choice, within, trail
