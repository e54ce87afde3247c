"""benchmarks.search_table: the searched model against the uniform alternatives, from the runs' reports."""

import json

import pytest

from benchmarks import search_table


def write(path, tests, speedup, search=None):
    path.mkdir(parents=True)
    models = {name: {"test": {"accuracy": value}, "parameters": params} for name, (value, params) in tests.items()}
    report = {
        "recipe": {"name": "toy", "methods": list(tests)[1:] and ["theseus+warmup+kd", "truncated"]},
        "metric": "accuracy",
        "models": models,
        "speedup": speedup,
        "phases": {},
    }
    if search is not None:
        report["search"] = search
    (path / "report.json").write_text(json.dumps(report))


def test_the_table_pairs_seeds_and_gives_a_verdict_from_three(tmp_path):
    search = {"budget": {"latency": 0.4}, "chosen": {"g0": "keep", "g1": "skip"}}
    for seed, (ours, theirs) in enumerate([(0.90, 0.88), (0.91, 0.88), (0.92, 0.88)]):
        write(tmp_path / "search" / f"seed{seed}", {"predecessor": (0.95, 100), "theseus": (ours, 40)}, 2.5, search)
        write(
            tmp_path / "uniform" / f"seed{seed}",
            {"predecessor": (0.95, 100), "theseus": (theirs, 33), "baseline:truncated": (theirs - 0.01, 33)},
            3.0,
        )
    summary = search_table.summarize(tmp_path)
    assert summary["seeds"] == [0, 1, 2] and set(summary["methods"]) == {
        "searched",
        "uniform theseus",
        "uniform baseline:truncated",
    }
    difference = summary["differences"]["uniform theseus"]
    assert difference["per_seed"] == pytest.approx([2.0, 3.0, 4.0])
    assert difference["verdict"] == "ahead"
    assert summary["methods"]["searched"]["measured_latency_ratio"] == 0.4
    assert summary["methods"]["uniform theseus"]["params_ratio"] == 0.33
    markdown = search_table.render(summary, "python -m benchmarks.search_table RUNS")
    assert "| uniform theseus | +2.00, +3.00, +4.00 | +3.00 |" in markdown and "ahead" in markdown
