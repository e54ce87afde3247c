"""What a finished run writes about its models: test metrics with bootstrap errors, paired comparisons, sizes on
disk, the measured speedup, ``report.json``, the markdown report and the curves plot.

`theseus_zoo.training.run` calls `write_report` once every method is trained; the statistics themselves are
`theseus_zoo.training.stats`'s, shared with ``benchmarks/``.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..methods import report_keys, uses_search
from ..tasks import Task
from ..tasks.protocols import refinement, scores_examples
from . import stats
from .figures import new_figure, save
from .methods import to_device
from .results import REPORT, ModelResult, Report
from .search import measure_frontier, plot_search
from .timing import latency_ratio, macs_ratio

if TYPE_CHECKING:
    from ..recipes import Recipe
    from .session import Session


def test_metrics(task: Task, model: nn.Module) -> dict[str, Any]:
    """``{"test": metrics}``, with ``test_standard_error`` and ``test_predictions`` for tasks that score per-example
    predictions (`Task.predictions` and `Task.score`)."""
    if not scores_examples(task):
        return {"test": task.evaluate(model, "test")}
    predictions = task.predictions(model, "test")
    metrics = task.score(predictions, "test")
    return {
        "test": metrics,
        "test_standard_error": stats.bootstrap_standard_error(
            lambda chosen: task.score(predictions, "test", chosen)[task.metric], len(predictions)
        ),
        "test_predictions": [round(float(value), 5) for value in predictions],
    }


def paired_comparisons(task: Task, report: Report | dict[str, Any]) -> dict[str, dict[str, float]]:
    """Theseus minus each other model of ``report`` on the test metric, with a 95% paired bootstrap interval (the
    same resampled examples for both models, `stats.paired_difference`); needs every model's ``test_predictions``."""
    models = report.models if isinstance(report, Report) else report["models"]
    predictions = {
        name: torch.tensor(entry.test_predictions if isinstance(entry, ModelResult) else entry["test_predictions"])
        for name, entry in models.items()
    }

    def scorer(name: str) -> Callable[[torch.Tensor | None], float]:
        return lambda chosen: task.score(predictions[name], "test", chosen)[task.metric]

    return {
        name: stats.paired_difference(scorer("theseus"), scorer(name), len(predictions["theseus"]))
        for name in predictions
        if name != "theseus"
    }


def search_lines(search: dict[str, Any]) -> str:
    """report.md's account of a budget search: the budget, the choice per group, the predicted and measured cost."""
    ((kind, fraction),) = search["budget"].items()
    measured = search.get("measured_latency_ratio")
    trail = search.get("measured_choices")
    assembled = next((entry for entry in trail or [] if entry["chosen"] == search["chosen"]), None)
    lines = [
        f"\nThe successors of {search.get('model', 'theseus')} were "
        + ("the recipe's choice (budget.chosen), priced" if search.get("given") else "searched")
        + f" under a {kind} budget of {fraction:g} of the predecessor's "
        f"({search['steps']} steps of blockwise distillation for every candidate): predicted {kind} ratio "
        f"{search['predicted_ratio']:.3f}"
        + (
            f" (its candidates timed alone), {assembled['measured_ratio']:.3f} measured once assembled"
            if assembled is not None
            else ""
        )
        + f", parameters ratio {search['params_ratio']:.3f}"
        + (f", multiply-adds ratio {search['macs_ratio']:.3f}" if search.get("macs_ratio") is not None else "")
        + (f", measured latency ratio of the exported model {measured:.3f}." if measured is not None else ".")
        + (
            f" Measured again as exported, the model is over the budget by {measured - fraction:.3f}: latency read "
            "on a shared machine moves by a few percent between measurements of one architecture."
            if kind == "latency" and measured is not None and measured > fraction and search.get("within_budget", True)
            else ""
        )
        + (
            f" **Over the budget**: the recipe's choice is predicted at {search['predicted_ratio']:.3f} of the "
            f"predecessor's {kind}, the budget is {fraction:g}."
            if search.get("given") and search.get("within_budget") is False
            else ""
        ),
        "",
        "| group | chosen | score | latency (ms) | parameters | multiply-adds |",
        "|---|---|---|---|---|---|",
    ]
    for path, name in search["chosen"].items():
        entry = search["candidates"][path][name]
        macs = f"{entry['macs']:,}" if entry.get("macs") is not None else ""
        lines.append(
            f"| {path} | {name} | {entry['score']:.4f} | {entry['latency'] * 1e3:.2f} | {entry['params']:,} | {macs} |"
        )
    if trail:

        def step(entry: dict[str, Any]) -> str:
            given = entry["budget_given"]
            names = set(entry["chosen"].values())
            where = (
                f"budget {given:.3f}"
                if given is not None
                else f"uniform {names.pop()}"
                if len(names) == 1
                else "an alternative"
            )
            return f"{where}: predicted {entry['predicted_ratio']:.3f}, measured {entry['measured_ratio']:.3f}" + (
                f", assembled score {entry['assessed']:.4f}" if "assessed" in entry else ""
            )

        by = "assembled score" if any("assessed" in entry for entry in trail) else "summed score"
        outcome = (
            f"the choice above is the best one by {by} of those measured within the budget"
            if search.get("within_budget", True)
            else "**none measured within the budget**: the choice above is the one measured cheapest"
        )
        lines.append(
            "\nEach choice was assembled and measured, and the solver's budget corrected by what it measured"
            + ("; alternatives were measured beside" if any(e["budget_given"] is None for e in trail) else "")
            + f" ({'; '.join(map(step, trail))}); {outcome}."
        )
    lines.append(
        "\n`search.png`: the solver's choice at other budgets and the uniform choices, each assembled: score against "
        "measured cost (a latency search shows the predictions beside), the budget as a dashed line.\n\n"
        "![the solver's choices at several budgets](search.png)"
    )
    return "\n".join(lines)


