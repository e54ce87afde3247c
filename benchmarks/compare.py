"""Powered comparisons: Theseus against the simple alternatives in one cell, lr picked on dev for every method alike.

    python -m benchmarks.compare --recipe minilm-rt-five-2l [--predecessor-from RUN] \\
        [--methods theseus truncated kd theseus+unfreeze theseus+consistency theseus+kd] \\
        [--lrs 5e-5 1e-4 2e-4] [--seeds 0 1 2 3 4] [--config FILE.json] [--jobs 2] [--threads 1] \
        [--runs runs/compare] [--out DIR]

Every method trains on the same fine-tuned predecessor (``--predecessor-from``, or the first run's), the same data
order and the recipe's budget; each is one ``theseus compress`` run in ``<runs>/<recipe>/<method>/lr<lr>/seed<N>``
(resumed when interrupted, kept when finished). First each method runs seed ``--seeds[0]`` at every learning rate
of ``--lrs`` and keeps the one with the best dev metric; then it runs the other seeds at that rate. Writes
``<out>/compare-<recipe>.json`` (every report) and ``.md``: per method its learning rate, test metric per seed, median
and range, and the wall-clock of its phase; and Theseus (the paper's, first method) minus every other method, per
seed and as a mean over seeds with a 95% paired bootstrap interval over test examples.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .harness import environment, markdown_table, write_report
from .recipes import paired_comparison, run_seed

METHODS: dict[str, dict[str, Any]] = {
    "theseus": {"baselines": []},
    "theseus+unfreeze": {"baselines": [], "unfreeze_at_one": "head"},
    "theseus+unfreeze-all": {"baselines": [], "unfreeze_at_one": "all"},
    "theseus+consistency": {"baselines": [], "consistency_weight": 1.0},
    "theseus+kd": {"baselines": [], "kd_weight": 1.0},
    "theseus-constant": {"baselines": [], "schedule": "constant", "schedule_base": 0.5},  # Table 6's ablations
    "theseus-anti-curriculum": {"baselines": [], "schedule": "anti_curriculum"},
    "truncated": {"theseus": False, "baselines": ["truncated"]},
    "truncated-pretrained": {"theseus": False, "baselines": ["pretrained"]},
    "kd": {"theseus": False, "baselines": ["kd"]},
    "scratch": {"theseus": False, "baselines": ["scratch"]},
}
"""Each method as recipe overrides: Theseus as the paper has it, its extensions (``+``), its schedule ablations (the
paper's Table 6: a constant p = 0.5, the anti-curriculum), and the baselines alone."""


def model_of(method: str) -> str:
    """The report's model entry a method trains."""
    return "theseus" if method.startswith("theseus") else f"baseline:{METHODS[method]['baselines'][0]}"


def phase_of(method: str) -> str:
    return "replacing" if method.startswith("theseus") else model_of(method)


class Comparison:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = args.runs / args.recipe
        self.source: Path | None = args.predecessor_from

    def run(self, method: str, lr: float, seed: int) -> dict[str, Any]:
        directory = self.root / method / f"lr{lr:g}"
        directory.mkdir(parents=True, exist_ok=True)
        config = directory / "config.json"
        base = json.loads(self.args.config.read_text()) if self.args.config else {}
        overrides = {**base, **METHODS[method], "replacing": {**base.get("replacing", {}), "lr": lr}}
        config.write_text(json.dumps(overrides) + "\n")
        return run_seed(self.args.recipe, seed, directory / f"seed{seed}", self.args.threads, config, self.source)

    def all(self) -> dict[str, Any]:
        args, first_seed = self.args, self.args.seeds[0]
        pairs = [(method, lr) for method in args.methods for lr in args.lrs]
        if self.source is None:  # one run fine-tunes the predecessor, alone on every thread, before the others
            method, lr = pairs[0]
            self.run(method, lr, first_seed)
            self.source = self.root / method / f"lr{lr:g}" / f"seed{first_seed}"
        with ThreadPoolExecutor(args.jobs) as pool:
            tuning = {pair: pool.submit(self.run, *pair, first_seed) for pair in pairs}
            tuned = {pair: future.result() for pair, future in tuning.items()}
            chosen = {
                method: max(args.lrs, key=lambda lr, m=method: tuned[(m, lr)]["phases"][phase_of(m)]["best_metric"])
                for method in args.methods
            }
            seeds = {
                (method, seed): pool.submit(self.run, method, chosen[method], seed)
                for method in args.methods
                for seed in args.seeds[1:]
            }
            reports = {
                method: {first_seed: tuned[(method, chosen[method])]}
                | {seed: seeds[(method, seed)].result() for seed in args.seeds[1:]}
                for method in args.methods
            }
        return {"chosen_lr": chosen, "tuning": tuned, "reports": reports}


def merged(reports: dict[str, dict[int, dict]], method: str, reference: str) -> dict[int, dict[str, Any]]:
    """Per seed, one report holding ``reference``'s and ``method``'s models, for `paired_comparison`."""
    return {
        seed: {
            **reports[reference][seed],
            "models": {
                "a": reports[reference][seed]["models"][model_of(reference)],
                "b": reports[method][seed]["models"][model_of(method)],
            },
        }
        for seed in reports[reference]
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--methods", nargs="+", default=["theseus", "truncated", "kd"], choices=list(METHODS))
    parser.add_argument("--lrs", type=float, nargs="+", default=[5e-5, 1e-4, 2e-4])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--predecessor-from", type=Path, help="a finished run whose fine-tuned predecessor to share")
    parser.add_argument("--config", type=Path, help="JSON recipe overrides under every method's own")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=Path, default=Path("runs/compare"))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    outcome = Comparison(args).all()
    reports = outcome["reports"]
    first = next(iter(next(iter(reports.values())).values()))
    metric = first["metric"]
    rows = []
    for method in args.methods:
        values = [reports[method][seed]["models"][model_of(method)]["test"][metric] for seed in args.seeds]
        seconds = [reports[method][seed]["phases"][phase_of(method)]["seconds"] for seed in args.seeds]
        rows.append(
            [
                method,
                f"{outcome['chosen_lr'][method]:g}",
                ", ".join(f"{value:.4f}" for value in values),
                f"{statistics.median(values):.4f}",
                f"{min(values):.4f}–{max(values):.4f}",
                f"{statistics.median(seconds) / 60:.1f}",
            ]
        )
    reference = args.methods[0]
    comparisons = {
        method: paired_comparison(merged(reports, method, reference), "a", "b") for method in args.methods[1:]
    }
    comparison_rows = [
        [
            f"{reference} − {method}",
            ", ".join(f"{value:+.4f}" for value in comparison["per_seed"].values()),
            f"{comparison['mean']:+.4f}",
            f"[{comparison['low']:+.4f}, {comparison['high']:+.4f}]",
        ]
        for method, comparison in comparisons.items()
        if comparison is not None
    ]
    command = "python -m benchmarks.compare " + shlex.join(sys.argv[1:] if argv is None else argv)
    results = {
        "command": command,
        "seconds": time.perf_counter() - start,
        "environment": environment(),
        "chosen_lr": outcome["chosen_lr"],
        "comparisons": comparisons,
        "reports": {method: {str(seed): r for seed, r in by.items()} for method, by in reports.items()},
        "tuning_dev": {
            f"{m} lr={lr:g}": r["phases"][phase_of(m)]["best_metric"] for (m, lr), r in outcome["tuning"].items()
        },
    }
    predecessor = first["models"]["predecessor"]["test"][metric]
    markdown = "\n".join(
        [
            f"# `{args.recipe}`: Theseus against the alternatives, {len(args.seeds)} seeds\n",
            f"{first['recipe']['description']}. One fine-tuned predecessor for all (test {metric} {predecessor:.4f}); "
            f"each method's learning rate picked on dev (seed {args.seeds[0]}) from {args.lrs}.\n",
            markdown_table(["method", "lr", f"test {metric} per seed", "median", "range", "minutes (median)"], rows),
            "\nPaired differences on the same test examples (per seed; mean over seeds with a 95% paired bootstrap "
            "interval over test examples):\n",
            markdown_table(["comparison", "per seed", "mean", "95% interval"], comparison_rows),
            f"\nCommand: `{command}` ({results['seconds'] / 60:.1f} min).\n",
        ]
    )
    write_report(results, args.out, f"compare-{args.recipe}", markdown)
    print(markdown)


if __name__ == "__main__":
    main()
