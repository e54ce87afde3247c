"""Powered comparisons: Theseus against the simple alternatives in one cell, lr picked on dev for every method alike.

    python -m benchmarks.compare --recipe minilm-rt-five-2l [--predecessor-from RUN] \\
        [--methods theseus truncated kd "theseus+unfreeze(which=head)" theseus+consistency theseus+soft] \\
        [--lrs 5e-5 1e-4 2e-4] [--lr METHOD=LR ...] [--seeds 0 1 2 3 4] [--config FILE.json] [--jobs 2] \
        [--threads 1] \
        [--runs runs/compare] [--out benchmarks/results/compare]

Every method trains on the same fine-tuned predecessor (``--predecessor-from``, or the first run's), the same data
order and the recipe's budget; each is one ``theseus compress`` run in ``<runs>/<variant>/<method>/lr<lr>/seed<N>``
(resumed when interrupted, kept when finished), where the variant is the recipe's name, or ``<recipe>/<config stem>``
with ``--config FILE.json`` (its overrides go under every method's own: a budget, say), so that variants never mix.
First each method runs seed ``--seeds[0]`` at every learning rate of ``--lrs`` and keeps the one with the best dev
metric (``--lr METHOD=LR`` pins a method's rate instead, e.g. the one a grid chose in another cell or budget); then it
runs the other seeds at that rate. Writes ``<out>/<name>.json`` (every report) and ``.md`` (``--name``, default
``compare-<recipe>[-<config stem>]``): per method its learning rate, test metric per seed, median and range, and the
wall-clock of its phase; and the first method (Theseus by default) minus every other, per seed and as a mean
over seeds with a 95% paired bootstrap interval over test examples; and ``<name>.png``: each method's test metric
per seed, and the paired differences with their intervals.

Raw results survive the machine: every finished run's ``report.json``, ``report.md`` and ``curves.png`` are copied
as it finishes to ``<out>/<variant>/<method>/lr<lr>/seed<N>/`` (commit them), and a run whose copy is there is not
run again when its run directory is gone, provided the copy was made with the recipe this run would use (its
recorded recipe, fields it predates at their defaults) and from the same predecessor (the same test predictions, to
`PREDECESSOR_TOLERANCE`); a copy made with another recipe is run again and replaced.
Every report of a comparison must come from one predecessor: the tables refuse to pair runs that do not, and a
predecessor fine-tuned here that differs from the archived reports' ends the comparison at once. A run directory that
holds a finished run of another recipe is refused (delete it); a run that fails while its method's rate is tuned
(a rate that diverges) is left out of the grid, marked failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from theseus_zoo.methods import parse_method, report_keys
from theseus_zoo.recipes import get_recipe, with_defaults
from theseus_zoo.training.results import REPORT, Report

from .harness import command_line, environment, markdown_table, write_report
from .recipes import paired_comparison, run_seed


def method_overrides(method: str) -> dict[str, Any]:
    """The recipe overrides that train ``method`` alone: any name of `theseus_zoo.methods` (``theseus``, the
    variants ``theseus+unfreeze(which=head)``, ``theseus+consistency``, ``theseus+soft``, the paper's Table 6
    ablations ``theseus(schedule=constant,base=0.5)`` and ``theseus(schedule=anti_curriculum)``, the baselines)."""
    return {"methods": [method]}


def model_of(method: str) -> str:
    """The report's model entry a method trains (`theseus_zoo.methods.report_keys`)."""
    return report_keys([method])[0][0]


def phase_of(method: str) -> str:
    """The stage whose best dev metric is the method's: a Theseus variant's replacing stage, a baseline's own."""
    return "replacing" if parse_method(method).base == "theseus" else model_of(method)


