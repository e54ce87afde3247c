"""Result tables of zoo recipes: `theseus compress` over several seeds, medians per model.

    python -m benchmarks.recipes --recipe NAME [--seeds 0 1 2] [--jobs 2] [--threads 1] [--config FILE.json]
                                 [--shared-predecessor | --predecessor-from RUN] [--runs runs/bench]
                                 [--out benchmarks/results]
    python -m benchmarks.recipes --check NAME [--tolerance 0.001] [--threads N]

Each seed runs as its own ``theseus compress`` process in ``<runs>/<recipe>/seed<N>`` (an interrupted
sweep resumes the runs it left unfinished and keeps the finished ones). ``--jobs`` processes run at
once with ``--threads`` threads each (on 2 cores: ``--jobs 2 --threads 1`` avoids oversubscription).
Writes ``<out>/recipe-<name>.json`` (every seed's report) and ``.md``: per model, the median test
metric over seeds with its range, the median retention of the predecessor's metric, parameters,
the size of its export on disk, the median wall-clock of its phases (with a recipe's ``refine`` phase,
both of a model's), and the median measured speedup of the exported successor.
When the reports carry per-example test predictions (`Task.scores_examples`), Theseus is compared
with every other model: the per-seed paired differences, their mean, and a 95% paired bootstrap
interval of that mean (test examples resampled, the same resample for every seed and both models).

``--check NAME`` reruns the first seed of the archived ``recipe-NAME.json`` with the recipe its report recorded
(into ``<runs>/check/NAME``) and says, per model, whether the test metric matches the archive within
``--tolerance``; it exits 1 when one does not (a table whose code changed under it must be rerun).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from theseus_zoo.recipes import with_defaults
from theseus_zoo.training import stats
from theseus_zoo.training.results import REPORT, Report, score_examples
from theseus_zoo.training.runners import CompressProcess, ensure_run

from .harness import command_line, environment, markdown_table, write_report


def run_seed(
    recipe: str, seed: int, out: Path, threads: int, config: Path | None, predecessor_from: Path | None = None
) -> dict[str, Any]:
    """One ``theseus compress`` run in a process of its own with ``threads`` threads (resumed when a checkpoint is
    there, read when finished: `ensure_run`); returns its report."""
    arguments = ["--seed", str(seed)] + (["--config", str(config)] if config else [])
    runner = CompressProcess(recipe, arguments, threads, log=out.parent / f"seed{seed}.log", name=f"seed {seed}")
    return ensure_run(None, out, predecessor_from=predecessor_from, runner=runner).to_dict()


def score(report: dict[str, Any], predictions: np.ndarray, chosen: np.ndarray) -> float:
    """The report's test metric of ``predictions`` on the examples ``chosen`` (`results.score_examples`)."""
    return score_examples(report["metric"], predictions, np.asarray(report["test_labels"]), chosen)


def paired_comparison(
    reports: dict[int, dict[str, Any]], model: str, other: str, resamples: int = 1000
) -> dict[str, Any] | None:
    """``model`` minus ``other`` on the test metric: per seed, their mean, and a 95% bootstrap interval of the mean
    (`stats.paired_difference_over_seeds`, numpy's stream); ``None`` when the reports have no per-example
    predictions."""
    if not all("test_labels" in report for report in reports.values()):
        return None
    typed = {seed: Report.from_dict(report) for seed, report in reports.items()}
    size = len(next(iter(typed.values())).test_labels)
    pairs = {seed: (report.scorer(model), report.scorer(other)) for seed, report in typed.items()}
    return stats.paired_difference_over_seeds(pairs, size, resamples, resampling=stats.NUMPY)


def phase_seconds(report: Report, model: str) -> float | None:
    """Wall-clock of the phases that made ``model`` in one report: its own (``replacing`` for Theseus) and, in a
    recipe with a ``refine`` phase, its ``refine:<model>``; ``None`` when the report does not say."""
    own = "replacing" if model == "theseus" else model
    seconds = [report.phases[phase].get("seconds") for phase in (own, f"refine:{model}") if phase in report.phases]
    return sum(seconds) if seconds and None not in seconds else None


