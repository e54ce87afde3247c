"""The budget search against the uniform alternatives at the same seeds: test metric, measured latency, verdicts.

    python -m benchmarks.search_table RUNS [--name search-gcn-polblogs] [--out benchmarks/results]

``RUNS`` holds ``search/seed<N>/`` (one `theseus compress --budget ...` run of one Theseus variant) and
``uniform/seed<N>/`` (one run of the uniform alternatives: the same variant into the recipe's uniform successors,
truncated fine-tuning, KD), as ``benchmarks/configs/gcn-polblogs-search.sh`` leaves them. Per method: the test
metric's mean over seeds, the exported model's measured latency and parameters as fractions of the predecessor's
(the latency measured in the run whose first model it is: the uniform variant's, which truncated and KD share); the
searched model minus each alternative per seed, with the t interval over seeds and its verdict
(`theseus_zoo.training.stats.verdict`: none under three seeds, ``equivalent`` only by TOST at ±0.5 points). Writes
``<name>.json`` (every number, the raw reports' paths) and ``<name>.md``; the raw reports are copied beside them
(``<name>/<kind>/seed<N>/report.json``) so that the table regenerates from committed files (`render`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from theseus_zoo.training import stats
from theseus_zoo.training.results import REPORT, Report

from .harness import environment, markdown_table

RESULTS = Path(__file__).parent / "results"


def seeds_of(runs: Path, kind: str) -> dict[int, Report]:
    """The finished reports of ``runs/<kind>/seed<N>/``, by seed."""
    found = {}
    for path in sorted((runs / kind).glob("seed*/" + REPORT)):
        found[int(path.parent.name.removeprefix("seed"))] = Report.load(path)
    return found


def summarize(runs: Path) -> dict[str, Any]:
    """Every number of the table, from the finished runs on the seeds both kinds finished."""
    searched, uniform = seeds_of(runs, "search"), seeds_of(runs, "uniform")
    seeds = sorted(set(searched) & set(uniform))
    if not seeds:
        raise SystemExit(f"{runs}: no seed has both a search/ and a uniform/ report")
    first = uniform[seeds[0]]
    scale = 100.0 if first.metric in ("accuracy", "score") else 1.0
    alternatives = [name for name in first.models if name not in ("predecessor",)]
    methods: dict[str, dict[str, Any]] = {}

    def entry(label: str, reports: dict[int, Report], model: str, latency_of: str) -> None:
        tests = [reports[seed].test(model) * scale for seed in seeds]
        latency = [1 / reports[seed].speedup for seed in seeds if reports[seed].speedup]
        params = [
            reports[seed].models[model].parameters / reports[seed].models["predecessor"].parameters for seed in seeds
        ]
        methods[label] = {
            "model": model,
            "method": reports[seeds[0]].method_names().get(model, model),
            "test_per_seed": tests,
            "test_mean": statistics.mean(tests),
            "measured_latency_ratio": statistics.median(latency) if latency else None,
            "latency_from": latency_of,
            "params_ratio": statistics.mean(params),
        }

    entry("searched", searched, "theseus", "its own run")
    for name in alternatives:
        entry(f"uniform {name}", uniform, name, "the uniform variant's run (same architecture)")
    differences = {}
    for label in [label for label in methods if label != "searched"]:
        values = [
            a - b for a, b in zip(methods["searched"]["test_per_seed"], methods[label]["test_per_seed"], strict=True)
        ]
        interval = stats.t_interval(values) if len(values) > 1 else None
        differences[label] = {
            "per_seed": values,
            "mean": statistics.mean(values),
            "t_interval": interval,
            "verdict": stats.verdict(values) if scale == 100.0 else stats.verdict(values, margin=None),
        }
    budget = searched[seeds[0]].search["budget"] if searched[seeds[0]].search else None
    chosen = {seed: searched[seed].search["chosen"] for seed in seeds if searched[seed].search}
    return {
        "metric": first.metric,
        "unit": "points" if scale == 100.0 else first.metric,
        "seeds": seeds,
        "budget": budget,
        "chosen": chosen,
        "methods": methods,
        "differences": differences,
    }


def render(summary: dict[str, Any], command: str | None = None) -> str:
    """``<name>.md`` from the summary alone (its own ``command`` unless one is given)."""
    command = summary.get("command", "") if command is None else command
    unit = summary["unit"]
    rows = [
        [
            label,
            entry["method"],
            f"{entry['test_mean']:.2f}",
            "n/a" if entry["measured_latency_ratio"] is None else f"{entry['measured_latency_ratio']:.3f}",
            f"{entry['params_ratio']:.3f}",
        ]
        for label, entry in summary["methods"].items()
    ]
    table = markdown_table(
        ["model", "method", f"test {summary['metric']} ({unit})", "latency ratio", "params ratio"], rows
    )
    lines = [
        f"Budget {summary['budget']}, seeds {summary['seeds']}. Latency and parameters are fractions of the "
        "predecessor's, measured on the exported models (eager, median of per-turn ratios).",
        "",
        table,
        "| searched minus | per seed | mean | t interval over seeds | verdict |",
        "|---|---|---|---|---|",
    ]
    for label, difference in summary["differences"].items():
        interval = difference["t_interval"]
        lines.append(
            f"| {label} | {', '.join(f'{v:+.2f}' for v in difference['per_seed'])} | {difference['mean']:+.2f} | "
            + ("n/a" if interval is None else f"[{interval[0]:+.2f}, {interval[1]:+.2f}]")
            + f" | {difference['verdict'] or 'none (under 3 seeds)'} |"
        )
    choices = sorted({json.dumps(chosen, sort_keys=True) for chosen in summary["chosen"].values()})
    lines += ["", "Choices made: " + "; ".join(choices), "", f"Command: `{command}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--name", default="search-gcn-polblogs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    summary = summarize(args.runs)
    archive = args.out / args.name
    for kind in ("search", "uniform"):
        for seed in summary["seeds"]:
            target = archive / kind / f"seed{seed}"
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(args.runs / kind / f"seed{seed}" / REPORT, target / REPORT)
    command = "python -m benchmarks.search_table " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    summary |= {"command": command, "environment": environment()}
    (args.out / f"{args.name}.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / f"{args.name}.md").write_text(render(summary, command))
    print(render(summary, command))


if __name__ == "__main__":
    main()
