"""The budget curve: does Theseus' gap to another method close as both get more steps?

    python -m benchmarks.budget --comparisons benchmarks/results/compare/compare-minilm-rt-regression-2l.json \\
        benchmarks/results/compare/compare-minilm-rt-regression-2l-budget-*.json [--other truncated] \\
        [--out benchmarks/results/compare] [--name budget-minilm-rt-regression-2l]

Reads `benchmarks.compare` results of one recipe at several budgets (each a ``--config`` variant that changes the
replacing steps, ``steps_to_one`` scaled alike; nothing else may differ) and puts Theseus and ``--other`` side by
side per budget, on the seeds every comparison has (so each point is paired on the same seeds and test examples):
the test metric of each (mean over those seeds) and Theseus minus the other with its 95% paired bootstrap interval.
Every run must come from one fine-tuned predecessor. Writes ``<out>/<name>.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from theseus_zoo.recipes import with_defaults
from theseus_zoo.training.analyze import budget_row, budget_table, plot_budget
from theseus_zoo.training.results import Report

from .compare import check_one_predecessor, model_of
from .harness import command_line, write_report


def budget_rows(comparisons: list[dict[str, Any]], other: str) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per budget (ascending replacing steps), on the seeds every comparison has; and those seeds."""
    for results in comparisons:
        missing = {"theseus", other} - set(results["reports"])
        if missing:
            raise ValueError(f"{results['command']!r} has no {', '.join(sorted(missing))} runs")
    for method in ("theseus", other):
        shapes = {
            json.dumps(budget_free(next(iter(results["reports"][method].values()))["recipe"]), sort_keys=True)
            for results in comparisons
        }
        if len(shapes) > 1:
            raise ValueError(f"the {method} runs differ in more than their budget and learning rate: not one recipe")
    seeds = sorted(set.intersection(*(set(results["reports"]["theseus"]) for results in comparisons)), key=int)
    seeds = [seed for seed in seeds if all(seed in results["reports"][other] for results in comparisons)]
    if not seeds:
        raise ValueError("the comparisons share no seed with both methods: nothing to pair")
    check_one_predecessor(
        {
            f"{method} seed {seed} ({results['command']})": results["reports"][method][seed]
            for results in comparisons
            for method in ("theseus", other)
            for seed in seeds
        }
    )
    rows = []
    for results in comparisons:
        sides = {
            seed: tuple(
                (Report.from_dict(results["reports"][method][seed]), model_of(method)) for method in ("theseus", other)
            )
            for seed in seeds
        }
        lr = {method: results["chosen_lr"][method] for method in ("theseus", other)}
        rows.append(budget_row(sides, other, lr=lr))
    steps = [row["steps"] for row in rows]
    if len(set(steps)) != len(steps):
        raise ValueError(f"two comparisons have the same budget ({steps}): give one comparison per budget")
    return sorted(rows, key=lambda row: row["steps"]), seeds


def budget_free(recipe: dict[str, Any]) -> dict[str, Any]:
    """A recipe without what may differ between budgets: the replacing steps, evaluation interval and learning rate,
    ``steps_to_one`` and the seed."""
    recipe = with_defaults(recipe)  # a report may predate fields of today's recipes
    replacing = {k: v for k, v in recipe["replacing"].items() if k not in ("steps", "eval_every", "lr")}
    return {**{k: v for k, v in recipe.items() if k not in ("steps_to_one", "seed")}, "replacing": replacing}


def plot(rows: list[dict[str, Any]], other: str, path: Path) -> None:
    """The study's plot (`theseus_zoo.training.analyze.plot_budget`) in ``path``."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    figure = plot_budget(rows, other)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comparisons", type=Path, nargs="+", required=True, help="benchmarks.compare JSON files")
    parser.add_argument("--other", default="truncated", help="the method Theseus is set against")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "compare")
    parser.add_argument("--name", help="file name of the outputs (default: budget-<recipe>)")
    args = parser.parse_args(argv)
    if missing := [str(path) for path in args.comparisons if not path.is_file()]:
        parser.error(f"no such comparison: {', '.join(missing)}")
    comparisons = [json.loads(path.read_text()) for path in args.comparisons]
    try:
        rows, seeds = budget_rows(comparisons, args.other)
    except ValueError as error:
        raise SystemExit(f"budget: {error}") from None
    first = next(iter(comparisons[0]["reports"]["theseus"].values()))
    recipe = first["recipe"]["name"]
    name = args.name or f"budget-{recipe}"
    metric = rows[0]["metric"]
    command = command_line("benchmarks.budget", argv)
    markdown = "\n".join(
        [
            f"# Budget curve of `{recipe}`: Theseus against {args.other}\n",
            f"Test {metric}, mean over seeds {', '.join(seeds)} (the seeds every budget has), one fine-tuned "
            "predecessor for all; the difference is paired on the same seeds and test examples.\n",
            "\n".join(budget_table(rows, args.other)) + "\n",
            f"\n![budget curve]({name}.png)\n",
            f"\nCommand: `{command}`.\n",
        ]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    plot(rows, args.other, args.out / f"{name}.png")
    write_report({"command": command, "seeds": seeds, "other": args.other, "rows": rows}, args.out, name, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
