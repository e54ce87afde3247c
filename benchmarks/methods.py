"""Every method of one cell at its own best settings, chosen on dev, over seeds.

    python -m benchmarks.methods --runs runs/i24/gcn --name gcn-polblogs [--out benchmarks/results]

Reads the finished runs ``<runs>/lr<SETTING>/seed<N>/report.json``, or ``<runs>/seed<N>/report.json`` at the
recipe's rate (each one `theseus compress --methods ...` run: every method it names on one seed's predecessor, data
order and test examples; `benchmarks/configs/*-grid.sh` make them). A setting is a learning rate (``lr1e-2``),
or one with a point of the replacing schedule (``lr1e-2-b0.1-one50``: base rate b and ``steps_to_one``), whose runs
may train the Theseus variants alone. For each method it picks, among the settings it was run at, the one with the
best mean dev metric over the seeds that every setting has (the best dev state of the method's last stage, what the
run kept), then reports at that setting: the test metric per seed, and against the best alternative (the
non-Theseus method with the best mean dev) and every other method, Theseus-variant minus other per seed with the
95% t interval over seeds (`stats.t_interval`) beside the 95% paired bootstrap over seeds and test examples
(`stats.paired_difference_over_seeds`), and the two at every setting both ran, side by side. Step-matched: every
method trains the same number of optimizer steps (``+warmup`` spends part of them on blockwise distillation).
Compute: each method's measured wall-clock (its stages' ``seconds``, evaluations included, median over seeds) and
its ratio to plain Theseus' in the same runs (same machine load; median over seeds), so a reader sees what a tie in
steps costs in time. Compute-matched (``--matched DIR...``): finished runs ``DIR/seed<N>/`` of methods given the steps
that make their wall-clock the best Theseus variant's (each on that seed's predecessor, ``--predecessor-from``, so
that they pair), compared with the best variant like the others. Writes ``<out>/methods-<name>.json`` / ``.md`` /
``.png``.
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from theseus_zoo.training import stats
from theseus_zoo.training.results import Report

from .harness import command_line, environment, markdown_table, write_report

RESULTS = Path(__file__).parent / "results"
INTERVAL_COLUMNS = ["comparison", "per seed", "mean", "t interval over seeds", "bootstrap (seeds × test)"]


def stages_of(report: Report, model: str) -> list[str]:
    """The checkpointed stages that trained ``model`` (`Report.stages`)."""
    return report.stages(model)


def method_seconds(report: Report, model: str) -> float:
    """Wall-clock of the stages that trained ``model`` in one run, evaluations included."""
    return sum(report.phases[stage]["seconds"] for stage in stages_of(report, model))


def best_dev(report: Report, model: str) -> float:
    """The dev metric of the state the run kept for ``model``: the best of its last stage."""
    return report.phases[stages_of(report, model)[-1]]["best_metric"]


def method_name(report: Report, model: str) -> str:
    """The method as the recipe named it (`Report.method_names`): the run's ``theseus`` is its first Theseus
    variant."""
    return report.method_names()[model]


def collect(runs: Path, settings: list[str] | None = None) -> dict[str, dict[int, Report]]:
    """``{setting: {seed: report}}`` of the finished runs under ``runs`` (those of ``settings`` when given): the
    ``lr<SETTING>/seed<N>/`` of a grid, or else ``seed<N>/`` runs at their recipe's replacing rate."""
    grid: dict[str, dict[int, Report]] = {}
    for report_path in sorted(runs.glob("lr*/seed*/report.json")):
        setting = report_path.parent.parent.name.removeprefix("lr")
        if settings is not None and setting not in settings:
            continue
        grid.setdefault(setting, {})[int(report_path.parent.name.removeprefix("seed"))] = Report.load(report_path)
    if not grid:  # one grid point: seed<N>/ runs at the recipe's own rate
        for report_path in sorted(runs.glob("seed*/report.json")):
            report = Report.load(report_path)
            lr = f"{report.recipe['replacing']['lr']:g}"
            grid.setdefault(lr, {})[int(report_path.parent.name.removeprefix("seed"))] = report
    if not grid:
        raise SystemExit(f"no finished runs under {runs} (lr*/seed*/report.json)")
    return grid


def collect_matched(directory: Path) -> dict[int, Report]:
    """``{seed: report}`` of the finished compute-matched runs ``directory/seed<N>/``."""
    reports = {
        int(path.parent.name.removeprefix("seed")): Report.load(path)
        for path in sorted(directory.glob("seed*/report.json"))
    }
    if not reports:
        raise SystemExit(f"no finished runs under {directory} (seed*/report.json)")
    return reports