def summarize(reports: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Medians over seeds per model: test metric (with min and max), retention, parameters, size on disk,
    wall-clock; speedup; and Theseus' paired comparisons with every other model."""
    typed = [Report.from_dict(report) for report in reports.values()]
    first = typed[0]
    models = {}
    for name in first.models:
        values = [report.test(name) for report in typed]
        retention = [report.models[name].retention_percent for report in typed]
        models[name] = {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "per_seed": values,
            "median_retention_percent": statistics.median(retention),
            "parameters": first.models[name].parameters,
        }
        sizes = [report.models[name].size_on_disk_bytes for report in typed]
        if all(value is not None for value in sizes):
            models[name]["median_size_on_disk_bytes"] = statistics.median(sizes)
        seconds = [phase_seconds(report, name) for report in typed]
        if all(value is not None for value in seconds):
            models[name]["median_seconds"] = statistics.median(seconds)
    speedups = [report.speedup for report in typed]
    comparisons = {}
    if "theseus" in first.models:
        for name in first.models:
            if name != "theseus" and (comparison := paired_comparison(reports, "theseus", name)) is not None:
                comparisons[name] = comparison
    return {
        "metric": first.metric,
        "models": models,
        "median_speedup": statistics.median(speedups),
        "speedups": speedups,
        "comparisons": comparisons,
    }


def compare_tests(archived: dict[str, Any], rerun: dict[str, Any]) -> tuple[list[list[str]], float]:
    """Per model of an archived report, its test metric, the rerun's and the difference (table rows), and the
    largest absolute difference."""
    metric, rows, worst = archived["metric"], [], 0.0
    for model, entry in archived["models"].items():
        before, after = entry["test"][metric], rerun["models"][model]["test"][metric]
        worst = max(worst, abs(after - before))
        rows.append([model, f"{before:.4f}", f"{after:.4f}", f"{after - before:+.4f}"])
    return rows, worst


def check(name: str, results: Path, runs: Path, threads: int, tolerance: float) -> bool:
    """Reruns the first seed of the archived table ``<results>/recipe-<name>.json`` with the recipe its report
    recorded (every field, so a recipe changed since is run as it was) and the thread count its command gave
    (results on a CPU can depend on it; ``threads`` when the command gave none), and prints, per model, the archived
    and the rerun test metric; returns whether every model is within ``tolerance`` of its archived value."""
    path = results / f"recipe-{name}.json"
    if not path.exists():
        raise SystemExit(f"--check: no archived table {path}")
    archived = json.loads(path.read_text())
    seed, report = next(iter(archived["reports"].items()))
    if "--predecessor-from" in archived.get("command", ""):
        raise SystemExit(
            f"--check: the seeds of {path.name} took another run's predecessor ({archived['command']}); rerun that "
            f"run first and check it, or rerun the table's command"
        )
    command = shlex.split(archived.get("command", ""))
    if "--threads" in command:
        threads = int(command[command.index("--threads") + 1])
    out = runs / "check" / name / f"seed{seed}"
    if out.exists():
        raise SystemExit(f"--check: {out} exists; remove it to rerun")
    out.parent.mkdir(parents=True, exist_ok=True)
    config = out.parent / f"seed{seed}.json"
    config.write_text(json.dumps(with_defaults(report["recipe"])))
    rerun = run_seed(report["recipe"]["name"], int(seed), out, threads, config)
    rows, worst = compare_tests(report, rerun)
    matches = worst <= tolerance
    made = archived.get("environment", {}).get("commit", "an unrecorded commit")
    print(markdown_table(["model", f"archived test {report['metric']}", "rerun", "difference"], rows))
    print(
        f"{path.name}, seed {seed} (made at {made}), rerun at {environment()['commit']} on {threads} thread(s): "
        f"largest difference "
        f"{worst:.4f}; {'reproduces' if matches else 'does NOT reproduce'} within {tolerance}"
    )
    return matches


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe")
    parser.add_argument(
        "--check",
        metavar="NAME",
        help="rerun the first seed of the archived table recipe-NAME.json and say whether it matches",
    )
    parser.add_argument("--tolerance", type=float, default=1e-3, help="--check: largest difference that matches")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 1)), help="threads per run")
    parser.add_argument("--config", type=Path, help="JSON recipe overrides, passed to every run")
    parser.add_argument(
        "--shared-predecessor",
        action="store_true",
        help="fine-tune the predecessor once (first seed); the other seeds vary compression and baselines only",
    )
    parser.add_argument(
        "--predecessor-from",
        type=Path,
        help="every seed takes this finished run's predecessor (a recipe with the same predecessor phase and options "
        "but for the successor's shape, `theseus compress --predecessor-from`)",
    )
    parser.add_argument("--runs", type=Path, default=Path("runs/bench"))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    if args.check is not None:
        sys.exit(0 if check(args.check, args.out, args.runs, args.threads, args.tolerance) else 1)
    if args.recipe is None:
        parser.error("give --recipe NAME (or --check NAME)")
    if args.shared_predecessor and args.predecessor_from is not None:
        parser.error("--shared-predecessor and --predecessor-from are exclusive: the predecessor comes from one place")
    start = time.perf_counter()
    directory = {seed: args.runs / args.recipe / f"seed{seed}" for seed in args.seeds}
    finished_before = [seed for seed in args.seeds if (directory[seed] / REPORT).exists()]
    reports, shared = {}, args.predecessor_from
    if args.shared_predecessor:  # the first seed alone on every thread, then the others from its predecessor
        first = args.seeds[0]
        reports[first] = run_seed(args.recipe, first, directory[first], args.jobs * args.threads, args.config)
        shared = directory[first]
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {
            seed: pool.submit(run_seed, args.recipe, seed, directory[seed], args.threads, args.config, shared)
            for seed in args.seeds
            if seed not in reports
        }
        reports.update({seed: future.result() for seed, future in futures.items()})
    reports = {seed: reports[seed] for seed in args.seeds}
    summary = summarize(reports)
    command = command_line("benchmarks.recipes", argv)
    results = {
        "command": command,
        "seconds": time.perf_counter() - start,
        "environment": environment(),
        "summary": summary,
        "reports": reports,
    }
    metric = summary["metric"]
    rows = [
        [
            name,
            f"{entry['median']:.4f}",
            f"{entry['min']:.4f}–{entry['max']:.4f}",
            f"{entry['median_retention_percent']:.1f}%",
            f"{entry['parameters']:,}",
            f"{entry['median_size_on_disk_bytes'] / 1e6:.2f}" if "median_size_on_disk_bytes" in entry else "—",
            f"{entry['median_seconds'] / 60:.1f}" if "median_seconds" in entry else "—",
        ]
        for name, entry in summary["models"].items()
    ]
    comparison_rows = [
        [
            f"Theseus − {name}",
            ", ".join(f"{value:+.4f}" for value in comparison["per_seed"].values()),
            f"{comparison['mean']:+.4f}",
            f"[{comparison['low']:+.4f}, {comparison['high']:+.4f}]",
        ]
        for name, comparison in summary["comparisons"].items()
    ]
    description = next(iter(reports.values()))["recipe"]["description"]
    markdown = "\n".join(
        [
            f"# Recipe `{args.recipe}`: median of {len(args.seeds)} seeds\n",
            f"{description}\n",
            *(
                [f"The predecessor was fine-tuned once (seed {args.seeds[0]}); seeds vary compression and baselines.\n"]
                if args.shared_predecessor
                else [f"Every seed took the predecessor of `{args.predecessor_from}`.\n"]
                if args.predecessor_from is not None
                else []
            ),
            markdown_table(
                [
                    "model",
                    f"test {metric} (median)",
                    "range over seeds",
                    "retention (median)",
                    "parameters",
                    "size on disk (MB)",
                    "minutes (median, its phases)",
                ],
                rows,
            ),
            *(
                [
                    "\nPaired differences on the same test examples (per seed in seed order; mean over seeds with a "
                    "95% paired bootstrap interval over test examples):\n",
                    markdown_table(["comparison", "per seed", "mean", "95% interval"], comparison_rows),
                ]
                if comparison_rows
                else []
            ),
            f"\nExported successor vs predecessor, measured inference speedup (eager, median over seeds): "
            f"{summary['median_speedup']:.2f}x (per seed: {', '.join(f'{s:.2f}' for s in summary['speedups'])}).",
            f"\nCommand: `{command}` ({results['seconds'] / 60:.1f} min on {results['environment']['processor']}"
            f" with {args.jobs} job(s) x {args.threads} thread(s)"
            + (f"; seeds {finished_before} were found finished in {args.runs} and not rerun" if finished_before else "")
            + ").\n",
        ]
    )
    write_report(results, args.out, f"recipe-{args.recipe}", markdown)
    print(markdown)


if __name__ == "__main__":
    main()