def markdown_report(report: Report | dict[str, Any]) -> str:
    """``report.md``: the models' table, standard errors, a verdict per comparison, size and speed of the export."""
    report = report if isinstance(report, Report) else Report.from_dict(report)
    metric, models = report.metric, report.models
    lines = [
        f"# Compression report: {report.recipe['name']}\n",
        f"{report.recipe['description']}\n",
        f"| model | test {metric} | retention | parameters | size on disk (MB) |",
        "|---|---|---|---|---|",
    ]
    full_names = report.method_names()
    for name, entry in models.items():
        retention = f"{entry.retention_percent:.1f}%" if entry.retention_percent is not None else "n/a"
        size = f"{entry.size_on_disk_bytes / 1e6:.2f}" if entry.size_on_disk_bytes is not None else "n/a"
        full = full_names.get(name, name)  # the variant a run's "theseus" is, by its full name
        label = name if full in (name, name.removeprefix("baseline:")) else f"{name} ({full})"
        lines.append(f"| {label} | {entry.test[metric]:.4f} | {retention} | {entry.parameters:,} | {size} |")
    if report.refinement:
        lines.append(
            f"\nEvery compressed model was refined after its phase ({report.refinement}), then trained on the "
            f"predecessor's logits in a refine phase of its own."
        )
    if any(entry.test_standard_error is not None for entry in models.values()):
        errors = ", ".join(f"{name} ±{entry.test_standard_error:.4f}" for name, entry in models.items())
        lines.append(f"\nStandard errors of the test {metric} (bootstrap over test examples): {errors}.")
    for name, comparison in (report.comparisons or {}).items():
        difference, low, high = comparison["difference"], comparison["low"], comparison["high"]
        if low > 0:
            verdict = "ahead of"
        elif high < 0:
            verdict = "behind"
        else:
            verdict = "not distinguishable from"
        lines.append(
            f"- Theseus is {verdict} {name}: {difference:+.4f} (95% paired bootstrap interval [{low:+.4f}, "
            f"{high:+.4f}])."
        )
    if report.search is not None:
        lines.append(search_lines(report.search))
    if "theseus" in models:
        size = models["theseus"].size_on_disk_bytes
        predecessor_size = models["predecessor"].size_on_disk_bytes
        relative = f", {size / predecessor_size:.2f} of the predecessor's export" if predecessor_size else ""
        lines.append(
            f"\nThe exported successor takes {size / 1e6:.2f} MB on disk{relative}, and runs {report.speedup:.2f}× "
            "as fast as the predecessor (measured, eager, median of per-turn ratios)."
        )
    else:
        methods = report.recipe.get("methods")
        lines.append(
            f"\nNo Theseus run ({'no Theseus variant among the methods' if methods else '`theseus: false`'}), so no "
            f"model was exported; the baselines' model runs {report.speedup:.2f}× as fast as the "
            f"predecessor (measured, eager, median of per-turn ratios)."
        )
    return "\n".join(lines) + "\n"


def plot_curves(metrics_path: Path, png: Path, metric: str) -> None:
    """The replacing rate and the dev metric over steps, per phase."""
    records = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    figure, (rate_axis, metric_axis) = new_figure(2, 1, figsize=(7, 5), sharex=True)
    for phase in dict.fromkeys(r["phase"] for r in records):
        rows = [r for r in records if r["phase"] == phase]
        if "rate" in rows[0]:
            rate_axis.plot([r["step"] for r in rows], [r["rate"] for r in rows], label=phase)
        evaluated = [r for r in rows if "dev" in r]
        metric_axis.plot([r["step"] for r in evaluated], [r["dev"][metric] for r in evaluated], "o-", label=phase)
    rate_axis.set_ylabel("replacing rate p")
    rate_axis.set_ylim(-0.05, 1.05)
    metric_axis.set_ylabel(f"dev {metric}")
    metric_axis.set_xlabel("optimizer step (within its phase)")
    for axis in (rate_axis, metric_axis):
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:  # no rate to plot when only baselines trained
            axis.legend(fontsize=8)
    figure.tight_layout()
    save(figure, png)


