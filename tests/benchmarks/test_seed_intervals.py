"""`benchmarks.seed_intervals`: a seed-level interval only from three seeds, and the verdict follows it."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import seed_intervals
from theseus_zoo.training import stats


def test_fewer_than_three_seeds_get_no_interval_and_no_verdict():
    assert seed_intervals.t_interval([1.0, 2.0]) is None
    assert stats.seed_verdict(None, 1) == "one seed: no verdict"
    assert stats.seed_verdict(None, 2) == "two seeds: no verdict"


def test_the_t_interval_of_three_seeds_matches_the_textbook_value():
    low, high = seed_intervals.t_interval([1.0, 2.0, 3.0])  # mean 2, sd 1, t(0.975, 2) = 4.3027
    assert (low, high) == pytest.approx((2 - 4.302653 / 3**0.5, 2 + 4.302653 / 3**0.5), rel=1e-5)
    assert stats.seed_verdict((low, high), 3) == "not distinguishable"
    assert stats.seed_verdict((0.1, 0.2), 3) == "ahead" and stats.seed_verdict((-0.2, -0.1), 3) == "behind"


@given(st.lists(st.floats(-10, 10), min_size=3, max_size=8), st.floats(-5, 5))
def test_the_interval_holds_the_mean_and_moves_with_a_shift(values, shift):
    low, high = seed_intervals.t_interval(values)
    mean = sum(values) / len(values)
    assert low <= mean + 1e-9 and mean - 1e-9 <= high
    shifted = seed_intervals.t_interval([value + shift for value in values])
    assert shifted == pytest.approx((low + shift, high + shift), abs=1e-6)


def test_rows_read_an_archived_table_in_points(tmp_path):
    table = tmp_path / "recipe-x.json"
    comparison = {"per_seed": {"0": -0.010, "1": -0.011, "2": -0.012}, "low": -0.03, "high": -0.01}
    table.write_text(json.dumps({"summary": {"comparisons": {"baseline:kd": comparison}}}))
    (row,) = seed_intervals.rows_of(table)
    assert row["table"] == "x" and row["seeds"] == 3 and row["mean"] == pytest.approx(-1.1)
    assert row["test_set_interval"] == pytest.approx([-3.0, -1.0]) and row["verdict"] == "behind"
    comparison["per_seed"] = {"0": -0.01, "1": -0.02, "2": -0.03}  # the same mean test gap, but seeds disagree
    table.write_text(json.dumps({"summary": {"comparisons": {"baseline:kd": comparison}}}))
    assert seed_intervals.rows_of(table)[0]["verdict"] == "not distinguishable"