def check_one_predecessor_per_seed(grid: dict[str, dict[int, Report]], *, require: bool = False) -> None:
    """Raises `SystemExit` unless every setting's run of a seed has the same predecessor (its test predictions, where
    the runs keep them): the comparisons pair methods of different settings on one seed. ``require``: a run that
    keeps no predictions is refused too (compute-matched runs pair by them alone)."""
    for seed in sorted({seed for by_seed in grid.values() for seed in by_seed}):
        seen: dict[str, Any] = {}
        for setting, by_seed in grid.items():
            if seed not in by_seed:
                continue
            predecessor = by_seed[seed].models.get("predecessor")
            if predecessor is not None and predecessor.test_predictions is not None:
                seen[setting] = predecessor.test_predictions
            elif require:
                raise SystemExit(f"seed {seed}: the run at {setting} keeps no predecessor predictions to pair by")
        first = next(iter(seen), None)
        other = next((setting for setting in seen if seen[setting] != seen[first]), None)
        if other is not None:
            raise SystemExit(
                f"seed {seed}: the runs at {first} and {other} have different predecessors, so their methods cannot "
                f"be paired; rerun one with --predecessor-from the other"
            )


def check_one_method_per_key(grid: dict[str, dict[int, Report]]) -> None:
    """Raises `SystemExit` when a report key names different methods in different runs: a run's ``theseus`` is its
    first Theseus variant, so the paper's Theseus in one run and ``theseus+warmup+kd`` in another would be pooled."""
    named: dict[str, dict[str, str]] = {}
    for setting, by_seed in grid.items():
        for report in by_seed.values():
            for model in report.models:
                if model != "predecessor":
                    named.setdefault(model, {}).setdefault(method_name(report, model), setting)
    for model, methods in named.items():
        if len(methods) > 1:
            (a, at_a), (b, at_b) = list(methods.items())[:2]
            raise SystemExit(
                f"the runs' {model!r} is {a} at {at_a} but {b} at {at_b}: read them separately (--settings), or run "
                f"every setting with the same --methods"
            )


