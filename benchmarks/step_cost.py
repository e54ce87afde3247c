"""What one training step of each method costs: Theseus as the paper has it, its extensions, and the baselines.

    python -m benchmarks.step_cost [--recipe minilm-rt-regression-2l] [--methods theseus theseus+kd ...]
                                   [--rates 0.5 1.0] [--rounds 12] [--threads 2] [--out benchmarks/results]

For one recipe, builds its task and predecessor (the weights as loaded: a step costs the same trained or not) and,
per method, the model, trainable parameters, optimizer and loss exactly as `theseus compress` would (the trainer's
own code: `Run`'s loss and parameter choices, `optimizer_groups`, clipping). It then times one optimizer step
(forward, backward, clipping, AdamW) per method on the same batch with the same routes, in interleaved rounds
(a, b, c, a, b, c, ...: load on a shared machine hits every method alike) after a warm-up round, and reports each
method's median and its ratio to Theseus' step at the same replacing rate p (a baseline has no p: it is measured
again alongside each rate). Writes ``<out>/step-cost-<recipe>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import copy
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import theseus_core as th
from theseus_zoo.recipes import get_recipe
from theseus_zoo.training.optimization import optimizer_groups, predecessor_parameters

from .compare import METHODS
from .harness import environment, markdown_table, write_report

Step = Callable[[float], None]


def method_step(method: str, recipe_name: str, predecessor: nn.Module, batch: Any, out: Path) -> tuple[Step, nn.Module]:
    """One training step of ``method`` (a `benchmarks.compare.METHODS` name) as a function of the replacing rate, and
    the model it trains."""
    from theseus_zoo.training.trainer import Run

    recipe = get_recipe(recipe_name).with_overrides({**METHODS[method], "predecessor": None})
    run = Run(recipe, out / method, progress=False)
    run.lock.release()  # nothing of the run is written beyond its recipe.json: the step is all we use
    task, phase = run.task, recipe.replacing
    theseus = None
    if recipe.theseus:
        model = copy.deepcopy(predecessor)
        theseus = th.replace_(model, task.plan(model), seed=recipe.seed)
        groups = run._replacing_parameters(model, theseus)
        compute_loss = run._replacing_loss(predecessor, theseus) or run._task_loss
    else:
        (name,) = recipe.baselines
        model = run._baseline_model(name, predecessor)
        groups = predecessor_parameters(model)
        compute_loss = run._distillation_loss(predecessor, recipe.kd_alpha) if name == "kd" else run._task_loss
    trained = [parameter for _, group in groups for parameter in group]
    late = groups[1][1] if len(groups) > 1 else []
    optimizer = torch.optim.AdamW(optimizer_groups(model, trained, phase.weight_decay), lr=phase.lr)
    model.train()

    def step(rate: float) -> None:
        if theseus is not None:
            theseus.rate = rate
        for parameter in late:
            parameter.requires_grad_(rate >= 1.0)
        value, _ = compute_loss(model, batch)
        if value.requires_grad:
            value.backward()
            torch.nn.utils.clip_grad_norm_(trained, phase.max_grad_norm or float("inf"))
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, model


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
        choices=list(METHODS),
        default=["theseus", "theseus+kd", "theseus+consistency", "theseus+unfreeze-all", "truncated", "kd"],
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
    with tempfile.TemporaryDirectory() as scratch:
        from theseus_zoo.tasks import build_task

        task = build_task(recipe.family, recipe.options, recipe.seed)
        predecessor = task.build_predecessor()
        train = task.dataset("train")
        batch = task.collate([train[i] for i in range(recipe.replacing.batch_size)])
        steps = {
            method: method_step(method, args.recipe, predecessor, batch, Path(scratch))[0] for method in args.methods
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
    command = "python -m benchmarks.step_cost " + shlex.join(sys.argv[1:] if argv is None else argv)
    markdown = "\n".join(
        [
            f"# One training step of each method on `{args.recipe}`\n",
            f"Batch of {recipe.replacing.batch_size}, {args.threads} thread(s); median of {args.rounds} interleaved "
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
