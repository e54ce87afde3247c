"""What one training step of each method costs: Theseus as the paper has it, its extensions, and the baselines.

    python -m benchmarks.step_cost [--recipe minilm-rt-regression-2l] [--methods theseus theseus+soft ...]
                                   [--rates 0.5 1.0] [--rounds 12] [--threads 2] [--out benchmarks/results]

For one recipe, builds its task and predecessor (the weights as loaded: a step costs the same trained or not) and,
per method, the model, trainable parameters, optimizer and loss exactly as `theseus compress` would (the trainer's
own code: `Run`'s loss and parameter choices, `optimizer_groups`, clipping). It then times one optimizer step
(forward, backward, clipping, AdamW) per method on the same batch with the same routes, in interleaved rounds
(a, b, c, a, b, c, ...: load on a shared machine hits every method alike) after a warm-up round, and reports each
method's median and its ratio to Theseus' step at the same replacing rate p (a baseline has no p: it is measured
again alongside each rate). With few labels (a recipe with ``labelled_examples``), a method whose loss has a
label-free part (`Objective.unlabelled`: the distilling ones) also scores a batch of unlabelled examples each step,
as `theseus compress` does, and its step is timed with it. Writes ``<out>/step-cost-<recipe>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from theseus_zoo.recipes import Recipe, get_recipe
from theseus_zoo.tasks import build_task
from theseus_zoo.training.data_order import labelled_split
from theseus_zoo.training.loop import optimizer_for
from theseus_zoo.training.methods import Context, Stage, methods_of

from .compare import method_name, method_overrides
from .harness import command_line, environment, markdown_table, write_report

Step = Callable[[float], None]


@dataclass
class StageStep:
    """One stage of a method as the trainer builds it: its ``stage`` (name, phase), one training ``step`` as a
    function of the replacing rate, and ``schedule``: the rate at each of its steps (``None`` outside replacing)."""

    stage: Stage
    step: Step
    schedule: Callable[[int], float] | None


def stage_steps(
    method: str, recipe: Recipe, predecessor: nn.Module, batch: Any, unlabelled_batch: Any = None
) -> tuple[list[StageStep], nn.Module]:
    """Every stage of ``method`` (a `theseus_zoo.methods` name) under ``recipe`` as `theseus compress` builds it,
    each with one training step as a function of the replacing rate: the model, parameters, loss and optimizer of
    the trainer's own code (`theseus_zoo.training.methods`, `theseus_zoo.training.loop.optimizer_for`); with
    ``unlabelled_batch``, the loss's label-free part (if it has one) is also applied to it, as the loop does with few
    labels. Returns the stages with their steps, and the model they train. A recipe with a ``budget`` is refused
    (`ValueError`): the search that chooses its architecture runs in `theseus compress` alone, and timing the
    family's uniform plan in its place would price another model."""
    if recipe.budget is not None:
        raise ValueError(
            f"{recipe.name} has a budget: its steps train a searched architecture, which only theseus compress builds; "
            "time a run of it instead"
        )
    recipe = recipe.with_overrides({**method_overrides(method), "predecessor": None})
    task = build_task(recipe.family, recipe.options, recipe.seed)
    task.check()
    (trained,) = methods_of(recipe)
    trainee = trained.build(Context(task, recipe.for_method(trained.full_name), predecessor))
    model = trainee.model
    model.train()

    def stage_step(stage: Stage) -> StageStep:
        objective = stage.objective()
        optimizer = optimizer_for(model, objective, stage.phase)

        def step(rate: float) -> None:
            if objective.theseus is not None:
                objective.theseus.rate = rate
            for parameter in objective.late:
                parameter.requires_grad_(rate >= 1.0)
            value, _ = objective.loss(model, batch)
            if unlabelled_batch is not None and objective.unlabelled is not None:
                value = value + objective.unlabelled(model, unlabelled_batch)[0]
            if value.requires_grad:
                value.backward()
                torch.nn.utils.clip_grad_norm_(objective.trained, stage.phase.max_grad_norm or float("inf"))
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return StageStep(stage, step, objective.schedule if objective.theseus is not None else None)

    return [stage_step(stage) for stage in trainee.stages], model