def summarize(grid: dict[str, dict[int, Report]], matched: list[dict[int, Report]] | None = None) -> dict[str, Any]:
    """Per method: dev per setting it ran at, the chosen setting, test per seed there, seconds; and the comparisons;
    with ``matched`` (`collect_matched` of each directory), the best Theseus variant against each compute-matched
    method too."""
    seeds = sorted(set.intersection(*(set(by_seed) for by_seed in grid.values())))  # settings are chosen on these
    if not seeds:
        raise SystemExit("no seed is finished at every setting of the grid yet")
    first = grid[next(iter(grid))][seeds[0]]
    check_one_predecessor_per_seed(grid)
    check_one_method_per_key(grid)
    every = [model for by_seed in grid.values() for report in by_seed.values() for model in report.models]
    methods: dict[str, Any] = {}
    for model in [model for model in dict.fromkeys(every) if model != "predecessor"]:
        dev = {
            setting: statistics.mean(best_dev(by_seed[seed], model) for seed in seeds)
            for setting, by_seed in grid.items()
            if all(model in by_seed[seed].models for seed in seeds)
        }
        if not dev:
            continue  # on no setting for every seed yet
        # equal means (to 1e-6: runs store float32 scores, so one total over other seeds can differ by 1e-8) go to
        # the first in directory order
        chosen = max(dev, key=lambda setting: round(dev[setting], 6))
        reports = dict(sorted(grid[chosen].items()))  # tested on every seed finished at the chosen setting
        seconds = [method_seconds(r, model) for r in reports.values()]
        within = [  # the method's seconds over plain Theseus' in the same run: the same machine load
            method_seconds(r, model) / method_seconds(r, "theseus") for r in reports.values() if "theseus" in r.models
        ]
        methods[model] = {
            "method": method_name(grid[chosen][seeds[0]], model),
            "dev_by_setting": dev,
            "test_by_setting": {  # for the reader only: nothing is chosen on it
                setting: statistics.mean(report.test(model) for report in grid[setting].values()) for setting in dev
            },
            "setting": chosen,
            "test_per_seed": {seed: report.test(model) for seed, report in reports.items()},
            "test_mean": statistics.mean(report.test(model) for report in reports.values()),
            "median_seconds": statistics.median(seconds),
            "seconds_ratio_to_theseus": statistics.median(within) if within else None,
        }
    theseus_like = [model for model in methods if not model.startswith("baseline:")]
    alternatives = [model for model in methods if model.startswith("baseline:")]
    if not theseus_like or not alternatives:
        raise SystemExit(f"the settings read hold no Theseus variant or no alternative on every seed: {list(methods)}")

    def best_dev_mean(model: str) -> float:
        return round(max(methods[model]["dev_by_setting"].values()), 6)

    best_theseus, best_alternative = max(theseus_like, key=best_dev_mean), max(alternatives, key=best_dev_mean)
    comparisons = {}
    for variant in theseus_like:
        for other in methods:
            if other == variant or (other in theseus_like and other != "theseus"):
                continue
            settings = methods[variant]["setting"], methods[other]["setting"]
            comparison = compare(grid, variant, settings[0], other, settings[1])
            comparisons[f"{variant} − {other}"] = {**comparison, "models": [variant, other]}
    compute_matched, setting = {}, methods[best_theseus]["setting"]
    pairs = [(runs, m) for runs in matched or [] for m in next(iter(runs.values())).models if m != "predecessor"]
    for runs, model in pairs:
        if missing := sorted(set(runs) - set(grid[setting])):
            raise SystemExit(f"compute-matched runs of seeds {missing}, but none at setting {setting} to pair them")
        ours = {seed: grid[setting][seed] for seed in runs}
        check_one_predecessor_per_seed({f"setting {setting}": ours, "compute-matched": runs}, require=True)
        steps = {report.phases[stages_of(report, model)[-1]]["steps"] for report in runs.values()}
        if len(steps) != 1:
            raise SystemExit(f"the compute-matched runs of {model} trained different numbers of steps: {sorted(steps)}")
        (steps,) = steps
        label = f"{method_name(runs[min(runs)], model)}, {steps} steps"
        if label in compute_matched:
            raise SystemExit(f"two --matched directories hold {label}")
        compute_matched[label] = {
            "test_per_seed": {seed: report.test(model) for seed, report in sorted(runs.items())},
            "median_seconds": statistics.median(method_seconds(r, model) for r in runs.values()),
            "comparison": compare({**grid, "matched": runs}, best_theseus, setting, model, "matched"),
        }
    return {
        "seeds": seeds,
        "metric": first.metric,
        "settings": list(grid),
        "methods": methods,
        "best_theseus": best_theseus,
        "best_alternative": best_alternative,
        "headline": compare(
            grid, best_theseus, methods[best_theseus]["setting"], best_alternative, methods[best_alternative]["setting"]
        ),
        "comparisons": comparisons,
        "at_each_setting": {  # the headline's two methods side by side at every setting both ran: is it dev noise?
            setting: compare(grid, best_theseus, setting, best_alternative, setting)
            for setting in methods[best_theseus]["dev_by_setting"]
            if setting in methods[best_alternative]["dev_by_setting"]
        },
        "compute_matched": compute_matched,
    }


def compare(grid: dict[str, dict[int, Report]], a: str, setting_a: str, b: str, setting_b: str) -> dict:
    """``a`` (at ``setting_a``) minus ``b`` (at ``setting_b``) in points, paired per seed (same predecessor, data
    order and test examples) over the seeds finished at both settings: per seed, mean, 95% t interval over seeds, 95%
    bootstrap over seeds and test examples."""
    seeds = sorted(set(grid[setting_a]) & set(grid[setting_b]))
    per_seed = [100 * (grid[setting_a][seed].test(a) - grid[setting_b][seed].test(b)) for seed in seeds]
    result: dict[str, Any] = {"seeds": seeds, "per_seed": per_seed, "mean": statistics.mean(per_seed)}
    if len(seeds) >= 2:
        result["seed_interval"] = list(stats.t_interval(per_seed))
    report = grid[setting_a][seeds[0]]
    if report.test_labels is not None:
        pairs = {seed: (grid[setting_a][seed].scorer(a), grid[setting_b][seed].scorer(b)) for seed in seeds}
        over = stats.paired_difference_over_seeds(pairs, len(report.test_labels))
        result["test_set_interval"] = [100 * over["low"], 100 * over["high"]]
    return result


def verdict(comparison: dict[str, Any]) -> str:
    """`stats.seed_verdict` of a `compare` result."""
    interval = comparison.get("seed_interval")
    return stats.seed_verdict(tuple(interval) if interval else None, len(comparison["per_seed"]))