def method_name(text: str) -> str:
    """A method name as `theseus_zoo.methods.parse_method` reads it, spelled canonically."""
    try:
        return str(parse_method(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class Comparison:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = args.runs / self.variant(args)  # a --config is a variant of the recipe: runs and archive apart
        self.archive = args.out / self.variant(args)
        self.source: Path | None = args.predecessor_from
        self.first_run = threading.Lock()  # held by the run that fine-tunes the shared predecessor
        self.archived_runs: list[str] = []
        source_report = None if self.source is None else self.source / REPORT
        self.reference: Any = (  # the shared predecessor's test outputs, once a report says them
            predecessor_outputs(Report.load(source_report).to_dict())
            if source_report is not None and source_report.exists()
            else None
        )

    def overrides(self, method: str, lr: float) -> dict[str, Any]:
        base = json.loads(self.args.config.read_text()) if self.args.config else {}
        return {**base, **method_overrides(method), "replacing": {**base.get("replacing", {}), "lr": lr}}

    @staticmethod
    def variant(args: argparse.Namespace) -> str:
        """The folder of the comparison's runs and archive: the recipe, or ``<recipe>/<config stem>``."""
        return args.recipe if args.config is None else f"{args.recipe}/{args.config.stem}"

    def lrs_of(self, method: str) -> list[float]:
        """The learning rates a method is tuned over on the first seed: its pinned one, else ``--lrs``."""
        return [self.args.lr[method]] if method in self.args.lr else self.args.lrs

    def recipe(self, method: str, lr: float, seed: int) -> dict[str, Any]:
        """The recipe a run of ``method`` at ``lr`` and ``seed`` trains with, as its report records it."""
        recipe = get_recipe(self.args.recipe).with_overrides({**self.overrides(method, lr), "seed": seed})
        return json.loads(json.dumps(recipe.to_dict()))

    def run(self, method: str, lr: float, seed: int) -> dict[str, Any]:
        name = Path(method, f"lr{lr:g}", f"seed{seed}")
        directory = self.root / name
        if (directory / REPORT).exists():
            if with_defaults(Report.load(directory).recipe) != self.recipe(method, lr, seed):
                raise ValueError(
                    f"{directory} holds a finished run of another recipe than this comparison's (an edited --config "
                    "or method?): delete it, or give another --runs"
                )
        else:
            report = self.archived(method, lr, seed)
            if report is not None:
                self.archived_runs.append(str(name))
                return report
        config = directory.parent / f"seed{seed}.config.json"  # one per run: runs of one rate may start together
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(self.overrides(method, lr)) + "\n")
        if self.source is None:
            with self.first_run:  # the first fresh run fine-tunes the predecessor, alone; the others take it
                if self.source is None:
                    run_seed(self.args.recipe, seed, directory, self.args.threads, config)
                    self.source = directory
                    report = self.keep(directory, name)
                    if self.reference is not None and not same_predecessor(predecessor_outputs(report), self.reference):
                        raise ValueError(
                            f"{directory} fine-tuned a predecessor other than the archived reports' (another machine "
                            "or library build?): pass --predecessor-from a run of theirs, or give another --out"
                        )
                    self.reference = self.reference or predecessor_outputs(report)
                    return report
        run_seed(self.args.recipe, seed, directory, self.args.threads, config, self.source)
        return self.keep(directory, name)

    def keep(self, directory: Path, name: Path) -> dict[str, Any]:
        """Copies a finished run's report files to the archive (the raw results to commit); returns its report."""
        (self.archive / name).mkdir(parents=True, exist_ok=True)
        for file in (REPORT, "report.md", "curves.png"):
            if (directory / file).exists():
                shutil.copyfile(directory / file, self.archive / name / file)
        return Report.load(directory).to_dict()

    def archived(self, method: str, lr: float, seed: int) -> dict[str, Any] | None:
        """The archived report of this run, if it was made with the same recipe and the same predecessor."""
        path = self.archive / method / f"lr{lr:g}" / f"seed{seed}" / REPORT
        if not path.exists():
            return None
        report = Report.load(path).to_dict()
        if with_defaults(report["recipe"]) != self.recipe(method, lr, seed):
            print(f"compare: {path} was made with another recipe: running it again", file=sys.stderr)
            return None
        if self.reference is None:  # no predecessor yet: the archive's first report names it
            self.reference = predecessor_outputs(report)
        elif not same_predecessor(predecessor_outputs(report), self.reference):
            print(f"compare: {path} comes from another predecessor: running it again", file=sys.stderr)
            return None
        return report

    def all(self) -> dict[str, Any]:
        args, first_seed = self.args, self.args.seeds[0]
        pairs = [(method, lr) for method in args.methods for lr in self.lrs_of(method)]
        with ThreadPoolExecutor(args.jobs) as pool:
            tuning = {pair: pool.submit(self.run, *pair, first_seed) for pair in pairs}
            tuned: dict[tuple[str, float], dict[str, Any] | None] = {}
            for pair, future in tuning.items():
                try:
                    tuned[pair] = future.result()
                except RuntimeError as error:  # a rate that diverges is ruled out, not the end of the comparison
                    print(
                        f"compare: {pair[0]} at lr {pair[1]:g} failed, left out of its grid: {error}", file=sys.stderr
                    )
                    tuned[pair] = None
            chosen = {}
            for method in args.methods:
                finished = [lr for lr in self.lrs_of(method) if tuned[(method, lr)] is not None]
                if not finished:
                    raise RuntimeError(
                        f"{method} failed at every learning rate of its grid; see the logs in {self.root}"
                    )
                chosen[method] = max(
                    finished, key=lambda lr, m=method: tuned[(m, lr)]["phases"][phase_of(m)]["best_metric"]
                )
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
        check_one_predecessor(
            {f"{m} lr={lr:g} seed {first_seed}": report for (m, lr), report in tuned.items() if report is not None}
        )
        check_one_predecessor(
            {f"{m} lr={chosen[m]:g} seed {seed}": report for m, by in reports.items() for seed, report in by.items()}
        )
        return {"chosen_lr": chosen, "tuning": tuned, "reports": reports, "archived": sorted(self.archived_runs)}


def predecessor_outputs(report: dict[str, Any]) -> Any:
    """What identifies a report's predecessor: its per-example test predictions (its test metrics without them)."""
    predecessor = Report.from_dict(report).models["predecessor"]
    return predecessor.test if predecessor.test_predictions is None else predecessor.test_predictions


PREDECESSOR_TOLERANCE = 1e-3
"""How far two reports' predecessor outputs may differ, example by example, and still be one predecessor: the same
fine-tuning replayed on another machine or library build differs in the last bits of its weights (dev scores equal
to 9 digits), far below what moves a test metric; two different fine-tunings differ by far more."""


def same_predecessor(outputs: Any, other: Any) -> bool:
    if isinstance(outputs, dict) or isinstance(other, dict):
        return (
            isinstance(outputs, dict)
            and isinstance(other, dict)
            and outputs.keys() == other.keys()
            and all(abs(outputs[key] - other[key]) <= PREDECESSOR_TOLERANCE for key in outputs)
        )
    first, second = np.asarray(outputs, dtype=float), np.asarray(other, dtype=float)
    return first.shape == second.shape and bool(np.all(np.abs(first - second) <= PREDECESSOR_TOLERANCE))


def check_one_predecessor(reports: dict[str, dict[str, Any]]) -> None:
    """Raises `ValueError` naming the runs whose predecessor is not the first run's: they cannot be paired."""
    names = list(reports)
    reference = predecessor_outputs(reports[names[0]])
    others = [name for name in names[1:] if not same_predecessor(predecessor_outputs(reports[name]), reference)]
    if others:
        raise ValueError(
            f"these runs come from another predecessor than {names[0]}'s and cannot be paired with it: "
            f"{', '.join(others)}; delete their run directories and archived reports, or pass --predecessor-from"
        )


def grid_cell(outcome: dict[str, Any], method: str, lr: float) -> str:
    """The grid table's entry of ``method`` at ``lr``: its best dev metric (bold if chosen), failed, or not run."""
    if (method, lr) not in outcome["tuning"]:
        return "—"
    report = outcome["tuning"][(method, lr)]
    if report is None:
        return "failed"
    best = report["phases"][phase_of(method)]["best_metric"]
    return f"**{best:.4f}**" if lr == outcome["chosen_lr"][method] else f"{best:.4f}"


def method_lr(text: str) -> tuple[str, float]:
    """``METHOD=LR`` as given to ``--lr``."""
    text_method, _, lr = text.rpartition("=")  # a method's own arguments hold "=" too: kd(alpha=0.7)=1e-4
    method = method_name(text_method)
    try:
        value = float(lr)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected METHOD=LR with a number, e.g. theseus=2e-4") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the learning rate must be positive")
    return method, value


