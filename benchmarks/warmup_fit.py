"""How well ``+warmup`` fitted each group: the successors after blockwise distillation, in a finished run.

    python -m benchmarks.warmup_fit RUN [RUN ...] [--batches 4] [--name NAME] [--out benchmarks/results]

For each run directory (`theseus compress` with a ``+warmup`` variant), rebuilds the variant's model as the run
built it (`theseus_zoo.training.methods.Theseus` on the run's recipe and fine-tuned predecessor), loads the weights
its warm-up stage kept (those of its best dev evaluation), and measures on ``--batches`` training batches (the
split's last; all of it when smaller) each successor's relative squared error, in eval mode: mean
(successor(x) − group(x))² / variance of group(x), with x the group's real input (`BlockwiseWarmup`'s records), so
0 is a perfect fit and 1 no better than predicting the mean. Beside it: the same for the successors as `replace_`
initialises them before warm-up (a random initialisation is drawn anew from the recipe's seed, not the run's own
draw), and the dev metric of the model with every successor in place, the run's kept weights (equal to the
warm-up's ``best_metric`` in the run). Writes ``<out>/warmup-fit-<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import torch

from theseus_core import primary_output, split_primary
from theseus_zoo.recipes import get_recipe
from theseus_zoo.tasks import build_task
from theseus_zoo.training.methods import BlockwiseWarmup, Context, Theseus, methods_of
from theseus_zoo.training.rng import stream_seed
from theseus_zoo.training.state import read_state

from .harness import command_line, environment, markdown_table, write_report

RESULTS = Path(__file__).parent / "results"


def relative_errors(warmup: BlockwiseWarmup, model: torch.nn.Module, batches: list[Any]) -> list[float]:
    """Per site: mean over ``batches`` of MSE(successor(x), group(x)) / Var(group(x)), the successors in eval mode."""
    sites = warmup.theseus.sites
    errors: list[list[float]] = [[] for _ in sites]
    model.eval()  # BlockwiseWarmup restores this mode: no batch-norm statistic moves while measuring
    with torch.no_grad():
        for batch in batches:
            warmup(model, batch)  # records each group's input and output (the successors' terms are discarded)
            for index, site in enumerate(sites):
                args, kwargs, output = warmup.records[index]
                primary, rest, named = split_primary(args, kwargs, site.successor.primary_name, site.path)
                predicted = primary_output(site.successor(primary, *rest, **named))
                target = primary_output(output)
                errors[index].append(float(((predicted - target) ** 2).mean() / target.var()))
    return [statistics.mean(values) for values in errors]


def measure(run: Path, batches: int) -> dict[str, Any]:
    """The run's warm-up fit (module docstring)."""
    saved = json.loads((run / "recipe.json").read_text())
    recipe = get_recipe(saved["name"]).with_overrides({k: v for k, v in saved.items() if k != "name"})
    method = next((m for m in methods_of(recipe) if isinstance(m, Theseus) and "warmup" in m.flags), None)
    if method is None:
        raise SystemExit(f"{run}: the run trained no +warmup variant ({', '.join(recipe.method_names())})")
    variant, stage = method.full_name, "warmup" + method.suffix  # as the run named them
    state = read_state(run / "checkpoint.pt")
    if stage not in state.done:
        raise SystemExit(f"{run}: its stage {stage} is not finished")
    task = build_task(recipe.family, recipe.options, recipe.seed)
    predecessor = task.build_predecessor()
    if "predecessor" in state.done:
        predecessor.load_state_dict(state.done["predecessor"].weights)
    torch.manual_seed(stream_seed(recipe.seed, method.full_name))  # as the run drew its initialisation
    trainee = method.build(Context(task, recipe.for_method(method.full_name), predecessor))
    objective = trainee.stages[0].objective()
    warmup = objective.loss
    train = task.dataset("train")
    size = recipe.replacing.batch_size
    chosen = range(max(0, len(train) - batches * size), len(train))  # a full-graph batch: the whole split
    data = [task.collate([train[i] for i in chosen[start : start + size]]) for start in range(0, len(chosen), size)]
    before = relative_errors(warmup, trainee.model, data)
    trainee.model.load_state_dict(state.done[stage].weights)
    after = relative_errors(warmup, trainee.model, data)
    return {
        "run": str(run),
        "method": variant,
        "warmup_steps": state.done[stage].steps,
        "kept_step": state.done[stage].best_step,
        "sites": [site.path for site in objective.theseus.sites],
        "relative_error_before": before,
        "relative_error_after": after,
        "dev_every_successor": task.evaluate(trainee.model, "dev")[task.metric],
        "metric": task.metric,
    }


def markdown(results: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# How well +warmup fitted each group\n",
        f"`{command}`\n",
        "Relative squared error of each successor on its group's real input, eval mode (0: exact, 1: no better than "
        "the mean), before warm-up / after it; and the dev metric with every successor in place after it.\n",
    ]
    for result in results:
        rows = [
            [site, f"{a:.3f}", f"{b:.3f}"]
            for site, a, b in zip(
                result["sites"], result["relative_error_before"], result["relative_error_after"], strict=True
            )
        ]
        lines.append(
            f"## {result['run']} ({result['method']}, {result['warmup_steps']} warm-up steps; dev {result['metric']}"
            f" with every successor: {result['dev_every_successor']:.3f})\n"
        )
        lines.append(markdown_table(["group", "before", "after"], rows))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="finished runs with a +warmup variant")
    parser.add_argument(
        "--batches",
        type=int,
        default=4,
        help="training batches to measure on (the split's last; all of it when smaller)",
    )
    parser.add_argument("--name", default=None, help="the output files' name (default: the first run's directory)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.batches < 1:
        parser.error("--batches must be 1 or more")
    torch.set_num_threads(1)
    results = [measure(run, args.batches) for run in args.runs]
    command = command_line("benchmarks.warmup_fit", argv)
    name = args.name or args.runs[0].name
    text = markdown(results, command)
    write_report(
        {"command": command, "environment": environment(), "runs": results}, args.out, f"warmup-fit-{name}", text
    )
    print(text)


if __name__ == "__main__":
    main()
