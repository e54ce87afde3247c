"""Result tables of zoo recipes: `theseus compress` over several seeds, medians per model.

    python -m benchmarks.recipes --recipe NAME [--seeds 0 1 2] [--jobs 2] [--threads 1] [--config FILE.json]
                                 [--runs runs/bench] [--out benchmarks/results]

Each seed runs as its own ``theseus compress`` process in ``<runs>/<recipe>/seed<N>`` (an interrupted
sweep resumes the runs it left unfinished and keeps the finished ones). ``--jobs`` processes run at
once with ``--threads`` threads each (on 2 cores: ``--jobs 2 --threads 1`` avoids oversubscription).
Writes ``<out>/recipe-<name>.json`` (every seed's report) and ``.md``: per model, the median test
metric over seeds with its range, the median retention of the predecessor's metric, parameters,
and the median measured speedup of the exported successor.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .harness import environment, markdown_table, write_report


def run_seed(
    recipe: str, seed: int, out: Path, threads: int, config: Path | None, predecessor_from: Path | None = None
) -> dict[str, Any]:
    """One ``theseus compress`` run (resumed when a checkpoint is there); returns its report."""
    report = out / "report.json"
    if not report.exists():
        command = [sys.executable, "-m", "theseus_zoo.cli", "compress", "--recipe", recipe, "--seed", str(seed)]
        command += ["--out", str(out), "--no-progress"] + (["--config", str(config)] if config else [])
        if (out / "checkpoint.pt").exists():
            command.append("--resume")
        elif predecessor_from is not None:
            command += ["--predecessor-from", str(predecessor_from)]
        environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        log = out.parent / f"seed{seed}.log"
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as stream:
            finished = subprocess.run(command, env=environment, stdout=stream, stderr=subprocess.STDOUT)
        if finished.returncode != 0:
            raise RuntimeError(f"seed {seed} failed (exit {finished.returncode}); see {log}")
    return json.loads(report.read_text())


def summarize(reports: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Medians over seeds per model: test metric (with min and max), retention, parameters; and speedup."""
    first = next(iter(reports.values()))
    metric = first["metric"]
    models = {}
    for name in first["models"]:
        values = [report["models"][name]["test"][metric] for report in reports.values()]
        retention = [report["models"][name]["retention_percent"] for report in reports.values()]
        models[name] = {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "per_seed": values,
            "median_retention_percent": statistics.median(retention),
            "parameters": first["models"][name]["parameters"],
        }
    speedups = [report["speedup"] for report in reports.values()]
    return {"metric": metric, "models": models, "median_speedup": statistics.median(speedups), "speedups": speedups}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 1)), help="threads per run")
    parser.add_argument("--config", type=Path, help="JSON recipe overrides, passed to every run")
    parser.add_argument(
        "--shared-predecessor",
        action="store_true",
        help="fine-tune the predecessor once (first seed); the other seeds vary compression and baselines only",
    )
    parser.add_argument("--runs", type=Path, default=Path("runs/bench"))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    directory = {seed: args.runs / args.recipe / f"seed{seed}" for seed in args.seeds}
    finished_before = [seed for seed in args.seeds if (directory[seed] / "report.json").exists()]
    reports, shared = {}, None
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
    command = "python -m benchmarks.recipes " + shlex.join(sys.argv[1:] if argv is None else argv)
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
        ]
        for name, entry in summary["models"].items()
    ]
    description = next(iter(reports.values()))["recipe"]["description"]
    markdown = "\n".join(
        [
            f"# Recipe `{args.recipe}`: median of {len(args.seeds)} seeds\n",
            f"{description}\n",
            *(
                [f"The predecessor was fine-tuned once (seed {args.seeds[0]}); seeds vary compression and baselines.\n"]
                if args.shared_predecessor
                else []
            ),
            markdown_table(
                ["model", f"test {metric} (median)", "range over seeds", "retention (median)", "parameters"], rows
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