def searched_key(recipe: Recipe) -> str | None:
    """The report key of the model trained on the budget search's choice that the report's ``search`` measures:
    Theseus' (the exported model) when the run trains it, else the first method that `uses_search`; ``None``
    without one."""
    names = recipe.method_names()
    keys = [key for (key, _), name in zip(report_keys(names), names, strict=True) if uses_search(name)]
    return "theseus" if "theseus" in keys else next(iter(keys), None)


def write_report(session: Session, models: dict[str, nn.Module], compact: nn.Module) -> dict[str, Any]:
    """Measures every model of ``models`` (``"predecessor"`` first, then ``"theseus"`` and ``"baseline:<name>"``)
    and writes ``report.json``, ``report.md`` and ``curves.png`` into the run directory: test metrics (with a
    bootstrap standard error and the per-example predictions when the task gives them: what paired comparisons
    across models and seeds need), parameters and size on disk (each model exported as `Task.export` writes it; the
    others' exports are deleted once measured; Theseus' stays in ``<out>/model``), and the measured speedup of
    ``compact`` (the Theseus successor, else the first baseline's model). Rank 0's work; returns the report."""
    task, recipe, out = session.task, session.recipe, session.out
    results = {}
    for name, model in models.items():
        model.eval()
        parameters = sum(p.numel() for p in model.parameters())
        results[name] = ModelResult.from_dict({**test_metrics(task, model), "parameters": parameters})
    for name, model in models.items():
        results[name].size_on_disk_bytes = _size_on_disk(task, out, name, model)
    reference = results["predecessor"].test[task.metric]
    for entry in results.values():
        entry.retention_percent = 100.0 * entry.test[task.metric] / reference if reference else None
    report = Report(recipe=recipe.to_dict(), metric=task.metric, models=results)
    if recipe.refine is not None:
        report.refinement = refinement(task)
    if scores_examples(task):
        report.test_labels = [round(float(value), 5) for value in task.labels("test")]
        if "theseus" in models:
            report.comparisons = paired_comparisons(task, report)
    report.speedup = _speedup(task, models["predecessor"], compact, session.accelerator.device)
    report.phases = {name: record.summary() for name, record in session.state.done.items()}
    searched = searched_key(recipe)
    if session.state.search is not None and searched in models:  # what the searched model costs, measured
        parameters = report.models[searched].parameters / report.models["predecessor"].parameters
        measured = 1 / report.speedup if compact is models[searched] and report.speedup else None
        report.search = {
            **session.state.search,
            "model": searched,
            "params_ratio": parameters,
            "macs_ratio": macs_ratio(
                task.forward,
                models["predecessor"],
                models[searched],
                to_device(task.latency_batch(), session.accelerator.device),
            ),
            "measured_latency_ratio": measured,
        }
        try:  # a finished run's report is not lost for a plot's measurements
            report.search = measure_frontier(
                report.search, task, recipe, models["predecessor"], session.accelerator.device
            )
        except (ValueError, TypeError, RuntimeError) as error:
            report.search["frontier_not_measured"] = f"{type(error).__name__}: {error}"
    (out / "report.md").write_text(markdown_report(report))
    plot_curves(out / "metrics.jsonl", out / "curves.png", task.metric)
    if report.search is not None:
        plot_search(report.search, out / "search.png")
    report.save(out / REPORT)  # last: a run with a report.json is finished (`runners.ensure_run` reads it as such)
    return report.to_dict()


def _size_on_disk(task: Task, out: Path, name: str, model: nn.Module) -> int:
    """Bytes of ``model``'s export: Theseus' stays in ``<out>/model``, the others' go once measured."""
    if name == "theseus":
        return sum(f.stat().st_size for f in task.export(model, out / "model"))
    with tempfile.TemporaryDirectory(dir=out, prefix=".export-") as scratch:
        return sum(f.stat().st_size for f in task.export(model, Path(scratch) / "model"))


def _speedup(task: Task, predecessor: nn.Module, compact: nn.Module, device: torch.device) -> float:
    """Median per-turn latency ratio, predecessor over successor, eager, on `Task.latency_batch`."""
    return 1 / latency_ratio(task.forward, predecessor, compact, to_device(task.latency_batch(), device), device)
