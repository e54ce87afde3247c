"""Seed-level intervals beside the test-set ones, for archived recipe tables.

    python -m benchmarks.seed_intervals [benchmarks/results/recipe-NAME.json ...] [--out benchmarks/results]

A `benchmarks.recipes` table gives Theseus minus every other model per seed and a 95% paired bootstrap interval
over *test examples* (the same resample for every seed): it covers test-set noise only. Seeds differ by more than
that (initialisation, data order, routes), so for every comparison with three or more seeds this adds the 95%
Student-t interval of the mean over *seeds* (n − 1 degrees of freedom). A comparison with fewer seeds gets no
seed-level interval and no verdict ("one seed", "two seeds"). Writes ``<out>/seed-intervals.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from theseus_zoo.training import stats

from .harness import command_line, environment, markdown_table, write_report

RESULTS = Path(__file__).parent / "results"
MINIMUM_SEEDS = stats.SEED_VERDICT_MINIMUM


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """`stats.t_interval` of the mean of ``values``, or ``None`` for fewer than `MINIMUM_SEEDS`."""
    return stats.t_interval(values, level) if len(values) >= MINIMUM_SEEDS else None


def rows_of(path: Path) -> list[dict[str, Any]]:
    """Every Theseus comparison of one archived `benchmarks.recipes` table, with both intervals (points)."""
    results = json.loads(path.read_text())
    rows = []
    for other, comparison in results["summary"].get("comparisons", {}).items():  # old tables: none
        per_seed = [100 * value for value in comparison["per_seed"].values()]
        interval = t_interval(per_seed)
        rows.append(
            {
                "table": path.stem.removeprefix("recipe-"),
                "comparison": f"theseus − {other}",
                "seeds": len(per_seed),
                "per_seed": per_seed,
                "mean": statistics.mean(per_seed),
                "test_set_interval": [100 * comparison["low"], 100 * comparison["high"]],
                "seed_interval": list(interval) if interval is not None else None,
                "verdict": stats.seed_verdict(interval, len(per_seed)),
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    """The table of `rows_of` rows (``seed-intervals.md``): a function of the JSON alone, so that it regenerates."""

    def interval(pair: list[float] | None) -> str:
        return f"[{pair[0]:+.2f}, {pair[1]:+.2f}]" if pair is not None else "—"

    return "\n".join(
        [
            "# Seed-level intervals of the archived recipe tables\n",
            "Points of the test metric, Theseus minus the other model: the mean over seeds, the 95% paired bootstrap "
            "interval over test examples (test-set noise only) and the 95% t interval over seeds (seed-to-seed "
            "variation); the verdict follows the seed-level interval, and rows with fewer than three seeds get "
            "none.\n",
            markdown_table(
                ["table", "comparison", "seeds", "mean", "test-set interval", "seed interval", "verdict"],
                [
                    [
                        row["table"],
                        row["comparison"],
                        str(row["seeds"]),
                        f"{row['mean']:+.2f}",
                        interval(row["test_set_interval"]),
                        interval(row["seed_interval"]),
                        row["verdict"],
                    ]
                    for row in rows
                ],
            ),
            f"\nCommand: `{command}`.\n",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="*", type=Path, help="recipe-*.json (default: every one in results/)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    tables = args.tables or sorted(RESULTS.glob("recipe-*.json"))
    rows = [row for table in tables for row in rows_of(table)]
    command = command_line("benchmarks.seed_intervals", argv)

    markdown_text = markdown(rows, command)
    write_report(
        {"command": command, "environment": environment(), "rows": rows}, args.out, "seed-intervals", markdown_text
    )
    print(markdown_text)


if __name__ == "__main__":
    main()
