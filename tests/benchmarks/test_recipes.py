"""Seed tables of `benchmarks.recipes`: medians, wall-clock and paired comparisons, on made-up reports."""

import json

import numpy as np
import pytest

from benchmarks import recipes


def report(seed, theseus_right, truncated_right, metric="accuracy"):
    labels = [float(i % 3) for i in range(200)]

    def predictions(right):
        return [label if i < right else (label + 1) % 3 for i, label in enumerate(labels)]

    models = {
        "predecessor": predictions(190),
        "theseus": predictions(theseus_right),
        "baseline:truncated": predictions(truncated_right),
    }
    return {
        "metric": metric,
        "test_labels": labels,
        "speedup": 2.0,
        "phases": {"replacing": {"seconds": 60.0 + seed}, "baseline:truncated": {"seconds": 30.0}},
        "models": {
            name: {
                "test": {metric: right / 200},
                "test_predictions": values,
                "retention_percent": 100.0,
                "parameters": 10,
            }
            for (name, values), right in zip(models.items(), (190, theseus_right, truncated_right), strict=True)
        },
    }


def test_paired_differences_per_seed_their_mean_and_a_bootstrap_interval():
    reports = {0: report(0, 180, 170), 1: report(1, 176, 170), 2: report(2, 170, 174)}
    summary = recipes.summarize(reports)
    comparison = summary["comparisons"]["baseline:truncated"]
    assert comparison["per_seed"] == pytest.approx({0: 0.05, 1: 0.03, 2: -0.02})
    assert comparison["mean"] == pytest.approx(0.02)
    assert comparison["low"] < comparison["mean"] < comparison["high"] < 0.1
    assert summary["models"]["theseus"]["median_seconds"] == 61.0
    assert summary["models"]["baseline:truncated"]["median_seconds"] == 30.0


def test_regression_reports_are_scored_as_sts_b():
    first = report(0, 180, 170, metric="score")
    first["models"]["theseus"]["test_predictions"] = list(np.asarray(first["test_labels"]) * 2 + 1)  # a perfect rank
    comparison = recipes.paired_comparison({0: first}, "theseus", "baseline:truncated")
    perfect = recipes.score(first, np.asarray(first["models"]["theseus"]["test_predictions"]), np.arange(200))
    assert perfect == pytest.approx(1.0) and comparison["mean"] > 0


def test_no_comparison_without_per_example_predictions():
    reports = {0: report(0, 180, 170)}
    del reports[0]["test_labels"]
    assert recipes.summarize(reports)["comparisons"] == {}


def test_sizes_on_disk_and_the_refine_phase_count_for_each_model():
    reports = {seed: report(seed, 180, 170) for seed in (0, 1)}
    for seed, entry in reports.items():
        entry["phases"].update({"refine:theseus": {"seconds": 10.0}, "refine:baseline:truncated": {"seconds": 5.0}})
        for name, model in entry["models"].items():
            model["size_on_disk_bytes"] = {"predecessor": 9_000_000}.get(name, 1_000_000 + seed)
    summary = recipes.summarize(reports)
    assert summary["models"]["theseus"]["median_seconds"] == 70.5  # replacing (60, 61) + refine (10)
    assert summary["models"]["baseline:truncated"]["median_seconds"] == 35.0
    assert summary["models"]["predecessor"]["median_size_on_disk_bytes"] == 9_000_000
    assert summary["models"]["theseus"]["median_size_on_disk_bytes"] == 1_000_000.5


@pytest.mark.slow
def test_check_reruns_an_archived_seed_and_says_whether_it_matches(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    tiny = {"predecessor": {"steps": 10, "eval_every": 10}, "replacing": {"steps": 10, "eval_every": 10}}
    config.write_text(json.dumps({**tiny, "steps_to_one": 5, "baselines": ["truncated"]}))
    common = ["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "results"), "--threads", "1"]
    recipes.main(["--recipe", "toy", "--seeds", "3", "--config", str(config), *common])
    with pytest.raises(SystemExit) as exit_info:
        recipes.main(["--check", "toy", *common])
    assert exit_info.value.code == 0 and "reproduces within" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        recipes.main(["--check", "toy", *common])
    assert "exists; remove it" in str(exit_info.value)  # a check never overwrites an earlier one
    archived = json.loads((tmp_path / "results" / "recipe-toy.json").read_text())["reports"]["3"]
    rerun = json.loads((tmp_path / "runs" / "check" / "toy" / "seed3" / "report.json").read_text())
    assert recipes.compare_tests(archived, rerun)[1] == 0.0
    archived["models"]["theseus"]["test"]["accuracy"] += 0.05  # as if the code had changed since
    rows, worst = recipes.compare_tests(archived, rerun)
    assert worst == pytest.approx(0.05) and [row[0] for row in rows if row[3] == "-0.0500"] == ["theseus"]
