"""The report's statistics and text, on fixed predictions (no training): `theseus_zoo.training.report`."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples
from theseus_zoo.training.report import markdown_report, paired_comparisons, search_lines
from theseus_zoo.training.stats import bootstrap_interval, bootstrap_standard_error


class Labelled:
    """A task that scores per-example class predictions by accuracy against fixed labels."""

    metric = "accuracy"
    scores_examples = True

    def __init__(self, labels: list[int]) -> None:
        self.labels = torch.tensor(labels)

    def score(self, predictions: torch.Tensor, split: str, chosen: torch.Tensor | None = None) -> dict[str, float]:
        hits = (predictions == self.labels).float()
        return {"accuracy": float(hits.mean() if chosen is None else hits[chosen].mean())}


def _report(**predictions: list[int]) -> dict:
    return {"models": {name: {"test_predictions": values} for name, values in predictions.items()}}


classes = st.lists(st.integers(0, 2), min_size=5, max_size=40)


@settings(max_examples=examples(30), deadline=None)
@given(labels=classes, data=st.data())
def test_theseus_minus_b_is_minus_b_minus_theseus_on_the_same_resamples(labels, data):
    ours = data.draw(st.lists(st.integers(0, 2), min_size=len(labels), max_size=len(labels)))
    theirs = data.draw(st.lists(st.integers(0, 2), min_size=len(labels), max_size=len(labels)))
    task = Labelled(labels)
    forward = paired_comparisons(task, _report(theseus=ours, other=theirs))["other"]
    backward = paired_comparisons(task, _report(theseus=theirs, other=ours))["other"]
    assert forward["difference"] == pytest.approx(-backward["difference"], abs=1e-12)
    assert forward["low"] == pytest.approx(-backward["high"], abs=1e-9)
    assert forward["high"] == pytest.approx(-backward["low"], abs=1e-9)
    assert forward["low"] <= forward["high"]


@settings(max_examples=examples(20), deadline=None)
@given(labels=classes)
def test_a_model_against_the_same_predictions_differs_by_exactly_zero(labels):
    comparison = paired_comparisons(Labelled(labels), _report(theseus=labels, twin=list(labels)))["twin"]
    assert comparison == {"difference": 0.0, "low": 0.0, "high": 0.0}


def test_the_bootstrap_is_repeatable_and_a_constant_metric_has_no_spread():
    values = torch.arange(50, dtype=torch.float32)

    def mean(chosen: torch.Tensor) -> float:
        return float(values[chosen].mean())

    assert bootstrap_interval(mean, 50) == bootstrap_interval(mean, 50)
    assert bootstrap_standard_error(lambda chosen: 0.5, 50) == 0.0
    assert bootstrap_interval(lambda chosen: 0.5, 50) == (0.5, 0.5)
    low, high = bootstrap_interval(mean, 50)
    # The mean of 0..49 has standard deviation 14.4 / sqrt(50) ~ 2.0 over resamples: a 95% interval ~ +-4.
    assert low < 24.5 < high and 2 < high - low < 12
    assert math.isclose(bootstrap_standard_error(mean, 50, resamples=2000), 14.43 / 50**0.5, rel_tol=0.15)


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [(0.01, 0.03, "ahead of"), (-0.03, -0.01, "behind"), (-0.01, 0.02, "not distinguishable from")],
)
def test_the_verdict_follows_the_interval_not_the_point_estimate(low, high, verdict):
    model = {"test": {"accuracy": 0.8}, "retention_percent": 100.0, "parameters": 10, "size_on_disk_bytes": 4e6}
    report = {
        "recipe": {"name": "r", "description": "d"},
        "metric": "accuracy",
        "models": {"predecessor": model, "theseus": {**model, "size_on_disk_bytes": 2e6}},
        "comparisons": {"baseline:kd": {"difference": 0.005, "low": low, "high": high}},
        "speedup": 2.0,
    }
    text = markdown_report(report)
    assert f"- Theseus is {verdict} baseline:kd: +0.0050" in text
    assert "2.00 MB on disk, 0.50 of the predecessor's export, and runs 2.00× as fast" in text


def test_the_markdown_is_the_same_from_a_typed_report_and_from_its_json():
    from theseus_zoo.training.results import Report

    model = {"test": {"accuracy": 0.8}, "parameters": 10, "size_on_disk_bytes": 4e6, "retention_percent": 100.0}
    data = {
        "recipe": {"name": "r", "description": "d"},
        "metric": "accuracy",
        "models": {
            "predecessor": {**model, "test_standard_error": 0.02},
            "theseus": {**model, "test_standard_error": 0.01},
        },
        "speedup": 2.0,
        "phases": {},
    }
    assert markdown_report(Report.from_dict(data)) == markdown_report(data)
    assert "predecessor ±0.0200, theseus ±0.0100" in markdown_report(data)


@pytest.mark.parametrize(
    ("fields", "why"),
    [({"theseus": False}, "`theseus: false`"), ({"methods": ["kd"]}, "no Theseus variant among the methods")],
)
def test_a_run_without_theseus_says_why_and_that_no_model_was_exported(fields, why):
    """``--methods kd,truncated`` was reported as ``theseus: false``, a field the user never set."""
    model = {"test": {"accuracy": 0.8}, "parameters": 10, "size_on_disk_bytes": 4e6, "retention_percent": 100.0}
    data = {
        "recipe": {"name": "r", "description": "d", "baselines": ["kd"], **fields},
        "metric": "accuracy",
        "models": {"predecessor": model, "baseline:kd": model},
        "speedup": 2.0,
        "phases": {},
    }
    assert f"No Theseus run ({why}), so no model was exported" in markdown_report(data)


@pytest.mark.parametrize(("exported", "over"), [(0.517, True), (0.49, False)])
def test_the_search_account_says_when_the_exported_model_measures_over_its_budget_and_shows_the_plot(exported, over):
    search = {
        "budget": {"latency": 0.5},
        "steps": 10,
        "predicted_ratio": 0.55,
        "params_ratio": 0.4,
        "measured_latency_ratio": exported,
        "within_budget": True,
        "chosen": {"blocks[0:2]": "one"},
        "candidates": {"blocks[0:2]": {"one": {"score": -0.1, "latency": 1e-3, "params": 100}}},
        "measured_choices": [
            {
                "budget_given": 0.5,
                "predicted_ratio": 0.55,
                "measured_ratio": 0.497,
                "score": -0.1,
                "chosen": {"blocks[0:2]": "one"},
            }
        ],
    }
    text = search_lines(search)
    assert "0.497 measured once assembled" in text and f"exported model {exported:.3f}" in text
    assert ("over the budget by 0.017" in text) == over
    assert "![the solver's choices at several budgets](search.png)" in text


@pytest.mark.parametrize(("within", "said"), [(False, True), (True, False), (None, False)])
def test_the_search_account_says_when_the_recipes_own_choice_is_over_its_budget(within, said):
    """A budget.chosen over its budget was reported as "priced under a params budget of 0.3" and nothing more."""
    search = {
        "budget": {"params": 0.3},
        "steps": 10,
        "given": True,
        "predicted_ratio": 0.752,
        "params_ratio": 0.752,
        "within_budget": within,
        "chosen": {"blocks[0:2]": "keep"},
        "candidates": {"blocks[0:2]": {"keep": {"score": 0.0, "latency": 1e-3, "params": 100}}},
    }
    text = search_lines(search)
    assert (
        "**Over the budget**: the recipe's choice is predicted at 0.752 of the predecessor's params" in text
    ) == said