def markdown(summary: dict[str, Any], name: str, command: str) -> str:
    seeds, metric = summary["seeds"], summary["metric"]

    def interval(pair: list[float] | None) -> str:
        return f"[{pair[0]:+.2f}, {pair[1]:+.2f}]" if pair else "—"

    method_rows = [
        [
            entry["method"],
            ", ".join(f"{setting}: {value:.4f}" for setting, value in entry["dev_by_setting"].items()),
            entry["setting"],
            f"{entry['test_mean']:.4f}",
            ", ".join(f"{value:.4f}" for value in entry["test_per_seed"].values()),
            f"{entry['median_seconds']:.0f} s"
            + (f" ({entry['seconds_ratio_to_theseus']:.2f}×)" if entry["seconds_ratio_to_theseus"] else ""),
        ]
        for entry in summary["methods"].values()
    ]
    names = {model: entry["method"] for model, entry in summary["methods"].items()}  # the run's "theseus" by name
    comparison_rows = [
        [
            " − ".join(names[model] for model in comparison["models"]),
            ", ".join(f"{value:+.2f}" for value in comparison["per_seed"]),
            f"{comparison['mean']:+.2f}",
            interval(comparison.get("seed_interval")),
            interval(comparison.get("test_set_interval")),
            str(len(comparison["seeds"])),
            verdict(comparison),
        ]
        for comparison in summary["comparisons"].values()
    ]
    headline = summary["headline"]
    best, alternative = summary["methods"][summary["best_theseus"]], summary["methods"][summary["best_alternative"]]
    return "\n".join(
        [
            f"# Every method at its own best settings: `{name}`\n",
            f"Mean dev {metric} per setting the method ran at (learning rate, and for a schedule point `b` the base "
            f"rate and `one` the step p reaches 1; best dev state of the method's last stage, mean over seeds {seeds}, "
            f"those finished at every setting), the setting chosen on it, and the test {metric} there over every seed "
            "finished at that setting; wall-clock of the method's stages (median over "
            "seeds, evaluations included; the machine was shared, so ratios within a run are what to read).\n",
            markdown_table(
                ["method", f"dev {metric} by setting", "chosen", f"test {metric} (mean)", "per seed", "wall-clock"],
                method_rows,
            ),
            f"\nBest Theseus variant on dev: `{best['method']}` (setting {best['setting']}); best alternative on dev: "
            f"`{alternative['method']}` (setting {alternative['setting']}). "
            f"Difference in points: {headline['mean']:+.2f}, "
            f"seed-level 95% interval {interval(headline.get('seed_interval'))}, over seeds and test examples "
            f"{interval(headline.get('test_set_interval'))}, {len(headline['seeds'])} seeds: "
            f"{verdict(headline)}.\n",
            "Paired per seed, in points (each side at its own chosen setting; step-matched):\n",
            markdown_table([*INTERVAL_COLUMNS, "seeds", "verdict"], comparison_rows),
            f"\n`{best['method']}` − `{alternative['method']}` at each setting both ran (the same setting on both "
            "sides: whether the verdict hangs on which setting dev chose):\n",
            markdown_table(
                ["setting", *INTERVAL_COLUMNS[1:], "verdict"],
                [
                    [
                        setting,
                        ", ".join(f"{value:+.2f}" for value in entry["per_seed"]),
                        f"{entry['mean']:+.2f}",
                        interval(entry.get("seed_interval")),
                        interval(entry.get("test_set_interval")),
                        verdict(entry),
                    ]
                    for setting, entry in summary["at_each_setting"].items()
                ],
            ),
            *matched_section(summary, interval),
            f"\nCommand: `{command}`.\n",
        ]
    )


def setting_label(setting: str) -> str:
    """A grid point as the pages say it: ``4e-2-b0.5-one50`` is "lr 4e-2, b 0.5, p = 1 at 50"."""
    lr, *schedule = setting.split("-b")
    if not schedule:
        return f"lr {lr}"
    base, one = schedule[0].split("-one")
    return f"lr {lr}, b {base}, p = 1 at {one}"


def dev_role(summary: dict[str, Any], model: str) -> str:
    """What a method's row says of it: the best variant or the best alternative on dev, or nothing."""
    if model == summary["best_theseus"]:
        return " (best variant on dev)"
    return " (best alternative on dev)" if model == summary["best_alternative"] else ""


