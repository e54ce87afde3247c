"""`benchmarks.budget`: per budget, Theseus and another method on the seeds every comparison has, paired."""

import json

import pytest

from benchmarks import budget

LABELS = [0, 1, 1, 0, 1, 0, 0, 1]
PREDECESSOR = [0.1, 0.9, 0.8, 0.2, 0.7, 0.3, 0.4, 0.6]


def report(steps: int, model: str, predictions: list[int], predecessor: list[float] = PREDECESSOR) -> dict:
    accuracy = sum(p == label for p, label in zip(predictions, LABELS, strict=True)) / len(LABELS)
    return {
        "recipe": {"name": "toy", "replacing": {"steps": steps}, "steps_to_one": steps // 2},
        "metric": "accuracy",
        "test_labels": LABELS,
        "models": {
            "predecessor": {"test": {"accuracy": 1.0}, "test_predictions": predecessor},
            model: {"test": {"accuracy": accuracy}, "test_predictions": predictions},
        },
    }


def comparison(steps: int, theseus: dict[str, list[int]], truncated: dict[str, list[int]], **report_options) -> dict:
    return {
        "command": f"compare {steps}",
        "chosen_lr": {"theseus": 2e-4, "truncated": 1e-4},
        "reports": {
            "theseus": {seed: report(steps, "theseus", p, **report_options) for seed, p in theseus.items()},
            "truncated": {
                seed: report(steps, "baseline:truncated", p, **report_options) for seed, p in truncated.items()
            },
        },
    }


RIGHT, HALF = LABELS, [0, 1, 1, 0, 0, 1, 1, 0]  # accuracy 1 and 0.5


def test_rows_are_sorted_by_budget_and_paired_on_the_shared_seeds():
    small = comparison(500, {"0": HALF}, {"0": RIGHT})
    large = comparison(2000, {"0": RIGHT, "1": RIGHT}, {"0": HALF, "1": RIGHT})  # seed 1 only here: left out
    for report in large["reports"]["theseus"].values():  # reports written elsewhere may order their keys otherwise
        report["recipe"] = dict(reversed(report["recipe"].items()))
    rows, seeds = budget.budget_rows([large, small], "truncated")
    assert seeds == ["0"]
    assert [row["steps"] for row in rows] == [500, 2000]
    assert [(row["theseus"], row["truncated"]) for row in rows] == [(0.5, 1.0), (1.0, 0.5)]
    assert [row["difference"]["mean"] for row in rows] == [-0.5, 0.5]
    for row in rows:
        assert row["difference"]["low"] <= row["difference"]["mean"] <= row["difference"]["high"]


def test_two_comparisons_of_one_budget_or_two_predecessors_are_refused():
    one = comparison(500, {"0": HALF}, {"0": RIGHT})
    with pytest.raises(ValueError, match="same budget"):
        budget.budget_rows([one, comparison(500, {"0": RIGHT}, {"0": RIGHT})], "truncated")
    other_predecessor = comparison(1000, {"0": HALF}, {"0": RIGHT}, predecessor=[0.5] * len(LABELS))
    with pytest.raises(ValueError, match="another predecessor"):
        budget.budget_rows([one, other_predecessor], "truncated")
    other_recipe = comparison(1000, {"0": HALF}, {"0": RIGHT})
    other_recipe["reports"]["theseus"]["0"]["recipe"]["name"] = "toy-3l"
    with pytest.raises(ValueError, match="differ in more than their budget"):
        budget.budget_rows([one, other_recipe], "truncated")
    with pytest.raises(ValueError, match="share no seed"):
        budget.budget_rows([one, comparison(1000, {"1": HALF}, {"1": RIGHT})], "truncated")


def test_the_command_writes_a_table_and_a_plot(tmp_path):
    paths = []
    for steps, theseus in ((500, HALF), (1000, RIGHT)):
        paths.append(tmp_path / f"compare-{steps}.json")
        paths[-1].write_text(json.dumps(comparison(steps, {"0": theseus}, {"0": RIGHT})))
    budget.main(["--comparisons", *map(str, paths), "--out", str(tmp_path / "out")])
    markdown = (tmp_path / "out" / "budget-toy.md").read_text()
    assert "| 500 | 250 | 0.0002 / 0.0001 | 0.5000 | 1.0000 | -0.5000 [" in markdown
    assert (tmp_path / "out" / "budget-toy.png").exists()
    with pytest.raises(SystemExit):
        budget.main(["--comparisons", str(tmp_path / "missing.json")])
