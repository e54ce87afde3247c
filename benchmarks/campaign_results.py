"""A campaign's results, cell by cell: every method at the setting dev chose for it, over the final seeds.

    python -m benchmarks.campaign_results NAME [--out benchmarks/results]

Reads the archived raw reports of campaign ``NAME`` (`benchmarks.campaign`: ``benchmarks/results/campaigns/NAME/``)
and writes, per cell, ``<out>/campaign-NAME-<cell>.json`` / ``.md`` / ``.png``, in the layout of `benchmarks.methods`
(so that its tables, plot and the "At a glance" rows of `benchmarks.tables` read them alike), methods keyed by
their full names. For each method: the mean dev metric of each setting over the grid seeds (the campaign's choice,
`Campaign.chosen`; edge extensions included), the mean test metric of each setting on the same seeds (for the
reader only: nothing is chosen on it) and their rank correlation across the settings (Spearman: does dev choose
what test would?), then the test metric of every finished final seed at the chosen setting. The best Theseus
variant on dev against every other method, and each variant against every alternative: the difference per seed
(paired: one predecessor, data order and split per seed), its mean, the 95% t interval over seeds and the 95%
bootstrap over seeds and test examples (`benchmarks.methods.compare`), and the verdict (`stats.verdict`). A method
whose grid is not finished is left out; a cell is ``complete`` when every method has every final seed. Where the cell
matches compute (`Campaign.matched_setting`), the best variant against each method given the steps that make its
training cost the variant's (``compute_matched``, as `benchmarks.methods` lays it out).

A cell compared ``against`` other cells (a successor per group searched under a budget, against the uniform
successors of the cells on the same predecessors) is summarized across them instead (`summarize_against`): every
method of the cell and of the cells it is compared against, each at its own chosen setting, with its test metric, the
measured latency of its exported model as a fraction of the predecessor's (each run's own interleaved measurement,
`Report.speedup`) and its parameters likewise; the cell's best variant minus each of them, paired per seed; and, per
seed, the architecture the search chose.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from theseus_zoo.methods import parse_method, report_keys
from theseus_zoo.training.results import Report

from . import methods as methods_table
from .campaign_plan import ARCHIVE, CAMPAIGNS, Campaign, CampaignRun
from .harness import environment, markdown_table, write_report

RESULTS = Path(__file__).parent / "results"


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda index: values[index])
    result = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            result[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return result


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation of two equally long lists; ``None`` under 3 values or when either is constant."""
    if len(a) != len(b):
        raise ValueError(f"rank correlation of lists of {len(a)} and {len(b)} values")
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return statistics.correlation(ranks(a), ranks(b))


def report_key(method: str) -> str:
    """The key a one-method run's report gives ``method``'s model (`theseus_zoo.methods.report_keys`)."""
    return report_keys([method])[0][0]


def is_theseus(method: str) -> bool:
    return parse_method(method).base == "theseus"


def final_reports(campaign: Campaign, cell: str, method: str, setting: str) -> dict[int, Report]:
    """The archived reports of ``method`` at ``setting`` in ``cell`` on every finished final seed, by seed."""
    found = {}
    for seed in campaign.final_seeds:
        report = campaign.report(CampaignRun(cell, method, setting, seed))
        if report is not None:
            found[seed] = report
    return found


