"""`theseus analyze`: the paper's analyses on any recipe, each a table and a plot.

    theseus analyze --recipe NAME --analysis sensitivity [--out DIR] [--config FILE] [--seed N] [--resume]
                    [--predecessor-from RUN]
    theseus analyze --recipe NAME --analysis schedules   [--constant-rate 0.5] ...
    theseus analyze --recipe NAME --analysis budget      [--budgets 0.5 1 2] ...

- ``sensitivity`` (BERT-of-Theseus Table 5): after one compression run, each trained successor replaces its own
  group alone in the fine-tuned predecessor (every other group runs its predecessor); the table gives the dev and
  test metric of each such model and its drop from the predecessor.
- ``schedules`` (Table 6): the replacing phase with the curriculum, a constant rate (``--constant-rate``, the
  paper's 0.5–0.7) and the anti-curriculum, each until ``steps_to_one``, then p = 1.
- ``budget``: Theseus and the ``truncated`` baseline at multiples of the recipe's replacing steps (``steps_to_one``
  scaled alike): does the gap close with budget?

Every run is an ordinary `theseus compress` run in ``<out>/<name>``, sharing the first run's fine-tuned
predecessor (or, with ``--predecessor-from RUN``, that finished run's); an interrupted analysis continues with
``--resume`` (finished runs are kept). Writes ``<out>/<analysis>.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import statistics
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import theseus_core as th
from theseus_core.checks import is_finite_number

from ..recipes import Recipe
from . import stats
from .figures import new_figure, save
from .results import Report
from .run_directory import CHECKPOINT
from .runners import ensure_run
from .state import read_state

ANALYSES = ("sensitivity", "schedules", "budget")


@contextlib.contextmanager
def only_successor(theseus: th.Theseus, index: int) -> Iterator[None]:
    """In eval mode, site ``index`` runs its successor and every other site its predecessor group."""
    site = theseus.sites[index]
    route = theseus.eval_route
    theseus.eval_route = "predecessor"
    try:
        with site.running(site.successor):
            yield
    finally:
        theseus.eval_route = route


def sensitivity(
    recipe: Recipe, out: Path, *, progress: bool = True, predecessor_from: Path | None = None
) -> dict[str, Any]:
    """Table 5 (module doc). Returns the summary written to ``sensitivity.json``."""
    from ..tasks import build_task

    run_dir = out / "run"
    ensure_run(
        recipe.with_overrides(recipe.theseus_and()), run_dir, progress=progress, predecessor_from=predecessor_from
    )
    state = read_state(run_dir / CHECKPOINT)
    task = build_task(recipe.family, recipe.options, recipe.seed)
    predecessor = task.build_predecessor()
    if "predecessor" in state.done:
        predecessor.load_state_dict(state.done["predecessor"].weights)
    predecessor.eval()
    model = copy.deepcopy(predecessor)
    theseus = th.replace_(model, task.plan(model), seed=recipe.seed)
    model.load_state_dict(state.done["replacing"].weights)
    model.eval()
    reference = {split: task.evaluate(predecessor, split)[task.metric] for split in ("dev", "test")}
    rows = []
    for index, site in enumerate(theseus.sites):
        with only_successor(theseus, index):
            scores = {split: task.evaluate(model, split)[task.metric] for split in ("dev", "test")}
        rows.append(
            {
                "group": index,
                "path": site.path,
                **scores,
                "dev_drop": reference["dev"] - scores["dev"],
                "test_drop": reference["test"] - scores["test"],
            }
        )
    summary = {"analysis": "sensitivity", "metric": task.metric, "predecessor": reference, "rows": rows}
    lines = [
        f"# Module sensitivity of `{recipe.name}` (BERT-of-Theseus Table 5)\n",
        "Each trained successor alone in the fine-tuned predecessor; the drop is the predecessor's metric minus "
        "that model's.\n",
        f"| group | path | dev {task.metric} | dev drop | test {task.metric} | test drop |",
        "|---|---|---|---|---|---|",
        f"| none (predecessor) | | {reference['dev']:.4f} | | {reference['test']:.4f} | |",
        *(
            f"| {r['group']} | `{r['path']}` | {r['dev']:.4f} | {r['dev_drop']:+.4f} | {r['test']:.4f} | "
            f"{r['test_drop']:+.4f} |"
            for r in rows
        ),
    ]
    _write(out, summary, lines, _bar_plot(rows, task.metric))
    return summary


def schedules(
    recipe: Recipe,
    out: Path,
    *,
    constant_rate: float = 0.5,
    progress: bool = True,
    predecessor_from: Path | None = None,
) -> dict[str, Any]:
    """Table 6 (module doc). Returns the summary written to ``schedules.json``."""
    variants = {
        "curriculum": {"schedule": "curriculum"},
        "constant": {"schedule": "constant", "schedule_base": constant_rate},
        "anti_curriculum": {"schedule": "anti_curriculum"},
    }
    # every variant's recipe checked before the first trains (a constant rate outside [0, 1], say)
    recipes = {
        name: recipe.with_overrides({**overrides, **recipe.theseus_and()}) for name, overrides in variants.items()
    }
    rows, source = [], predecessor_from
    for name, overrides in variants.items():
        report = ensure_run(recipes[name], out / name, progress=progress, predecessor_from=source)
        source = source or out / name
        rows.append(
            {
                "schedule": name,
                **overrides,
                "dev": report.phases["replacing"]["best_metric"],
                "test": report.test("theseus"),
            }
        )
    metric = report.metric
    summary = {"analysis": "schedules", "metric": metric, "rows": rows}
    lines = [
        f"# Replacing schedules on `{recipe.name}` (BERT-of-Theseus Table 6)\n",
        f"Each schedule until step {recipe.steps_to_one}, then p = 1; b = {recipe.schedule_base} for the curriculum "
        f"and the anti-curriculum, p = {constant_rate} for the constant rate. Best dev {metric} of the replacing "
        "phase, and the test metric of that state.\n",
        f"| schedule | dev {metric} | test {metric} |",
        "|---|---|---|",
        *(f"| {r['schedule']} | {r['dev']:.4f} | {r['test']:.4f} |" for r in rows),
    ]
    _write(out, summary, lines, _schedule_plot(out, list(variants), metric))
    return summary


def budget(
    recipe: Recipe,
    out: Path,
    *,
    budgets: Sequence[float] = (0.5, 1.0, 2.0),
    progress: bool = True,
    predecessor_from: Path | None = None,
) -> dict:
    """Theseus against truncated fine-tuning at several budgets (module doc), one run per budget, each a point of
    the budget study (`budget_row`, `budget_table`, `plot_budget`: the same as ``benchmarks.budget`` makes of
    several seeds). Returns the summary."""
    runs: dict[str, Recipe] = {}  # every budget's recipe checked before the first trains
    for factor in budgets:
        if not (is_finite_number(factor) and factor > 0):
            raise ValueError(f"--budgets are multiples of the replacing steps, each a number > 0, got {factor!r}")
        steps = max(1, round(recipe.replacing.steps * factor))
        overrides = {
            "replacing": {"steps": steps, "eval_every": min(recipe.replacing.eval_every, steps)},
            "steps_to_one": max(1, round(recipe.steps_to_one * factor)),
            **recipe.theseus_and("truncated"),
        }
        if f"budget-{steps}" in runs:
            raise ValueError(
                f"--budgets {' '.join(f'{b:g}' for b in budgets)}: two of them give {steps} replacing steps (of the "
                f"recipe's {recipe.replacing.steps}); give each budget once"
            )
        runs[f"budget-{steps}"] = recipe.with_overrides(overrides)
    rows, source = [], predecessor_from
    for name, run in runs.items():
        report = ensure_run(run, out / name, progress=progress, predecessor_from=source)
        source = source or out / name
        rows.append(budget_row({recipe.seed: ((report, "theseus"), (report, "baseline:truncated"))}, "truncated"))
    metric = rows[0]["metric"]
    summary = {"analysis": "budget", "metric": metric, "rows": rows}
    lines = [
        f"# Budget curve of `{recipe.name}`: Theseus against truncated fine-tuning\n",
        f"Replacing steps (p = 1 at the same fraction of them as the recipe's); test {metric}, seed {recipe.seed}; "
        "the difference with its 95% paired bootstrap interval over test examples.\n",
        *budget_table(rows, "truncated"),
    ]
    _write(out, summary, lines, plot_budget(rows, "truncated"))
    return summary


Side = tuple[Report, str]
"""A report and the name of one of its models (``"theseus"``, ``"baseline:truncated"``)."""


def budget_row(seeds: Mapping[Any, tuple[Side, Side]], other: str, **extra: Any) -> dict[str, Any]:
    """One point of the budget study: per seed, Theseus' side and ``other``'s (runs of one budget); the replacing
    steps and ``steps_to_one`` of Theseus' recipe, ``extra`` (a benchmark's learning rates), each side's test
    metric (mean over seeds) and Theseus minus ``other`` paired over seeds and test examples
    (`stats.paired_difference_over_seeds`, numpy's stream; ``None`` without per-example predictions)."""
    (first, _), _ = next(iter(seeds.values()))
    metric = first.metric
    pairs = {  # one report per seed holding both sides, scored on Theseus' report's test labels
        seed: dataclasses.replace(ours, models={"a": ours.models[mine], "b": theirs.models[model]})
        for seed, ((ours, mine), (theirs, model)) in seeds.items()
    }
    difference = None
    if all(report.test_labels is not None for report in pairs.values()):
        size = len(first.test_labels)
        scorers = {seed: (report.scorer("a"), report.scorer("b")) for seed, report in pairs.items()}
        difference = stats.paired_difference_over_seeds(scorers, size, resampling=stats.NUMPY)
    return {
        "steps": first.recipe["replacing"]["steps"],
        "steps_to_one": first.recipe["steps_to_one"],
        **extra,
        "theseus": statistics.mean(report.test("a") for report in pairs.values()),
        other: statistics.mean(report.test("b") for report in pairs.values()),
        "difference": difference,
        "metric": metric,
    }


def budget_table(rows: Sequence[Mapping[str, Any]], other: str) -> list[str]:
    """The study's markdown table: per budget, the replacing steps, where p reaches 1, the learning rates when the
    rows carry them (``lr``), each side's test metric and the difference with its interval."""
    rates = all("lr" in row for row in rows)
    header = ["replacing steps", "p = 1 at", *(["lr (Theseus / other)"] * rates), "Theseus", other]
    lines = ["| " + " | ".join([*header, "Theseus − other (95%)"]) + " |", "|" + "---|" * (len(header) + 1)]
    for row in rows:
        difference = row["difference"]
        cell = (
            "—"
            if difference is None
            else f"{difference['mean']:+.4f} [{difference['low']:+.4f}, {difference['high']:+.4f}]"
        )
        lr = [f"{row['lr']['theseus']:g} / {row['lr'][other]:g}"] if rates else []
        values = [str(row["steps"]), str(row["steps_to_one"]), *lr, f"{row['theseus']:.4f}", f"{row[other]:.4f}", cell]
        lines.append("| " + " | ".join(values) + " |")
    return lines


def plot_budget(rows: Sequence[Mapping[str, Any]], other: str) -> Any:
    """Left: each side's test metric against the budget. Right: Theseus minus ``other`` with its interval."""
    metric = rows[0]["metric"]
    steps = [row["steps"] for row in rows]
    figure, (left, right) = _figure(columns=2)
    for method in ("theseus", other):
        left.plot(steps, [row[method] for row in rows], marker="o", label=method)
    shown = [row for row in rows if row["difference"] is not None]
    if shown:
        means = [row["difference"]["mean"] for row in shown]
        errors = [
            [row["difference"]["mean"] - row["difference"]["low"] for row in shown],
            [row["difference"]["high"] - row["difference"]["mean"] for row in shown],
        ]
        right.errorbar([row["steps"] for row in shown], means, yerr=errors, fmt="o-", color="black", capsize=4)
    right.axhline(0, color="gray", linewidth=1)
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xticks(steps, [str(s) for s in steps])
        axis.set_xlabel("replacing steps (budget)")
    left.set_ylabel(f"test {metric}")
    left.legend(fontsize=8)
    right.set_ylabel(f"theseus − {other} (95% paired bootstrap)")
    return figure


# --------------------------------------------------------------------------- output
def _write(out: Path, summary: dict[str, Any], lines: list[str], figure: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    name = summary["analysis"]
    (out / f"{name}.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / f"{name}.md").write_text("\n".join(lines) + f"\n\n![{name}]({name}.png)\n")
    save(figure, out / f"{name}.png")


def _figure(columns: int = 1) -> tuple[Any, Any]:
    if columns > 1:  # the budget study's two panels
        return new_figure(1, columns, figsize=(11, 3.8), constrained_layout=True)
    figure, axis = new_figure(figsize=(6.5, 3.8))
    axis.grid(alpha=0.3)
    return figure, axis


def _bar_plot(rows: list[dict[str, Any]], metric: str) -> Any:
    figure, axis = _figure()
    groups = [str(r["group"]) for r in rows]
    axis.bar([g + "\ndev" for g in groups], [r["dev_drop"] for r in rows], color="tab:blue", label="dev")
    axis.bar([g + "\ntest" for g in groups], [r["test_drop"] for r in rows], color="tab:orange", label="test")
    axis.set_ylabel(f"drop in {metric} (predecessor − model)")
    axis.set_xlabel("group whose successor alone replaces it")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def _schedule_plot(out: Path, names: list[str], metric: str) -> Any:
    figure, axis = _figure()
    for name in names:
        records = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
        evaluated = [r for r in records if r["phase"] == "replacing" and "dev" in r]
        axis.plot([r["step"] for r in evaluated], [r["dev"][metric] for r in evaluated], "o-", label=name)
    axis.set_xlabel("replacing step")
    axis.set_ylabel(f"dev {metric}")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure
