"""Theseus successors of different kinds set side by side: recipes run from one predecessor, one table and one plot.

    python -m benchmarks.successors --recipes resnet-fashion-mnist-converged resnet-fashion-mnist-mobilenet-v2 \\
        resnet-fashion-mnist-shufflenet-v2 [--seeds 0 1 2] [--runs runs/bench] [--out benchmarks/results]

Reads the finished runs ``<runs>/<recipe>/seed<N>/report.json`` that `benchmarks.recipes` left (each recipe's
Theseus model, and the baselines of those that train any) and refuses to mix runs that do not share the test set
and the predecessor (the same per-image test predictions), so that every difference is paired. Per model: the
median test accuracy over seeds with its range, parameters, multiply-adds of one image (counted by
``torch.utils.flop_counter`` on the exported architecture; two FLOPs per multiply-add) and measured speed against
the predecessor (eager, interleaved turns, median ratio, batch `images.LATENCY_BATCH`); every Theseus model minus
every other model, per seed and as a mean over seeds with a 95% paired bootstrap interval over test images
(`benchmarks.recipes.paired_comparison`); a plot of accuracy against multiply-adds. Writes
``<out>/successors-<name>.{json,md,png}`` (``--name``; default: the first recipe's name).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import torch
from torch import nn

from theseus_zoo.training.results import REPORT, Report
from theseus_zoo.training.timing import interleaved_seconds, median_ratio

from .harness import command_line, environment, markdown_table, write_report
from .recipes import paired_comparison


def model_label(recipe: dict[str, Any], name: str) -> str:
    """A model's name in the merged table: the predecessor's and the baselines' of the predecessor's block type as
    they are; Theseus' and the baselines' of a heterogeneous recipe with their successor kind."""
    kind = recipe["options"].get("successor")
    if name == "predecessor" or (kind is None and name != "theseus"):
        return name
    return f"{name} ({kind or 'same block'})"


def merge_seed(reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One seed's reports of several recipes as one report: their models under `model_label` names, ``theseus``
    entries kept apart. Raises ``ValueError`` when the recipes' test labels or predecessors differ (not paired)."""
    typed = {recipe: Report.from_dict(report) for recipe, report in reports.items()}
    first_recipe, first = next(iter(typed.items()))
    merged: dict[str, Any] = {"metric": first.metric, "test_labels": first.test_labels, "models": {}}
    reference = first.models["predecessor"].test_predictions
    if merged["test_labels"] is None or reference is None:
        raise ValueError(f"the report of {first_recipe} has no per-example test predictions: nothing to pair")
    sources: dict[str, str] = {}
    for recipe, report in typed.items():
        if report.test_labels != merged["test_labels"]:
            raise ValueError(f"{recipe} was tested on other images than {first_recipe}: not paired")
        if report.models["predecessor"].test_predictions != reference:
            raise ValueError(
                f"{recipe} compressed another predecessor than {first_recipe} (its test predictions differ): run "
                f"both from one predecessor (benchmarks.recipes --predecessor-from)"
            )
        for name, entry in report.models.items():
            label = model_label(report.recipe, name)
            if label in merged["models"] and label != "predecessor":
                raise ValueError(f"{recipe} and {sources[label]} both have a model {label!r}")
            merged["models"].setdefault(label, entry.to_dict())
            sources.setdefault(label, recipe)
    return merged


def architectures(runs: dict[Path, dict[str, Any]]) -> dict[str, nn.Module]:
    """Each model's architecture in eval mode, from finished runs (run directory -> its report): Theseus' as exported
    (`images.load_exported`), the baselines' and the predecessor's rebuilt from the recipe's options (their weights
    do not matter for counting and timing)."""
    from theseus_zoo.tasks import images

    models: dict[str, nn.Module] = {}
    for run, report in runs.items():
        options = report["recipe"]["options"]
        block, layers = images.ARCHITECTURES[options.get("architecture", "resnet34")]
        for name in Report.from_dict(report).models:
            label = model_label(report["recipe"], name)
            if label in models:
                continue
            if name == "predecessor":
                models[label] = images.build_resnet(block, layers)
            elif name == "theseus" or options.get("successor"):  # a heterogeneous recipe's models are all alike
                models[label] = images.load_exported(run / "model")
            else:  # the ResNet baselines keep the predecessor's block type at the successor's depth
                models[label] = images.build_resnet(block, options.get("blocks", (2, 2, 2, 2)))
    return {label: model.eval() for label, model in models.items()}