def summarize_cell(campaign: Campaign, cell: str) -> dict[str, Any] | None:
    """The cell's summary in `benchmarks.methods`' layout (module doc), or ``None`` while no method has chosen."""
    final: dict[str, dict[int, Report]] = {}  # method -> seed -> report at its chosen setting
    entries: dict[str, Any] = {}
    pooled_dev, pooled_test = [], []
    for method in campaign.methods_of(cell):
        chosen = campaign.chosen(cell, method)
        if chosen is None:
            continue
        key = report_key(method)
        dev = campaign.dev_means(cell, method)
        test = {
            setting: statistics.mean(
                campaign.report(CampaignRun(cell, method, setting, seed)).test(key) for seed in campaign.grid_seeds
            )
            for setting in dev
        }
        pooled_dev += list(dev.values())
        pooled_test += list(test.values())
        reports = final_reports(campaign, cell, method, chosen)
        final[method] = reports
        seconds = [methods_table.method_seconds(report, key) for report in reports.values()]
        entries[method] = {
            "method": method,
            "dev_by_setting": dev,
            "test_by_setting": test,
            "dev_test_rank_correlation": spearman(list(dev.values()), list(test.values())),
            "setting": chosen,
            "at_edge": campaign.at_edge(cell, method, chosen),
            "test_per_seed": {seed: report.test(key) for seed, report in reports.items()},
            "test_mean": statistics.mean(report.test(key) for report in reports.values()),
            "median_seconds": statistics.median(seconds),
        }
    variants = [method for method in entries if is_theseus(method)]
    alternatives = [method for method in entries if not is_theseus(method)]
    if not variants or not alternatives:
        return None
    for entry in entries.values():  # separate runs, one campaign: medians of the same machine's runs, not pairs
        plain = entries.get("theseus")
        entry["seconds_ratio_to_theseus"] = entry["median_seconds"] / plain["median_seconds"] if plain else None

    def best_dev(method: str) -> float:
        return round(entries[method]["dev_by_setting"][entries[method]["setting"]], 6)

    best_variant, best_alternative = max(variants, key=best_dev), max(alternatives, key=best_dev)
    grid = dict(final)  # and the compute-matched runs, under their labels

    def compare(a: str, b: str) -> dict[str, Any]:
        return {**methods_table.compare(grid, report_key(a), a, report_key(b), b), "models": [a, b]}

    compute_matched = {}
    for method in entries:
        matched = campaign.matched_setting(cell, method)
        if matched is None:
            continue
        name, setting = matched
        reports = final_reports(campaign, cell, method, name)
        if not reports:
            continue
        label = f"{method}, {setting['replacing']['steps']} steps"
        grid[label] = reports
        compute_matched[label] = {
            "setting": name,
            "test_per_seed": {seed: report.test(report_key(method)) for seed, report in reports.items()},
            "median_seconds": statistics.median(
                methods_table.method_seconds(report, report_key(method)) for report in reports.values()
            ),
            "comparison": methods_table.compare(
                grid, report_key(best_variant), best_variant, report_key(method), label
            ),
        }
    comparisons = {}
    for variant in variants:
        for other in entries:
            if other != variant and (not is_theseus(other) or (variant == best_variant and other == "theseus")):
                comparisons[f"{variant} − {other}"] = compare(variant, other)
    first = next(iter(next(iter(final.values())).values()))
    return {
        "campaign": campaign.name,
        "cell": cell,
        "recipe": campaign.cells[cell]["recipe"],
        "overrides": campaign.cells[cell].get("overrides", {}),
        "grid_seeds": campaign.grid_seeds,
        "final_seeds": campaign.final_seeds,
        "complete": len(entries) == len(campaign.methods_of(cell))
        and all(len(reports) == len(campaign.final_seeds) for reports in final.values()),
        "seeds": sorted(set.intersection(*(set(reports) for reports in final.values()))),
        "metric": first.metric,
        "settings": sorted({setting for entry in entries.values() for setting in entry["dev_by_setting"]}),
        "methods": entries,
        "dev_test_rank_correlation": spearman(pooled_dev, pooled_test),
        "best_theseus": best_variant,
        "best_alternative": best_alternative,
        "headline": compare(best_variant, best_alternative),
        "comparisons": comparisons,
        "at_each_setting": {},  # methods of a campaign have settings of their own
        "compute_matched": compute_matched,
    }


def summarize_against(campaign: Campaign, cell: str) -> dict[str, Any] | None:
    """The cell against the cells its ``against`` names (module doc), or ``None`` until its best variant on dev
    (`Campaign.best_variant`) has a finished final seed; a model that shares no finished seed with it is listed
    without a comparison."""
    rows: dict[str, dict[str, Any]] = {}
    grid: dict[str, dict[int, Report]] = {}
    predecessor: dict[int, float] = {}
    for source in [cell, *campaign.cells[cell]["against"]]:
        for method in campaign.methods_of(source):
            chosen = campaign.chosen(source, method)
            if chosen is None:
                continue
            key = report_key(method)
            reports = final_reports(campaign, source, method, chosen)
            if not reports:
                continue
            label = f"{source}: {method}"
            grid[label] = reports
            latency = {seed: 1 / report.speedup for seed, report in reports.items() if report.speedup}
            for seed, report in reports.items():
                predecessor.setdefault(seed, report.test("predecessor"))
            rows[label] = {
                "cell": source,
                "method": method,
                "setting": chosen,
                "at_edge": campaign.at_edge(source, method, chosen),
                "test_per_seed": {seed: report.test(key) for seed, report in reports.items()},
                "test_mean": statistics.mean(report.test(key) for report in reports.values()),
                "latency_ratio_per_seed": latency,
                "latency_ratio": statistics.median(latency.values()) if latency else None,
                "params_ratio": statistics.mean(
                    report.models[key].parameters / report.models["predecessor"].parameters
                    for report in reports.values()
                ),
                "chosen_per_seed": {
                    seed: report.search["chosen"] for seed, report in reports.items() if report.search is not None
                },
            }
    best_method = campaign.best_variant(cell)  # the variant compute matching and the other tables name
    best = f"{cell}: {best_method}"
    if best_method is None or best not in rows:
        return None
    key = report_key(best_method)
    comparisons = {
        f"{best} − {label}": {
            **methods_table.compare(grid, key, best, report_key(row["method"]), label),
            "models": [best, label],
        }
        for label, row in rows.items()
        if label != best and set(grid[best]) & set(grid[label])  # paired on the seeds both finished
    }
    first = next(iter(grid[best].values()))
    complete = all(
        campaign.chosen(source, method) is not None
        and all(
            campaign.done(CampaignRun(source, method, campaign.chosen(source, method), seed))
            for seed in campaign.final_seeds
        )
        for source in [cell, *campaign.cells[cell]["against"]]
        for method in campaign.methods_of(source)
    )
    return {
        "campaign": campaign.name,
        "cell": cell,
        "recipe": campaign.cells[cell]["recipe"],
        "overrides": campaign.cells[cell].get("overrides", {}),
        "against": campaign.cells[cell]["against"],
        "grid_seeds": campaign.grid_seeds,
        "final_seeds": campaign.final_seeds,
        "complete": complete,
        "metric": first.metric,
        "budget": first.search["budget"] if first.search is not None else None,
        "predecessor_test_mean": statistics.mean(predecessor.values()),
        "best": best,
        "models": rows,
        "comparisons": comparisons,
    }


