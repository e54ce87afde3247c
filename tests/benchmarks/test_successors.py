"""`benchmarks.successors`: merging recipes run from one predecessor, and what it counts, on made-up reports."""

import re

import pytest
import torch
from torch import nn

from benchmarks import recipes, successors


def report(successor, theseus_right, baselines=None, predecessor_right=190, size=200):
    labels = [float(i % 10) for i in range(size)]

    def entry(right):
        predictions = [label if i < right else (label + 1) % 10 for i, label in enumerate(labels)]
        return {"test": {"accuracy": right / size}, "test_predictions": predictions, "parameters": 10}

    models = {"predecessor": entry(predecessor_right), "theseus": entry(theseus_right)}
    models.update({f"baseline:{name}": entry(right) for name, right in (baselines or {}).items()})
    options = {"architecture": "resnet34", **({"successor": successor} if successor else {})}
    return {"metric": "accuracy", "test_labels": labels, "recipe": {"options": options}, "models": models}


def test_merging_names_each_theseus_by_its_successor_and_keeps_the_baselines():
    merged = successors.merge_seed(
        {
            "plain": report(None, 180, {"truncated": 170, "kd": 175}),
            "mobile": report("mobilenet_v2", 172, {"truncated": 160}),
        }
    )
    assert list(merged["models"]) == [
        "predecessor",
        "theseus (same block)",
        "baseline:truncated",
        "baseline:kd",
        "theseus (mobilenet_v2)",
        "baseline:truncated (mobilenet_v2)",
    ]
    assert merged["models"]["theseus (mobilenet_v2)"]["test"]["accuracy"] == 172 / 200
    comparison = recipes.paired_comparison({0: merged}, "theseus (mobilenet_v2)", "baseline:truncated")
    assert comparison["mean"] == pytest.approx(2 / 200)
    assert comparison["low"] <= comparison["mean"] <= comparison["high"]


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (report("mobilenet_v2", 172, predecessor_right=189), "compressed another predecessor"),
        (report("mobilenet_v2", 172, size=100), "tested on other images"),
        (report(None, 172), "both have a model 'theseus (same block)'"),
    ],
)
def test_runs_that_are_not_paired_are_refused(second, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        successors.merge_seed({"plain": report(None, 180, {"truncated": 170}), "other": second})


def test_multiply_adds_are_half_the_counted_flops():
    assert successors.multiply_adds(nn.Linear(10, 5, bias=False), torch.zeros(1, 10)) == 50
    convolution = nn.Conv2d(3, 8, kernel_size=3, padding=1, bias=False)
    assert successors.multiply_adds(convolution, torch.zeros(1, 3, 28, 28)) == 8 * 28 * 28 * 3 * 3 * 3


def test_missing_runs_are_named_before_anything_is_measured(tmp_path, capsys):
    with pytest.raises(SystemExit):
        successors.main(["--recipes", "a", "b", "--seeds", "0", "--runs", str(tmp_path)])
    assert "no finished run (report.json) in" in capsys.readouterr().err


def test_models_of_one_architecture_share_one_timing():
    torch.manual_seed(0)
    models = {"predecessor": nn.Linear(64, 64), "a": nn.Linear(64, 8), "b": nn.Linear(64, 8), "c": nn.Linear(64, 4)}
    measured = successors.speedups(models, torch.zeros(16, 64), repeats=3)
    assert measured["predecessor"] == 1.0 and measured["a"] == measured["b"] and set(measured) == set(models)