def multiply_adds(model: nn.Module, inputs: torch.Tensor) -> int:
    """Multiply-adds of one forward pass of ``inputs`` (half the FLOPs `FlopCounterMode` counts)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(inputs)
    return counter.get_total_flops() // 2


def speedups(models: dict[str, nn.Module], batch: torch.Tensor, repeats: int = 15) -> dict[str, float]:
    """Each model's measured speed as a multiple of the predecessor's (eager, turns taken in a row). Models of the
    same architecture (the same module tree) are timed once and share the number, so that noise cannot tell them
    apart."""
    architectures: dict[str, str] = {}  # module tree -> the first label that has it
    for label, model in models.items():
        architectures.setdefault(str(model), label)
    with torch.no_grad():
        runs = {label: (lambda model=models[label]: model(batch)) for label in architectures.values()}
        times = interleaved_seconds(runs, warmup=2, repeats=repeats, device=batch.device)
    return {
        label: median_ratio(times["predecessor"], times[architectures[str(model)]]) for label, model in models.items()
    }


def plot(summary: dict[str, Any], path: Path) -> None:
    """Test accuracy (every seed, and the median) against multiply-adds per image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, entry in summary["models"].items():
        macs = entry["multiply_adds"] / 1e6
        (line,) = axes.plot([macs], [entry["median"]], marker="o", markersize=8, linestyle="", label=label)
        axes.plot([macs] * len(entry["per_seed"]), entry["per_seed"], marker=".", linestyle="", color=line.get_color())
    axes.set_xscale("log")
    axes.set_xlabel("multiply-adds per 28×28 image (millions, log scale)")
    axes.set_ylabel("test accuracy (dots: seeds; circles: medians)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", required=True, help="resnet recipes run from one predecessor")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", type=Path, default=Path("runs/bench"))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--name", help="the results' file name (default: the first recipe's)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads while timing (default: 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    runs = {(recipe, seed): args.runs / recipe / f"seed{seed}" for recipe in args.recipes for seed in args.seeds}
    missing = [str(run) for run in runs.values() if not (run / REPORT).exists()]
    if missing:
        parser.error(f"no finished run (report.json) in {', '.join(missing)}: run benchmarks.recipes first")
    reports = {key: Report.load(run).to_dict() for key, run in runs.items()}
    for recipe in args.recipes:
        family = reports[recipe, args.seeds[0]]["recipe"]["family"]
        if family != "resnet":
            parser.error(f"{recipe} is a {family} recipe; the architectures are rebuilt for resnet recipes only")
    merged = {}
    for seed in args.seeds:
        try:
            merged[seed] = merge_seed({recipe: reports[recipe, seed] for recipe in args.recipes})
        except ValueError as error:
            parser.error(f"seed {seed}: {error}")

    from theseus_zoo.tasks import images

    first_seed = [(recipe, args.seeds[0]) for recipe in args.recipes]
    models = architectures({runs[key]: reports[key] for key in first_seed})
    one_image = torch.zeros(1, 3, 28, 28)
    first = next(iter(merged.values()))
    metric = first["metric"]
    latency_batch = torch.randn(images.LATENCY_BATCH, 3, 28, 28)
    measured = speedups(models, latency_batch)
    summary: dict[str, Any] = {"metric": metric, "models": {}, "comparisons": {}}
    typed = [Report.from_dict(report) for report in merged.values()]
    for label in typed[0].models:
        values = [report.test(label) for report in typed]
        summary["models"][label] = {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "per_seed": values,
            "parameters": typed[0].models[label].parameters,
            "multiply_adds": multiply_adds(models[label], one_image),
            "speedup": measured[label],
        }
    labels = list(typed[0].models)
    for index, label in enumerate(labels):  # each Theseus model against every other model, each pair once
        if not label.startswith("theseus"):
            continue
        for other in labels:
            once = not other.startswith("theseus") or labels.index(other) > index
            comparison = (
                paired_comparison(merged, label, other) if other not in (label, "predecessor") and once else None
            )
            if comparison is not None:
                summary["comparisons"][f"{label} − {other}"] = comparison
    name = args.name or args.recipes[0]
    command = command_line("benchmarks.successors", argv)
    rows = [
        [
            label,
            f"{entry['median']:.4f}",
            f"{entry['min']:.4f}–{entry['max']:.4f}",
            f"{entry['parameters'] / 1e6:.2f}M",
            f"{entry['multiply_adds'] / 1e6:.1f}M",
            f"{entry['speedup']:.2f}×",
        ]
        for label, entry in summary["models"].items()
    ]
    comparison_rows = [
        [
            pair,
            ", ".join(f"{100 * value:+.1f}" for value in comparison["per_seed"].values()),
            f"{100 * comparison['mean']:+.1f}",
            f"[{100 * comparison['low']:+.1f}, {100 * comparison['high']:+.1f}]",
        ]
        for pair, comparison in summary["comparisons"].items()
    ]
    markdown = "\n".join(
        [
            f"# Successors side by side: {', '.join(f'`{recipe}`' for recipe in args.recipes)}\n",
            f"Seeds {args.seeds}, one predecessor; test {metric} on {len(first['test_labels']):,} images.\n",
            markdown_table(
                [
                    "model",
                    f"test {metric} (median)",
                    "range over seeds",
                    "parameters",
                    "multiply-adds / image",
                    "speed vs predecessor",
                ],
                rows,
            ),
            "\nPaired differences in points (per seed in seed order; mean over seeds with a 95% paired bootstrap "
            "interval over test images):\n",
            markdown_table(["comparison", "per seed", "mean", "95% interval"], comparison_rows),
            f"\nSpeed: eager fp32, batch {images.LATENCY_BATCH} of 28×28 images, {torch.get_num_threads()} thread(s), "
            f"interleaved turns, median ratio. Plot: `successors-{name}.png`.",
            f"\nCommand: `{command}` (on {environment()['processor']}).\n",
        ]
    )
    results = {"command": command, "environment": environment(), "summary": summary, "seeds": args.seeds}
    write_report(results, args.out, f"successors-{name}", markdown)
    plot(summary, args.out / f"successors-{name}.png")
    print(markdown)


if __name__ == "__main__":
    main()