def against_table(summary: dict[str, Any]) -> str:
    """The short table of a cell compared against others: each model at its dev choice, its test metric, measured
    latency and parameters (fractions of the predecessor's), and the cell's best variant minus it."""
    rows = []
    for label, row in summary["models"].items():
        comparison = summary["comparisons"].get(f"{summary['best']} − {label}")
        difference = ""
        if comparison is not None:
            pair = comparison.get("seed_interval")
            spread = f" [{pair[0]:+.2f}, {pair[1]:+.2f}]" if pair else ""
            difference = f"{comparison['mean']:+.2f}{spread}, {methods_table.verdict(comparison)}".replace("-", "−")
        rows.append(
            [
                f"`{row['method']}` ({row['cell']})",
                setting_label(row["setting"]) + (" (grid edge)" if row["at_edge"] else ""),
                f"{row['test_mean']:.3f} ({len(row['test_per_seed'])})",
                "n/a" if row["latency_ratio"] is None else f"{row['latency_ratio']:.3f}",
                f"{row['params_ratio']:.3f}",
                difference,
            ]
        )
    return markdown_table(
        [
            "model (cell)",
            f"chosen on dev ({len(summary['grid_seeds'])} seeds)",
            f"test {summary['metric']} (seeds)",
            "measured latency / predecessor's (median)",
            "params / predecessor's",
            f"`{summary['models'][summary['best']]['method']}` ({summary['cell']}) minus it, points (t over seeds)",
        ],
        rows,
    )


def interval_text(pair: list[float] | None) -> str:
    return f"[{pair[0]:+.2f}, {pair[1]:+.2f}]" if pair else "—"


def paired_rows(comparisons: dict[str, dict[str, Any]]) -> list[list[str]]:
    """The rows of a paired-comparison table (`benchmarks.methods.INTERVAL_COLUMNS`, seeds, verdict)."""
    return [
        [
            " − ".join(f"`{model}`" for model in comparison["models"]),
            ", ".join(f"{value:+.2f}" for value in comparison["per_seed"]),
            f"{comparison['mean']:+.2f}",
            interval_text(comparison.get("seed_interval")),
            interval_text(comparison.get("test_set_interval")),
            str(len(comparison["seeds"])),
            methods_table.verdict(comparison),
        ]
        for comparison in comparisons.values()
    ]


