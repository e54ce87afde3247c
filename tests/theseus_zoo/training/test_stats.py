"""Properties of the shared statistics (`theseus_zoo.training.stats`), on made-up per-example scores."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples
from theseus_zoo.training import stats

STREAMS = [stats.TORCH, stats.NUMPY]
hits = st.lists(st.integers(0, 1), min_size=5, max_size=60)


def accuracy(values: list[int]):
    array = np.asarray(values, dtype=np.float64)

    def score(chosen) -> float:
        chosen = np.asarray(chosen) if chosen is not None else slice(None)
        return float(array[chosen].mean())

    return score


@pytest.mark.parametrize("resampling", STREAMS, ids=["torch", "numpy"])
@settings(max_examples=examples(25), deadline=None)
@given(data=st.data())
def test_a_paired_difference_is_antisymmetric(resampling, data):
    ours = data.draw(hits)
    theirs = data.draw(st.lists(st.integers(0, 1), min_size=len(ours), max_size=len(ours)))
    forward = stats.paired_difference(accuracy(ours), accuracy(theirs), len(ours), 200, resampling=resampling)
    backward = stats.paired_difference(accuracy(theirs), accuracy(ours), len(ours), 200, resampling=resampling)
    assert forward["difference"] == pytest.approx(-backward["difference"], abs=1e-12)
    assert forward["low"] == pytest.approx(-backward["high"], abs=1e-9)
    assert forward["high"] == pytest.approx(-backward["low"], abs=1e-9)
    assert forward["low"] <= forward["high"]


@pytest.mark.parametrize("resampling", STREAMS, ids=["torch", "numpy"])
@settings(max_examples=examples(20), deadline=None)
@given(values=hits, seeds=st.integers(1, 4))
def test_identical_predictions_differ_by_exactly_zero_per_example_and_over_seeds(resampling, values, seeds):
    same = stats.paired_difference(accuracy(values), accuracy(list(values)), len(values), 100, resampling=resampling)
    assert same == {"difference": 0.0, "low": 0.0, "high": 0.0}
    pairs = {seed: (accuracy(values), accuracy(list(values))) for seed in range(seeds)}
    over = stats.paired_difference_over_seeds(pairs, len(values), 100, resampling=resampling)
    assert over == {"per_seed": dict.fromkeys(range(seeds), 0.0), "mean": 0.0, "low": 0.0, "high": 0.0}


@settings(max_examples=examples(20), deadline=None)
@given(values=st.lists(st.floats(-3, 3), min_size=4, max_size=40), seeds=st.integers(1, 3))
def test_a_log_ratio_of_identical_sides_is_one_and_exp_of_a_constant_shift_is_exact(values, seeds):
    zero = stats.log_ratio(np.zeros((seeds, len(values))), 100)
    assert zero == {"ratio": 1.0, "low": 1.0, "high": 1.0, "mean_log_difference": 0.0}
    shifted = stats.log_ratio(np.full((seeds, len(values)), 0.25), 100)
    assert shifted["ratio"] == pytest.approx(math.exp(0.25))
    assert shifted["low"] == pytest.approx(math.exp(0.25)) and shifted["high"] == pytest.approx(math.exp(0.25))
    spread = stats.log_ratio(np.tile(np.asarray(values), (seeds, 1)), 200)
    assert 0 < spread["low"] <= spread["high"]


@pytest.mark.parametrize("resampling", STREAMS, ids=["torch", "numpy"])
def test_each_stream_is_repeatable_and_draws_its_own_resamples(resampling):
    first = [np.asarray(chosen) for chosen in resampling.draws(30, 5)]
    again = [np.asarray(chosen) for chosen in resampling.draws(30, 5)]
    assert all((a == b).all() for a, b in zip(first, again, strict=True))
    assert all(chosen.min() >= 0 and chosen.max() < 30 and len(chosen) == 30 for chosen in first)
    assert isinstance(next(resampling.draws(3, 1)), torch.Tensor if resampling is stats.TORCH else np.ndarray)


def test_the_two_streams_are_not_the_same_resamples():
    """Why each caller names its stream: a report's numbers (torch) and a benchmark table's (numpy) differ."""
    torch_first = np.asarray(next(stats.TORCH.draws(100, 1)))
    numpy_first = next(stats.NUMPY.draws(100, 1))
    assert not (torch_first == numpy_first).all()


def test_a_95_percent_interval_of_a_mean_covers_the_truth_about_95_percent_of_the_time():
    """Coverage sanity: samples of 100 from N(0, 1), the bootstrap interval of their mean holds 0 in about 95% of
    200 trials (a percentile bootstrap of a mean undercovers a little at this size: 0.86 is far below 0.95, far
    above what a wrong interval gives)."""
    generator = np.random.default_rng(1)
    covered = 0
    for _ in range(200):
        sample = generator.normal(size=100)
        low, high = stats.bootstrap_interval(
            lambda chosen, s=sample: float(s[chosen].mean()), 100, 300, 0.95, stats.NUMPY
        )
        covered += low <= 0 <= high
    assert 0.86 <= covered / 200 <= 1.0


@pytest.mark.parametrize("resampling", STREAMS, ids=["torch", "numpy"])
def test_the_standard_error_of_a_mean_is_sigma_over_root_n(resampling):
    values = np.arange(50, dtype=np.float64)
    error = stats.bootstrap_standard_error(
        lambda chosen: float(values[np.asarray(chosen)].mean()), 50, 2000, resampling
    )
    assert math.isclose(error, values.std() / 50**0.5, rel_tol=0.1)
    assert stats.bootstrap_standard_error(lambda chosen: 0.5, 50, resampling=resampling) == 0.0


def test_over_seeds_the_mean_is_the_mean_of_the_per_seed_differences():
    pairs = {
        seed: (accuracy([1] * right + [0] * (20 - right)), accuracy([1] * 10 + [0] * 10))
        for seed, right in enumerate((12, 15, 9))
    }
    result = stats.paired_difference_over_seeds(pairs, 20, 200)
    assert result["per_seed"] == pytest.approx({0: 0.1, 1: 0.25, 2: -0.05})
    assert result["mean"] == pytest.approx(0.1)
    assert result["low"] <= result["mean"] <= result["high"]


def test_a_t_interval_over_seeds_is_centred_on_the_mean_and_wider_than_the_spread_for_three_seeds():
    pytest.importorskip("scipy")
    low, high = stats.t_interval([0.01, 0.03, 0.02])
    assert (low + high) / 2 == pytest.approx(0.02)
    assert (high - low) / 2 == pytest.approx(4.302653 * 0.01 / math.sqrt(3), rel=1e-6)  # t(0.975, 2) = 4.3027
    assert stats.t_interval([0.5, 0.5, 0.5]) == (0.5, 0.5)
    with pytest.raises(ValueError, match="two values or more"):
        stats.t_interval([0.1])


def test_tost_on_a_worked_example_gives_the_closed_form_p_value():
    """Three seeds at -0.1, 0, +0.1 against ±0.5: t = 0.5 / (0.1 / sqrt 3) = 5 sqrt 3 on 2 degrees of freedom, whose
    upper tail is (1 - t / sqrt(2 + t^2)) / 2 in closed form."""
    result = stats.tost([-0.1, 0.0, 0.1], margin=0.5)
    t = 5 * math.sqrt(3)
    assert result["p_value"] == pytest.approx((1 - t / math.sqrt(2 + t * t)) / 2, rel=1e-9)
    assert result["equivalent"] and result["low"] < 0 < result["high"]
    assert not stats.tost([-0.1, 0.0, 0.1], margin=0.05)["equivalent"]


def test_tost_refuses_one_value_and_a_margin_that_is_not_positive():
    with pytest.raises(ValueError, match="two values"):
        stats.tost([0.1], margin=0.5)
    with pytest.raises(ValueError, match="positive"):
        stats.tost([0.1, 0.2], margin=0.0)


differences = st.lists(st.floats(-3, 3, allow_nan=False).map(lambda x: round(x, 3)), min_size=2, max_size=8)


@settings(max_examples=examples(200), deadline=None)
@given(values=differences, margin=st.floats(0.05, 3).map(lambda x: round(x, 3)))
def test_tost_is_equivalent_exactly_when_the_90_percent_t_interval_lies_inside_the_margins(values, margin):
    """The duality that makes TOST at alpha 0.05 the 90% interval's test, checked against `t_interval` at 90%, the
    same on the mirrored differences, and never equivalent with the mean outside the margins."""
    result = stats.tost(values, margin)
    if statistics.stdev(values) > 0:
        low, high = stats.t_interval(values, level=0.90)
        assert result["low"] == pytest.approx(low, abs=1e-9) and result["high"] == pytest.approx(high, abs=1e-9)
        if min(abs(low + margin), abs(high - margin)) > 1e-9:  # not on a margin to float precision
            assert result["equivalent"] == (-margin < low and high < margin)
    mirrored = stats.tost([-value for value in values], margin)
    assert mirrored["p_value"] == pytest.approx(result["p_value"], abs=1e-9)
    assert 0.0 <= result["p_value"] <= 1.0
    if abs(statistics.mean(values)) >= margin:
        assert not result["equivalent"]
    wider = stats.tost(values, margin * 2)
    assert wider["p_value"] <= result["p_value"] + 1e-12  # a wider margin is never harder to meet


@settings(max_examples=examples(100), deadline=None)
@given(values=differences)
def test_a_verdict_needs_three_seeds_and_equivalent_needs_the_test(values):
    verdict = stats.verdict(values)
    if len(values) < stats.SEED_VERDICT_MINIMUM:
        assert verdict is None
        return
    assert verdict in stats.VERDICTS
    low, high = stats.t_interval(values)
    if verdict == "equivalent":
        assert stats.tost(values, stats.EQUIVALENCE_MARGIN)["equivalent"] and low <= 0 <= high
    if verdict in ("ahead", "behind"):
        assert (low > 0) == (verdict == "ahead") and (high < 0) == (verdict == "behind")


def test_close_seeds_inside_the_margin_are_equivalent_and_a_wide_spread_is_not_distinguishable():
    assert stats.verdict([-0.1, 0.05, 0.0, 0.1, -0.05]) == "equivalent"
    assert stats.verdict([-1.0, 1.2, 0.3, -0.9, 0.4]) == "not distinguishable"
    assert stats.verdict([0.3, 0.35, 0.4]) == "ahead"  # a detected difference stays one, inside the margin too
    assert stats.verdict([0.1, -0.1]) is None