def merged(reports: dict[str, dict[int, dict]], method: str, reference: str) -> dict[int, dict[str, Any]]:
    """Per seed, one report holding ``reference``'s and ``method``'s models, for `paired_comparison`."""
    merged = {}
    for seed in reports[reference]:
        ours, theirs = Report.from_dict(reports[reference][seed]), Report.from_dict(reports[method][seed])
        models = {"a": ours.models[model_of(reference)], "b": theirs.models[model_of(method)]}
        merged[seed] = dataclasses.replace(ours, models=models).to_dict()
    return merged


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--methods", nargs="+", default=["theseus", "truncated", "kd"], type=method_name)
    parser.add_argument("--lrs", type=float, nargs="+", default=[5e-5, 1e-4, 2e-4])
    parser.add_argument(
        "--lr",
        type=method_lr,
        action="append",
        default=[],
        metavar="METHOD=LR",
        help="pin a method's learning rate instead of tuning it on --lrs (repeatable)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--predecessor-from", type=Path, help="a finished run whose fine-tuned predecessor to share")
    parser.add_argument("--config", type=Path, help="JSON recipe overrides under every method's own")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=Path, default=Path("runs/compare"))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "compare")
    parser.add_argument(
        "--name", help="file name of the tables and plot in --out (default: compare-<recipe>[-<config stem>])"
    )
    args = parser.parse_args(argv)
    args.lr = dict(args.lr)
    args.name = args.name or f"compare-{args.recipe}" + (f"-{args.config.stem}" if args.config else "")
    if unknown := sorted(set(args.lr) - set(args.methods)):
        parser.error(f"--lr pins {', '.join(unknown)}, not among --methods {' '.join(args.methods)}")
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        outcome = Comparison(args).all()
    except (ValueError, RuntimeError) as error:
        raise SystemExit(f"compare: {error}") from None
    reports = outcome["reports"]
    first = next(iter(next(iter(reports.values())).values()))
    metric = first["metric"]
    rows = []
    for method in args.methods:
        typed = [Report.from_dict(reports[method][seed]) for seed in args.seeds]
        values = [report.test(model_of(method)) for report in typed]
        seconds = [report.phases[phase_of(method)]["seconds"] for report in typed]
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
    command = command_line("benchmarks.compare", argv)
    results = {
        "command": command,
        "seconds": time.perf_counter() - start,
        "environment": environment(),
        "chosen_lr": outcome["chosen_lr"],
        "comparisons": comparisons,
        "reports": {method: {str(seed): r for seed, r in by.items()} for method, by in reports.items()},
        "archived": outcome["archived"],
        "tuning_dev": {  # None: the run failed
            f"{m} lr={lr:g}": None if r is None else r["phases"][phase_of(m)]["best_metric"]
            for (m, lr), r in outcome["tuning"].items()
        },
    }
    predecessor = Report.from_dict(first).test("predecessor")
    grid_lrs = sorted({lr for method, lr in outcome["tuning"]})
    grid_rows = [[method] + [grid_cell(outcome, method, lr) for lr in grid_lrs] for method in args.methods]
    tuned = [method for method in args.methods if method not in args.lr]
    picked = f"{', '.join(tuned)}: learning rate picked on dev (seed {args.seeds[0]}) from {args.lrs}" if tuned else ""
    pinned = "; ".join([picked] * bool(picked) + [f"{method}'s pinned at {lr:g}" for method, lr in args.lr.items()])
    variant = Comparison.variant(args)
    archived = outcome["archived"]
    markdown = "\n".join(
        [
            f"# `{variant}`: {args.methods[0]} against the alternatives, {len(args.seeds)} seeds\n",
            f"{first['recipe']['description']}. One fine-tuned predecessor for all (test {metric} {predecessor:.4f}); "
            f"{pinned}.\n",
            markdown_table(["method", "lr", f"test {metric} per seed", "median", "range", "minutes (median)"], rows),
            "\nPaired differences on the same test examples (per seed; mean over seeds with a 95% paired bootstrap "
            "interval over test examples):\n",
            markdown_table(["comparison", "per seed", "mean", "95% interval"], comparison_rows),
            f"\nThe learning-rate grid: best dev {metric} of each method on seed {args.seeds[0]} (chosen in bold):\n",
            markdown_table(["method"] + [f"lr {lr:g}" for lr in grid_lrs], grid_rows),
            f"\n![per seed and paired differences]({args.name}.png)\n",
            f"\nCommand: `{command}` ({results['seconds'] / 60:.1f} min"
            + (f"; {len(archived)} runs taken from the archive `{variant}/`" if archived else "")
            + ").\n",
        ]
    )
    plot(reports, comparisons, args.methods, metric, predecessor, args.out / f"{args.name}.png")
    write_report(results, args.out, args.name, markdown)
    print(markdown)