def markdown_against(summary: dict[str, Any], command: str) -> str:
    comparison_rows = paired_rows(summary["comparisons"])
    choices = [
        f"- {label}, seed {seed}: " + ", ".join(f"{path} {name}" for path, name in chosen.items())
        for label, row in summary["models"].items()
        for seed, chosen in row["chosen_per_seed"].items()
    ]
    return "\n".join(
        [
            f"# Campaign `{summary['campaign']}`, {summary['cell']}: against {', '.join(summary['against'])}\n",
            f"Recipe `{summary['recipe']}` with {summary['overrides'] or 'no overrides'}; "
            f"{'complete' if summary['complete'] else 'not complete: the campaign goes on'}. Every model at its own "
            f"setting chosen on dev (mean over the grid seeds {summary['grid_seeds']}), its mean test "
            f"{summary['metric']} over the finished final seeds of {summary['final_seeds']}, and its exported model's "
            "measured latency (the median over seeds of each run's own interleaved measurement against its "
            "predecessor) and parameters, as fractions of the predecessor's. One predecessor per seed for every cell "
            f"(mean test {summary['metric']} {summary['predecessor_test_mean']:.3f}).\n",
            against_table(summary),
            "\nPaired per seed, in points:\n",
            markdown_table([*methods_table.INTERVAL_COLUMNS, "seeds", "verdict"], comparison_rows),
            *(["\nThe architecture the search chose, per seed (group: candidate):\n", *choices] if choices else []),
            f"\nCommand: `{command}`.\n",
        ]
    )


CELL_MARKERS = ("o", "s", "^", "D", "v", "P")
"""The markers of the cells a searched cell is compared against, in order (the searched cell's own: a star)."""