def summary_table(summary: dict[str, Any], versus: tuple[str, ...] = ("baseline:kd", "baseline:truncated")) -> str:
    """The short table of a results page from a ``methods-<name>.json``: every method at its dev choice, its mean test
    metric, each Theseus variant minus ``versus`` (points, mean and 95% t interval over seeds) and its wall-clock over
    plain Theseus'. Reads the current JSON and the one written before grid points were settings (``dev_by_lr``)."""
    methods, comparisons = summary["methods"], summary["comparisons"]

    def interval(comparison: dict[str, Any] | None) -> str:
        if comparison is None:
            return ""
        pair = comparison.get("seed_interval")
        spread = f" [{pair[0]:+.2f}, {pair[1]:+.2f}]" if pair else ""
        return f"{comparison['mean']:+.2f}{spread}".replace("-", "−")  # the pages' minus sign

    rows = []
    for model, entry in methods.items():
        setting = entry.get("setting", entry.get("lr"))
        role = dev_role(summary, model)
        ratio = entry.get("seconds_ratio_to_theseus")
        rows.append(
            [
                f"`{entry['method']}`{role}",
                setting_label(setting),
                f"{entry['test_mean']:.3f}",
                *[interval(comparisons.get(f"{model} − {other}")) for other in versus if other in methods],
                f"{ratio:.2f}" if ratio else "",
            ]
        )
    names = [methods[other]["method"] for other in versus if other in methods]
    return markdown_table(
        [
            f"method ({len(summary['seeds'])} seeds at every setting)",
            "chosen on dev",
            f"test {summary['metric']} (mean)",
            *[f"minus {name}, points (t over seeds)" for name in names],
            "wall-clock × Theseus'",
        ],
        rows,
    )


def matched_section(
    summary: dict[str, Any], interval: Callable[[list[float] | None], str], basis: str | None = None
) -> list[str]:
    """The compute-matched comparisons as markdown lines (none without ``--matched``); ``basis`` says what was
    matched (default: the methods' wall-clock, as `benchmarks.methods` matched it)."""
    if not summary.get("compute_matched"):
        return []
    best = summary["methods"][summary["best_theseus"]]
    rows = [
        [
            f"{best['method']} − {label}",
            ", ".join(f"{value:+.2f}" for value in entry["comparison"]["per_seed"]),
            f"{entry['comparison']['mean']:+.2f}",
            interval(entry["comparison"].get("seed_interval")),
            interval(entry["comparison"].get("test_set_interval")),
            f"{entry['median_seconds']:.0f} s",
            verdict(entry["comparison"]),
        ]
        for label, entry in summary["compute_matched"].items()
    ]
    basis = basis or f"their wall-clock `{best['method']}`'s ({best['median_seconds']:.0f} s)"
    return [
        f"\nCompute-matched: methods given the steps that make {basis}, on each seed's predecessor:\n",
        markdown_table([*INTERVAL_COLUMNS, "its wall-clock", "verdict"], rows),
    ]


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = list(summary["methods"].values())
    figure, axis = plt.subplots(figsize=(7, 3.6))
    for index, entry in enumerate(entries):
        values = list(entry["test_per_seed"].values())
        axis.scatter([index] * len(values), values, color="tab:gray", s=12, zorder=2)
        axis.bar(index, entry["test_mean"], color="tab:blue" if entry["method"].startswith("theseus") else "tab:orange")
    axis.set_xticks(range(len(entries)), [f"{e['method']}\n{e['setting']}" for e in entries], fontsize=7, rotation=20)
    low = min(min(e["test_per_seed"].values()) for e in entries)
    axis.set_ylim(low - 0.02, None)
    axis.set_ylabel(f"test {summary['metric']}")
    axis.grid(alpha=0.3, axis="y")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="lr<SETTING>/seed<N>/ run directories")
    parser.add_argument("--name", required=True, help="the cell's name in the output files")
    parser.add_argument(
        "--settings", nargs="+", help="only these grid points (as the lr<SETTING> directories spell them, less 'lr')"
    )
    parser.add_argument(
        "--matched", type=Path, nargs="+", help="directories of seed<N>/ runs of methods given compute-matched steps"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.name):
        parser.error("--name: letters, digits, '.', '_' and '-' only")
    summary = summarize(
        collect(args.runs, args.settings), [collect_matched(path) for path in args.matched] if args.matched else None
    )
    command = command_line("benchmarks.methods", argv)
    text = markdown(summary, args.name, command) + f"\n![methods](methods-{args.name}.png)\n"
    write_report({"command": command, "environment": environment(), **summary}, args.out, f"methods-{args.name}", text)
    plot(summary, args.out / f"methods-{args.name}.png")
    print(text)


if __name__ == "__main__":
    main()
