"""Two causal-LM models over seeds: the ratio of their test perplexities, paired on the same test sequences.

    python -m benchmarks.llm_seeds --a RUN_OR_REPORT ... --b RUN_OR_REPORT ... [--model-a theseus]
                                   [--model-b baseline:truncated] [--name NAME] [--out benchmarks/results/llm]

``--a`` and ``--b`` name the same number of runs (a run directory or its ``report.json``), paired in order: one
seed each, both sides scored on the same test sequences by the same predecessor (checked: the predecessor's
per-sequence NLLs must agree to 1e-4, as a rerun on another thread count gives). Per seed: both perplexities and
their ratio (a over b). Over seeds: the geometric mean of the ratios (the exponential of the mean NLL difference,
every sequence having the same number of tokens), a 95% paired bootstrap interval over test sequences (one resample
for every seed and both sides) and the spread of the per-seed ratios. Writes ``<out>/seeds-<name>.{json,md}``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from theseus_zoo.training import stats
from theseus_zoo.training.results import REPORT, Report

from .harness import command_line, environment, markdown_table, write_report

PREDECESSOR_TOLERANCE = 1e-4


def report_file(path: Path) -> Path:
    """``path`` itself, or the ``report.json`` in it when it is a run directory."""
    return path / REPORT if path.is_dir() else path


def per_sequence_nll(report: Report, model: str, source: Path) -> np.ndarray:
    if report.metric != "inverse_perplexity":
        raise ValueError(f"{source} is not a causal-LM report (metric {report.metric or None!r})")
    if model not in report.models:
        raise ValueError(f"{source} has no model {model!r}; it has {', '.join(report.models)}")
    if len(set(report.test_labels)) != 1:
        raise ValueError(f"{source}: sequences of different lengths; a plain mean of NLLs would not be the metric")
    return np.asarray(report.models[model].test_predictions, dtype=np.float64)


def compare(pairs: list[tuple[Path, Path]], model_a: str, model_b: str, resamples: int = 1000) -> dict[str, Any]:
    """Per-seed perplexities and ratios, and the geometric-mean ratio over seeds with its bootstrap interval
    (`stats.log_ratio`, numpy's stream)."""
    differences, seeds = [], []
    for path_a, path_b in pairs:
        report_a, report_b = Report.load(path_a), Report.load(path_b)
        predecessor_a = per_sequence_nll(report_a, "predecessor", path_a)
        predecessor_b = per_sequence_nll(report_b, "predecessor", path_b)
        if (
            predecessor_a.shape != predecessor_b.shape
            or np.abs(predecessor_a - predecessor_b).max() > PREDECESSOR_TOLERANCE
        ):
            raise ValueError(f"{path_a} and {path_b} do not share the test sequences and predecessor: not paired")
        nll_a, nll_b = per_sequence_nll(report_a, model_a, path_a), per_sequence_nll(report_b, model_b, path_b)
        differences.append(nll_a - nll_b)
        seeds.append(
            {
                "a": str(path_a),
                "b": str(path_b),
                "seed_a": report_a.recipe.get("seed"),
                "seed_b": report_b.recipe.get("seed"),
                "perplexity_a": math.exp(nll_a.mean()),
                "perplexity_b": math.exp(nll_b.mean()),
                "ratio": math.exp(nll_a.mean() - nll_b.mean()),
            }
        )
    ratio = stats.log_ratio(np.stack(differences), resamples, resampling=stats.NUMPY)  # (seeds, sequences)
    ratios = [seed["ratio"] for seed in seeds]
    return {
        "seeds": seeds,
        "ratio": ratio["ratio"],
        "low": ratio["low"],
        "high": ratio["high"],
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "mean_nll_difference": ratio["mean_log_difference"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, nargs="+", required=True, help="runs (or report.json files), one a seed")
    parser.add_argument("--b", type=Path, nargs="+", required=True, help="as many runs, paired with --a in order")
    parser.add_argument("--model-a", default="theseus")
    parser.add_argument("--model-b", default="baseline:truncated")
    parser.add_argument("--name", default="comparison")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "llm")
    args = parser.parse_args(argv)
    if len(args.a) != len(args.b):
        parser.error(f"--a names {len(args.a)} runs and --b {len(args.b)}: pair them one seed each")
    missing = [str(path) for path in [*args.a, *args.b] if not report_file(path).exists()]
    if missing:
        parser.error(f"no report in {', '.join(missing)}")
    try:
        result = compare(list(zip(args.a, args.b, strict=True)), args.model_a, args.model_b)
    except ValueError as error:
        parser.error(str(error))
    command = command_line("benchmarks.llm_seeds", argv)
    rows = [
        [seed["seed_a"], f"{seed['perplexity_a']:.1f}", f"{seed['perplexity_b']:.1f}", f"{seed['ratio']:.3f}"]
        for seed in result["seeds"]
    ]
    markdown = "\n".join(
        [
            f"# {args.model_a} of --a against {args.model_b} of --b, {len(rows)} seed(s)\n",
            markdown_table(["seed", f"perplexity a ({args.model_a})", f"perplexity b ({args.model_b})", "a / b"], rows),
            f"\nOver seeds: a / b = **{result['ratio']:.3f}** (geometric mean; 95% paired bootstrap over test "
            f"sequences [{result['low']:.3f}, {result['high']:.3f}]; per-seed range {result['ratio_min']:.3f}–"
            f"{result['ratio_max']:.3f}; mean NLL difference {result['mean_nll_difference']:+.3f} nats/token).",
            f"\nCommand: `{command}`.\n",
        ]
    )
    write_report({"command": command, "environment": environment(), **result}, args.out, f"seeds-{args.name}", markdown)
    print(markdown)


if __name__ == "__main__":
    main()