def plot_against(summary: dict[str, Any], path: Path) -> None:
    """Test metric against measured latency (fractions of the predecessor's): each model's seeds and mean, one
    colour per method and one marker per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(row["method"] for row in summary["models"].values()))
    colours = {method: plt.get_cmap("tab10")(index % 10) for index, method in enumerate(methods)}
    markers = {cell: CELL_MARKERS[index % len(CELL_MARKERS)] for index, cell in enumerate(summary["against"])}
    markers[summary["cell"]] = "*"
    figure, axis = plt.subplots(figsize=(8, 4))
    for label, row in summary["models"].items():
        seeds = [seed for seed in row["test_per_seed"] if seed in row["latency_ratio_per_seed"]]
        if not seeds:
            continue
        style = {"marker": markers[row["cell"]], "color": colours[row["method"]]}
        axis.scatter(
            [row["latency_ratio_per_seed"][seed] for seed in seeds],
            [row["test_per_seed"][seed] for seed in seeds],
            alpha=0.35,
            s=20,
            **style,
        )
        size = 200 if row["cell"] == summary["cell"] else 90
        axis.scatter([row["latency_ratio"]], [row["test_mean"]], s=size, edgecolors="black", label=label, **style)
    axis.axhline(summary["predecessor_test_mean"], color="gray", linestyle=":", label="predecessor (mean)")
    axis.set_xlabel("measured latency / the predecessor's")
    axis.set_ylabel(f"test {summary['metric']}")
    axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def setting_label(setting: str) -> str:
    """A campaign setting as the pages say it: ``lr5e-3-alpha0.2-t4.0`` is "lr 5e-3, α 0.2, T 4.0"."""
    words = {"lr": "lr", "warmup": "warm-up", "alpha": "α", "t": "T"}
    parts = re.findall(r"([a-z]+)([0-9.]+(?:e-?[0-9]+)?)", setting)
    return ", ".join(f"{words.get(name, name)} {value}" for name, value in parts) or setting


def short_table(summary: dict[str, Any]) -> str:
    """The short table of a results page, for either kind of cell summary."""
    return against_table(summary) if "against" in summary else summary_table(summary)


def correlation_text(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2f}".replace("-", "−")  # the pages' minus sign


def summary_table(summary: dict[str, Any]) -> str:
    """The short table of a results page: every method at its dev choice, its mean test metric over the final
    seeds, each Theseus variant minus KD and truncated (points, mean and 95% t interval over seeds, verdict), and the
    rank correlation of dev and test across its settings."""
    entries, comparisons = summary["methods"], summary["comparisons"]
    versus = [method for method in ("kd", "truncated") if method in entries]

    def difference(method: str, other: str) -> str:
        comparison = comparisons.get(f"{method} − {other}")
        if comparison is None:
            return ""
        pair = comparison.get("seed_interval")
        spread = f" [{pair[0]:+.2f}, {pair[1]:+.2f}]" if pair else ""
        return f"{comparison['mean']:+.2f}{spread}, {methods_table.verdict(comparison)}".replace("-", "−")

    rows = []
    for method, entry in entries.items():
        role = methods_table.dev_role(summary, method)
        edge = " (grid edge)" if entry["at_edge"] else ""
        rows.append(
            [
                f"`{method}`{role}",
                setting_label(entry["setting"]) + edge,
                f"{entry['test_mean']:.3f} ({len(entry['test_per_seed'])})",
                *[difference(method, other) for other in versus],
                correlation_text(entry["dev_test_rank_correlation"]),
            ]
        )
    return markdown_table(
        [
            "method",
            f"chosen on dev ({len(summary['grid_seeds'])} seeds)",
            f"test {summary['metric']} (seeds)",
            *[f"minus `{other}`, points (t over seeds)" for other in versus],
            "dev-test rank correlation",
        ],
        rows,
    )


def markdown(summary: dict[str, Any], command: str) -> str:
    metric, name = summary["metric"], f"{summary['campaign']}, {summary['cell']}"
    grid_rows = [
        [
            f"`{method}`",
            ", ".join(
                f"{setting_label(setting)}: {dev:.4f} / {entry['test_by_setting'][setting]:.4f}"
                for setting, dev in entry["dev_by_setting"].items()
            ),
            setting_label(entry["setting"]) + (" (grid edge)" if entry["at_edge"] else ""),
            correlation_text(entry["dev_test_rank_correlation"]),
            ", ".join(f"{value:.4f}" for value in entry["test_per_seed"].values()),
            f"{entry['median_seconds']:.0f} s",
        ]
        for method, entry in summary["methods"].items()
    ]
    comparison_rows = paired_rows(summary["comparisons"])
    headline = summary["headline"]
    return "\n".join(
        [
            f"# Campaign `{name}`: every method at its own best setting\n",
            f"Recipe `{summary['recipe']}` with {summary['overrides'] or 'no overrides'}; "
            f"{'complete' if summary['complete'] else 'not complete: the campaign goes on'}. "
            f"Each method's settings with their mean dev / test {metric} over the grid seeds {summary['grid_seeds']} "
            "(chosen on dev alone; test beside it for the reader), the rank correlation of dev and test across the "
            f"settings, and the test {metric} at the chosen setting on each finished final seed of "
            f"{summary['final_seeds']}; the median wall-clock of the method's stages (one-thread runs on a shared "
            "machine). Pooled over every method's settings, the dev-test rank correlation is "
            f"{correlation_text(summary['dev_test_rank_correlation'])}.\n",
            markdown_table(
                [
                    "method",
                    f"dev / test {metric} by setting",
                    "chosen",
                    "rank correlation",
                    f"test {metric} per seed",
                    "wall-clock",
                ],
                grid_rows,
            ),
            f"\nBest Theseus variant on dev `{summary['best_theseus']}`, best alternative `"
            f"{summary['best_alternative']}`: {headline['mean']:+.2f} points, seed-level 95% interval "
            f"{interval_text(headline.get('seed_interval'))}, over seeds and test examples "
            f"{interval_text(headline.get('test_set_interval'))}, {len(headline['seeds'])} seeds: "
            f"{methods_table.verdict(headline)}.\n",
            "Paired per seed, in points (each side at its own chosen setting; the same steps for every method):\n",
            markdown_table([*methods_table.INTERVAL_COLUMNS, "seeds", "verdict"], comparison_rows),
            *methods_table.matched_section(
                summary,
                interval_text,
                f"their training cost `{summary['best_theseus']}`'s (steps alone, timed by `benchmarks.run_cost`: "
                "`run-cost.json` beside the cell's raw results)",
            ),
            f"\nCommand: `{command}`.\n",
        ]
    )


def results_name(campaign: str, cell: str) -> str:
    return f"campaign-{campaign}-{cell}"


def full_markdown(data: dict[str, Any]) -> str:
    """The ``.md`` of a written summary, from its JSON alone."""
    name = results_name(data["campaign"], data["cell"])
    text = markdown_against(data, data["command"]) if "against" in data else markdown(data, data["command"])
    return text + f"\n![{name}]({name}.png)\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="a campaign in benchmarks/campaigns/ (its file name without .json)")
    parser.add_argument("--archive", type=Path, default=ARCHIVE)
    parser.add_argument("--campaigns", type=Path, default=CAMPAIGNS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    try:
        campaign = Campaign.load(args.campaigns / f"{args.name}.json", archive=args.archive)
    except ValueError as error:
        print(f"campaign_results: error: {error}", file=sys.stderr)
        return 2
    command = f"python -m benchmarks.campaign_results {args.name}"
    written = 0
    code = environment()  # before any write: a table written first would make the later ones' commit "+changes"
    for cell in campaign.cells:
        against = "against" in campaign.cells[cell]
        summary = summarize_against(campaign, cell) if against else summarize_cell(campaign, cell)
        if summary is None:
            print(f"{cell}: no Theseus variant and alternative have chosen a setting yet", file=sys.stderr)
            continue
        data = {"command": command, "environment": code, **summary}
        name = results_name(campaign.name, cell)
        write_report(data, args.out, name, full_markdown(data))
        (plot_against if against else methods_table.plot)(summary, args.out / f"{name}.png")
        print(full_markdown(data))
        written += 1
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
