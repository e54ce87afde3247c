"""What each method's training costs over a whole run, steps alone, and the steps that match another method's cost.

    python -m benchmarks.run_cost --campaign NAME --cell CELL [--rounds 11] [--samples 4] [--threads 1]
    python -m benchmarks.run_cost --recipe RECIPE --methods theseus+warmup+kd kd truncated [--reference M] [--out DIR]

The timing protocol of compute matching. For each method (with ``--campaign``: every method of the cell at the
setting the campaign chose for it on dev, and the best Theseus variant on dev as the reference), every stage as
`theseus compress` builds it (`benchmarks.step_cost.stage_steps`: the trainer's model, parameters, loss and
optimizer; a ``+warmup`` variant's blockwise warm-up, then its replacing stage), one optimizer step is timed at
``--samples`` steps spread evenly over the stage, each at the replacing rate p the stage's schedule gives there; the
methods' steps run interleaved, round after round (a, b, c, a, b, c, ...: load on a shared machine hits every
method alike), after one warm-up round, on ``--threads`` threads (a campaign runs one: each step is then read as the
process's CPU time, `theseus_core.latency_clock`, so what other processes take is left out). No evaluation, checkpoint,
data loading or export is timed: a stage costs its steps times the mean over its samples of their median seconds,
a run the sum of its stages. A method matched to the reference trains its last stage for
``round(steps · (reference run − its other stages) / its last stage)`` steps, so that its run costs what the
reference's does.

Writes ``<out>/run-cost.json`` and ``.md`` (with ``--campaign``: beside the cell's raw results,
``benchmarks/results/campaigns/NAME/CELL/``, where `benchmarks.campaign` reads the matched steps from; a cell with
``compute_matched`` in its campaign then runs those methods at them on the final seeds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from theseus_core.costs import latency_clock
from theseus_zoo.recipes import Recipe, get_recipe
from theseus_zoo.tasks import build_task
from theseus_zoo.training.data_order import labelled_split

from .campaign_plan import ARCHIVE, CAMPAIGNS, Campaign
from .harness import command_line, environment, markdown_table, write_report
from .step_cost import StageStep, Step, stage_steps

RUN_COST = "run-cost.json"
SAMPLES = 4
"""Steps of a stage at which its step is timed, by default."""


def sampled_steps(steps: int, samples: int) -> list[int]:
    """``samples`` steps spread evenly over ``range(steps)`` (each the middle of an equal share), fewer when the stage
    is shorter."""
    count = max(1, min(samples, steps))
    return sorted({int((index + 0.5) * steps / count) for index in range(count)})


def measure(methods: dict[str, list[StageStep]], rounds: int, samples: int) -> dict[str, list[dict[str, Any]]]:
    """Per method, per stage: its steps and the median seconds of one step at each sampled step (module doc)."""
    timed: list[tuple[str, int, int, float, Step]] = []  # method, stage index, sampled step, p, step function
    stages: dict[str, list[dict[str, Any]]] = {}
    for method, built in methods.items():
        stages[method] = []
        for index, stage in enumerate(built):
            at = sampled_steps(stage.stage.phase.steps, samples)
            rates = [stage.schedule(step) if stage.schedule else 1.0 for step in at]
            stages[method].append(
                {"stage": stage.stage.name, "steps": stage.stage.phase.steps, "sampled_steps": at, "rates": rates}
            )
            timed += [(method, index, step, rate, stage.step) for step, rate in zip(at, rates, strict=True)]
    seconds: dict[tuple[str, int, int], list[float]] = {(m, i, at): [] for m, i, at, _, _ in timed}
    timed_call = latency_clock("cpu")  # one thread: the process's CPU time, what other processes take left out
    for round_index in range(rounds + 1):  # round 0 warms up (allocator, first AdamW state) and is dropped
        for method, index, at, rate, step in timed:
            torch.manual_seed(round_index)
            elapsed = timed_call(lambda step=step, rate=rate: step(rate))
            if round_index:
                seconds[method, index, at].append(elapsed)
    for method, entries in stages.items():
        for index, entry in enumerate(entries):
            medians = [statistics.median(seconds[method, index, at]) for at in entry["sampled_steps"]]
            entry["median_seconds"] = medians
            entry["seconds"] = entry["steps"] * statistics.mean(medians)
    return stages


def matched_steps(stages: list[dict[str, Any]], reference_seconds: float) -> int:
    """The steps of a method's last stage that make its run cost ``reference_seconds`` (module doc), at least 1."""
    *before, last = stages
    per_step = last["seconds"] / last["steps"]
    return max(1, round((reference_seconds - sum(stage["seconds"] for stage in before)) / per_step))


