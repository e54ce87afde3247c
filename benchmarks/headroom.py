"""The headroom scan: how much does truncation cost on each Rotten Tomatoes task and depth?

    python -m benchmarks.headroom [--labels binary five regression] [--layers 3 2 1] [--steps 500] [--lr 1e-4]
                                  [--jobs 2] [--threads 1] [--runs runs/headroom] [--out benchmarks/results]

A cell where truncated fine-tuning loses less than the test set can resolve can only ever show Theseus losing
(the science issue). For each kind of labels, ``theseus compress --recipe minilm-rt-<labels>-<L>l`` fine-tunes the
predecessor once (in the first depth's run) and trains only the ``truncated`` baseline (``theseus: false``) at each
depth, on ``--steps`` steps (the other depths take that predecessor with ``--predecessor-from``). Kinds of labels
run in parallel (``--jobs``), depths one after another. Every run resumes where it stopped; finished runs are kept.
Writes ``<out>/headroom.json`` (every report) and ``headroom.md``: the predecessor's and the truncated model's test
metric with bootstrap standard errors and the cost of truncation, per cell.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from theseus_zoo.training.results import REPORT, Report
from theseus_zoo.training.run_directory import CHECKPOINT
from theseus_zoo.training.runners import CompressProcess, ensure_run

from .harness import environment, markdown_table, write_report


def run_cell(labels: str, layers: int, out: Path, config: Path, threads: int, predecessor_from: Path | None) -> dict:
    """One ``theseus compress`` run of the scan in a process of its own (resumed when a checkpoint is there, read
    when finished: `ensure_run`); returns its report."""
    runner = CompressProcess(f"minilm-rt-{labels}-{layers}l", ["--config", str(config)], threads, mode="a")
    return ensure_run(None, out, predecessor_from=predecessor_from, runner=runner).to_dict()


def finished_predecessor(runs: Path, labels: str, depths: list[int]) -> Path | None:
    """A run of ``labels`` (at any depth) whose predecessor is fine-tuned already: the others take it from there."""
    from theseus_zoo.training.state import read_state

    for layers in depths:
        checkpoint = runs / f"{labels}-{layers}l" / CHECKPOINT
        if checkpoint.exists() and "predecessor" in read_state(checkpoint).done:
            return checkpoint.parent
    return None


def run_labels(labels: str, depths: list[int], runs: Path, config: Path, threads: int, done: Callable) -> None:
    """Every depth of ``labels``, one after another; the first fine-tunes the predecessor unless one is there."""
    first = finished_predecessor(runs, labels, depths)
    for layers in depths:
        out = runs / f"{labels}-{layers}l"
        run_cell(labels, layers, out, config, threads, first if first != out else None)
        first = first or out
        done()


def cell(report: dict[str, Any]) -> dict[str, float]:
    typed = Report.from_dict(report)
    predecessor, truncated = typed.models["predecessor"], typed.models["baseline:truncated"]
    return {
        "predecessor": typed.test("predecessor"),
        "predecessor_se": predecessor.test_standard_error,
        "truncated": typed.test("baseline:truncated"),
        "truncated_se": truncated.test_standard_error,
        "cost_points": 100 * (typed.test("predecessor") - typed.test("baseline:truncated")),
        "test_examples": len(truncated.test_predictions),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", nargs="+", default=["five", "regression", "binary"])
    parser.add_argument("--layers", type=int, nargs="+", default=[3, 2, 1])
    parser.add_argument("--steps", type=int, default=500, help="steps of the truncated baseline")
    parser.add_argument("--lr", type=float, default=1e-4, help="of the truncated fine-tuning (the scan's: 1e-4)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=Path, default=Path("runs/headroom"))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    args.runs.mkdir(parents=True, exist_ok=True)
    config = args.runs / "scan.json"
    overrides = {
        "theseus": False,
        "baselines": ["truncated"],
        "replacing": {"steps": args.steps, "lr": args.lr},
        "steps_to_one": args.steps,
    }
    config.write_text(json.dumps(overrides) + "\n")
    lock = threading.Lock()

    def write() -> str:
        """headroom.json and .md from every finished cell so far (called after each run: nothing waits for the
        whole scan)."""
        with lock:
            return write_results(args, overrides, start)

    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [
            pool.submit(run_labels, labels, args.layers, args.runs, config, args.threads, write)
            for labels in args.labels
        ]
        for future in futures:
            future.result()
    print(write())


def write_results(args: argparse.Namespace, overrides: dict[str, Any], start: float) -> str:
    reports = {
        f"{labels}-{layers}l": Report.load(args.runs / f"{labels}-{layers}l").to_dict()
        for labels in args.labels
        for layers in args.layers
        if (args.runs / f"{labels}-{layers}l" / REPORT).exists()
    }
    cells = {name: cell(report) for name, report in reports.items()}
    command = "python -m benchmarks.headroom " + shlex.join(sys.argv[1:])
    results = {
        "command": command,
        "seconds": time.perf_counter() - start,
        "environment": environment(),
        "overrides": overrides,
        "cells": cells,
        "reports": reports,
    }
    text = markdown(results)
    write_report(results, args.out, "headroom", text)
    return text


def markdown(results: dict[str, Any]) -> str:
    """``headroom.md`` from ``headroom.json`` alone: per cell the predecessor and truncated fine-tuning (± bootstrap
    standard errors), the cost of truncation and whether it reaches the 3 points a comparison needs."""
    rows = []
    for name, entry in results["cells"].items():
        paired_bound = 100 * math.hypot(entry["predecessor_se"], entry["truncated_se"])
        rows.append(
            [
                name,
                f"{entry['predecessor']:.4f} ± {entry['predecessor_se']:.4f}",
                f"{entry['truncated']:.4f} ± {entry['truncated_se']:.4f}",
                f"{entry['cost_points']:+.1f}",
                f"{paired_bound:.1f}",
                "yes" if entry["cost_points"] >= 3 else "no",
            ]
        )
    return "\n".join(
        [
            "# Headroom scan: the cost of truncation, all-MiniLM-L6-v2 on Rotten Tomatoes\n",
            f"Truncated fine-tuning ({results['overrides']['replacing']['steps']} steps, recipe defaults otherwise) "
            "against the fine-tuned 6-layer predecessor, on the 70/10/20 split's test set (accuracy; `score` = mean "
            "of Pearson and Spearman for regression), ± a bootstrap standard error.\n",
            markdown_table(
                ["cell", "predecessor", "truncated", "cost (points)", "SE of the difference (unpaired)", "≥ 3"],
                rows,
            ),
            f"\nCommand: `{results['command']}` ({results['seconds'] / 60:.1f} min on "
            f"{results['environment']['processor']}).\n",
        ]
    )


if __name__ == "__main__":
    main()