def method_step(
    method: str, recipe_name: str, predecessor: nn.Module, batch: Any, unlabelled_batch: Any = None
) -> tuple[Step, nn.Module]:
    """One training step of ``method``'s last stage (its replacing stage, or a baseline's one) as a function of the
    replacing rate, and the model it trains (`stage_steps`)."""
    stages, model = stage_steps(method, get_recipe(recipe_name), predecessor, batch, unlabelled_batch)
    return stages[-1].step, model


def measure(steps: dict[str, Step], rates: list[float], rounds: int) -> dict[float, dict[str, list[float]]]:
    """Seconds of each method's step per round, per rate; every method of a round draws the same routes."""
    seconds: dict[float, dict[str, list[float]]] = {rate: {method: [] for method in steps} for rate in rates}
    for rate in rates:
        for round_index in range(rounds + 1):  # round 0 warms up (allocator, first AdamW state) and is dropped
            for method, step in steps.items():
                torch.manual_seed(round_index)
                start = time.perf_counter()
                step(rate)
                if round_index:
                    seconds[rate][method].append(time.perf_counter() - start)
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="minilm-rt-regression-2l")
    parser.add_argument(
        "--methods",
        nargs="+",
        type=method_name,
        default=["theseus", "theseus+soft", "theseus+consistency", "theseus+unfreeze", "truncated", "kd"],
    )
    parser.add_argument("--rates", type=float, nargs="+", default=[0.5, 1.0], help="Theseus' replacing rates p")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    if "theseus" not in args.methods:
        parser.error("--methods must include theseus: every ratio is to its step")
    if not all(0.0 <= rate <= 1.0 for rate in args.rates) or args.rounds < 1:
        parser.error("--rates must lie in [0, 1] and --rounds be at least 1")
    torch.set_num_threads(args.threads)
    recipe = get_recipe(args.recipe)
    task = build_task(recipe.family, recipe.options, recipe.seed)
    predecessor = task.build_predecessor()
    train = task.dataset("train")
    labelled, unlabelled = labelled_split(len(train), recipe.labelled_examples)
    size = recipe.replacing.batch_size
    batch = task.collate([train[int(i)] for i in labelled[:size]])
    unlabelled_batch = task.collate([train[int(i)] for i in unlabelled[:size]]) if len(unlabelled) else None
    steps = {
        method: method_step(method, args.recipe, predecessor, batch, unlabelled_batch)[0] for method in args.methods
    }
    seconds = measure(steps, args.rates, args.rounds)
    rows, results = [], {}
    for rate, by_method in seconds.items():
        reference = statistics.median(by_method["theseus"])
        for method, values in by_method.items():
            median = statistics.median(values)
            results[f"{method} p={rate:g}"] = {"median_seconds": median, "ratio_to_theseus": median / reference}
            shown_rate = f"{rate:g}" if method.startswith("theseus") else f"({rate:g})"
            rows.append([method, shown_rate, f"{median * 1000:.0f}", f"{median / reference:.2f}×"])
    command = command_line("benchmarks.step_cost", argv)
    markdown = "\n".join(
        [
            f"# One training step of each method on `{args.recipe}`\n",
            f"Batch of {size}"
            + (
                f" ({recipe.labelled_examples:,} labelled examples: distilling methods also score a batch of "
                f"{size} unlabelled ones)"
                if unlabelled_batch is not None
                else ""
            )
            + f", {args.threads} thread(s); median of {args.rounds} interleaved "
            "rounds after a warm-up; ratio to Theseus' step at the same p (a baseline has no p: it is measured again "
            "alongside each rate, shown in parentheses).\n",
            markdown_table(["method", "p", "ms per step (median)", "× Theseus"], rows),
            f"\nCommand: `{command}`.\n",
        ]
    )
    write_report(
        {"command": command, "environment": environment(), "batch_size": recipe.replacing.batch_size, **results},
        args.out,
        f"step-cost-{args.recipe}",
        markdown,
    )
    print(markdown)


if __name__ == "__main__":
    main()