def plot(
    reports: dict[str, dict[int, dict]],
    comparisons: dict[str, dict[str, Any] | None],
    methods: list[str],
    metric: str,
    predecessor: float,
    path: Path,
) -> None:
    """Left: each method's test metric per seed (dots) and median (bar), the predecessor dashed. Right: the first
    method minus each other one, per seed (dots) and the mean over seeds with its 95% paired bootstrap interval."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    shown = {method: comparison for method, comparison in comparisons.items() if comparison is not None}
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 1.6 + 0.5 * len(methods)), constrained_layout=True)
    for row, method in enumerate(methods):
        values = [Report.from_dict(report).test(model_of(method)) for report in reports[method].values()]
        left.scatter(values, [row] * len(values), color=f"C{row}", alpha=0.7)
        left.plot([statistics.median(values)] * 2, [row - 0.3, row + 0.3], color=f"C{row}", linewidth=2)
    left.axvline(predecessor, color="gray", linestyle="--", label=f"predecessor {predecessor:.3f}")
    left.set_yticks(range(len(methods)), methods)
    left.invert_yaxis()
    left.set_xlabel(f"test {metric} (dots: seeds; bar: median)")
    left.legend(loc="best", fontsize="small")
    for row, comparison in enumerate(shown.values()):
        per_seed = list(comparison["per_seed"].values())
        left_error, right_error = comparison["mean"] - comparison["low"], comparison["high"] - comparison["mean"]
        right.scatter(per_seed, [row] * len(per_seed), color="gray", alpha=0.6, s=15)
        right.errorbar(comparison["mean"], row, xerr=[[left_error], [right_error]], fmt="o", color="black", capsize=4)
    right.axvline(0, color="gray", linewidth=1)
    right.set_yticks(range(len(shown)), [f"{methods[0]} − {method}" for method in shown])
    right.invert_yaxis()
    right.set_xlabel(f"difference in test {metric}\n(dots: seeds; mean with its 95% paired bootstrap interval)")
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)


if __name__ == "__main__":
    main()