def costs(
    recipe: Recipe, settings: dict[str, dict[str, Any]], reference: str, rounds: int, samples: int, threads: int
) -> dict[str, Any]:
    """The run cost of each method in ``settings`` (method -> recipe overrides) and its steps matched to
    ``reference``'s."""
    torch.set_num_threads(threads)
    task = build_task(recipe.family, recipe.options, recipe.seed)
    predecessor = task.build_predecessor()  # a step costs the same trained or not
    train = task.dataset("train")
    labelled, unlabelled = labelled_split(len(train), recipe.labelled_examples)
    size = recipe.replacing.batch_size
    batch = task.collate([train[int(i)] for i in labelled[:size]])
    unlabelled_batch = task.collate([train[int(i)] for i in unlabelled[:size]]) if len(unlabelled) else None
    built = {}
    for method, overrides in settings.items():
        method_recipe = recipe.with_overrides({key: value for key, value in overrides.items() if key != "methods"})
        built[method] = stage_steps(method, method_recipe, predecessor, batch, unlabelled_batch)[0]
    stages = measure(built, rounds, samples)
    reference_seconds = sum(stage["seconds"] for stage in stages[reference])
    methods = {}
    for method, entries in stages.items():
        run = sum(stage["seconds"] for stage in entries)
        methods[method] = {
            "settings": settings[method],
            "stages": entries,
            "run_seconds": run,
            "ratio_to_reference": run / reference_seconds,
            "matched_steps": matched_steps(entries, reference_seconds),
        }
    return {"reference": reference, "rounds": rounds, "samples": samples, "threads": threads, "methods": methods}


def markdown(results: dict[str, Any], title: str, command: str) -> str:
    rows = [
        [
            f"`{method}`" + (" (reference)" if method == results["reference"] else ""),
            ", ".join(
                f"{stage['stage']} {stage['steps']} × {statistics.mean(stage['median_seconds']) * 1000:.1f} ms"
                for stage in entry["stages"]
            ),
            f"{entry['run_seconds']:.1f}",
            f"{entry['ratio_to_reference']:.2f}×",
            str(entry["matched_steps"]),
        ]
        for method, entry in results["methods"].items()
    ]
    return "\n".join(
        [
            f"# What a whole run of each method costs: {title}\n",
            f"Training steps alone (no evaluation, checkpoint or data loading), {results['threads']} thread(s); each "
            f"stage's step timed at up to {results['samples']} steps spread over it, at the replacing rate its "
            f"schedule gives there, median of {results['rounds']} interleaved rounds after a warm-up; a stage costs "
            "its steps times the mean of those medians. Matched steps: the steps of the method's last stage that "
            f"make its run cost `{results['reference']}`'s.\n",
            markdown_table(["method", "stages (steps × ms per step)", "run (s)", "× reference", "matched steps"], rows),
            f"\nCommand: `{command}`.\n",
        ]
    )


def campaign_settings(campaign: Campaign, cell: str) -> tuple[dict[str, dict[str, Any]], dict[str, str], str]:
    """Every method of ``cell`` at its chosen setting: its recipe overrides and the setting's name; and the best
    Theseus variant on dev (the reference). Raises `SystemExit` while a grid is not finished."""
    settings, names = {}, {}
    for method in campaign.methods_of(cell):
        chosen = campaign.chosen(cell, method)
        if chosen is None:
            raise SystemExit(
                f"{campaign.name} {cell}: {method} has not chosen a setting yet (its grid is not finished)"
            )
        settings[method], names[method] = campaign.overrides_of(cell, method, chosen), chosen
    return settings, names, campaign.best_variant(cell)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaign", help="a campaign in benchmarks/campaigns/; with --cell")
    parser.add_argument("--cell")
    parser.add_argument("--recipe")
    parser.add_argument("--methods", nargs="+")
    parser.add_argument("--reference", help="the method the others are matched to (default: the first)")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--samples", type=int, default=SAMPLES, help="sampled steps per stage")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--archive", type=Path, default=ARCHIVE)
    parser.add_argument("--campaigns", type=Path, default=CAMPAIGNS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if (args.campaign is None) == (args.recipe is None) or (args.campaign is not None) != (args.cell is not None):
        parser.error("give --campaign NAME --cell CELL, or --recipe R --methods M ...")
    if args.rounds < 1 or args.samples < 1 or args.threads < 1:
        parser.error("--rounds, --samples and --threads must be at least 1")
    command = command_line("benchmarks.run_cost", argv)
    if args.campaign is not None:
        campaign = Campaign.load(args.campaigns / f"{args.campaign}.json", archive=args.archive)
        if args.cell not in campaign.cells:
            parser.error(f"--cell: {args.campaign} has cells {', '.join(campaign.cells)}")
        recipe = get_recipe(campaign.cells[args.cell]["recipe"])
        settings, chosen, reference = campaign_settings(campaign, args.cell)
        out, title = args.out or campaign.archive / args.cell, f"{args.campaign}, {args.cell}"
    else:
        if not args.methods:
            parser.error("--recipe needs --methods")
        recipe, reference = get_recipe(args.recipe), args.reference or args.methods[0]
        if reference not in args.methods:
            parser.error(f"--reference {reference} is not one of --methods")
        settings, chosen = {method: {} for method in args.methods}, dict.fromkeys(args.methods)
        out, title = args.out or Path(__file__).parent / "results", args.recipe
    results = costs(recipe, settings, reference, args.rounds, args.samples, args.threads)
    for method, setting in chosen.items():
        results["methods"][method]["setting"] = setting
    text = markdown(results, title, command)
    name = Path(RUN_COST).stem if args.campaign else f"run-cost-{args.recipe}"
    write_report({"command": command, "environment": environment(), **results}, out, name, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
