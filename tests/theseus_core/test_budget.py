"""theseus_core.budget: the exact solver, and the measured search around it (any solver, any measurement)."""

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples
from theseus_core.budget import Choice, measured_choice, solve

pytest.importorskip("scipy")


def brute_force(scores, costs, limit):
    best, best_value = None, -float("inf")
    for picked in itertools.product(*(range(len(row)) for row in scores)):
        cost = sum(row[index] for row, index in zip(costs, picked, strict=True))
        value = sum(row[index] for row, index in zip(scores, picked, strict=True))
        if cost <= limit + 1e-9 and value > best_value + 1e-12:
            best, best_value = list(picked), value
    return best, best_value


@st.composite
def instances(draw):
    groups = draw(st.integers(1, 8))
    rows = [draw(st.integers(1, 4)) for _ in range(groups)]
    number = st.integers(0, 100).map(float)
    scores = [[-draw(number) for _ in range(size)] for size in rows]
    costs = [[draw(number) + 1 for _ in range(size)] for size in rows]
    limit = draw(st.floats(min(map(min, costs)) * groups * 0.5, sum(map(max, costs)) + 1))
    return scores, costs, limit


@settings(max_examples=examples(60), deadline=None)
@given(instances())
def test_the_solver_finds_what_brute_force_finds_within_the_limit(instance):
    scores, costs, limit = instance
    expected, value = brute_force(scores, costs, limit)
    if expected is None:
        with pytest.raises(ValueError, match="no choice"):
            solve(scores, costs, limit)
        return
    picked = solve(scores, costs, limit)
    assert sum(row[i] for row, i in zip(costs, picked, strict=True)) <= limit + 1e-6
    assert sum(row[i] for row, i in zip(scores, picked, strict=True)) == pytest.approx(value)


def test_a_planted_wrong_solver_fails_the_brute_force_check():
    scores, costs = [[0.0, -1.0], [0.0, -1.0]], [[10.0, 1.0], [10.0, 1.0]]
    greedy = [0, 1]  # the best score first, until the limit bites: 11 > 2 breaks the limit
    assert brute_force(scores, costs, 2.0)[0] == solve(scores, costs, 2.0) == [1, 1] != greedy


# ------------------------------------------------------------------------------------------ the measured search
# A fake solver over four architectures a < b < c < d (predicted costs 0.2 .. 0.8, summed scores rising with cost);
# the solver proposes the best one predicted within the budget it is given. "u" is an alternative it never proposes.
PREDICTED = {"a": 0.2, "b": 0.4, "c": 0.6, "d": 0.8, "u": 0.5}
SUMMED = {"a": -4.0, "b": -3.0, "c": -2.0, "d": -1.0, "u": -3.5}


def choice(name, given=0.0):
    return Choice({"g": name}, "latency", given, PREDICTED[name], PREDICTED[name], SUMMED[name])


def propose(given):
    fits = [name for name in "abcd" if PREDICTED[name] <= given]
    return choice(fits[-1] if fits else "a", given)


def test_without_an_assessment_the_best_summed_score_within_wins_and_alternatives_are_measured_once():
    measured = []

    def measure(chosen):
        measured.append(chosen["g"])
        return {"a": 0.1, "b": 0.2, "c": 0.45, "d": 0.7, "u": 0.3}[chosen["g"]]

    best, trail = measured_choice(propose, measure, 0.5, 0.2, also=[choice("u"), choice("c")])
    assert best.chosen == {"g": "c"} and best.budget == 0.5 and best.assessed is None  # c measured 0.45
    assert sorted(measured) == sorted(set(measured))  # each architecture measured once
    alternatives = [entry for entry in trail if entry["budget_given"] is None]
    assert [entry["chosen"] for entry in alternatives] == [{"g": "u"}]  # c was met already
    assert "assessed" not in str(trail)


@settings(max_examples=examples(60), deadline=None)
@given(
    st.fixed_dictionaries({name: st.floats(0.05, 1.2) for name in "abcdu"}),
    st.fixed_dictionaries({name: st.floats(-5.0, 0.0) for name in "abcdu"}),
    st.floats(0.15, 0.9),
)
def test_with_an_assessment_the_best_assessed_choice_measured_within_wins(measurements, assessments, budget):
    """Whatever the measurements and the assembled scores: the choice is the best assessed of those measured within
    the budget (the solver's and the alternative's alike), each assessed once and only if within; none within:
    the cheapest measured, unassessed."""
    assessed = []

    def assess(chosen):
        assessed.append(chosen["g"])
        return assessments[chosen["g"]]

    best, trail = measured_choice(
        propose, lambda chosen: measurements[chosen["g"]], budget, 0.2, also=[choice("u")], assess=assess
    )
    met = {entry["chosen"]["g"] for entry in trail}
    within = {name for name in met if measurements[name] <= budget}
    assert "u" in met and sorted(assessed) == sorted(within)
    assert all(("assessed" in entry) == (entry["chosen"]["g"] in within) for entry in trail)
    assert best.measured_ratio == measurements[best.chosen["g"]] and best.within_budget == bool(within)
    if within:
        assert best.chosen["g"] in within and best.assessed == max(assessments[name] for name in within)
    else:
        assert measurements[best.chosen["g"]] == min(measurements[name] for name in met) and best.assessed is None


def test_an_alternative_the_solver_never_proposes_wins_when_the_whole_scores_it_best():
    """The summed scores put d, c, b ahead of u; assembled, u is the best that fits (a GCN's uniform layers, where
    the solver's cheap mixes lose the receptive field)."""
    measure = {"a": 0.1, "b": 0.3, "c": 0.55, "d": 0.7, "u": 0.35}.__getitem__
    assessed = {"a": -3.0, "b": -2.5, "c": -0.5, "d": -0.2, "u": -1.0}.__getitem__
    plain, _ = measured_choice(propose, lambda chosen: measure(chosen["g"]), 0.4, 0.2, also=[choice("u")])
    best, _ = measured_choice(
        propose, lambda c: measure(c["g"]), 0.4, 0.2, also=[choice("u")], assess=lambda c: assessed(c["g"])
    )
    assert plain.chosen == {"g": "b"} and best.chosen == {"g": "u"} and best.assessed == -1.0


def test_a_nan_measurement_never_fits_and_a_nan_assessment_never_wins():
    measure = {"a": 0.1, "b": float("nan"), "c": 0.3, "d": 0.9, "u": 0.2}.__getitem__
    assessed = {"a": -1.0, "b": 5.0, "c": float("nan"), "d": 0.0, "u": -2.0}.__getitem__
    best, trail = measured_choice(
        propose, lambda c: measure(c["g"]), 0.5, 0.2, also=[choice("u")], assess=lambda c: assessed(c["g"])
    )
    assert all(entry["measured_ratio"] == float("inf") for entry in trail if entry["chosen"] == {"g": "b"})
    assert best.chosen == {"g": "a"}  # c's assessment is NaN, b never measured within


@settings(max_examples=examples(50), deadline=None)
@given(
    seed=st.integers(0, 2**16),
    unit=st.sampled_from([1e-6, 1e-3, 1.0, 1e3]),
)
def test_the_solver_keeps_the_limit_whatever_the_unit_of_the_costs(seed, unit):
    """Latencies in seconds are small: a limit tighter than the solver's absolute tolerance must still hold."""
    generator = random.Random(seed)
    groups = [[generator.uniform(0.5, 1.5) for _ in range(3)] for _ in range(4)]
    costs = [[cost * unit for cost in row] for row in groups]
    scores = [[generator.uniform(-1, 0) for _ in row] for row in groups]
    cheapest = sum(min(row) for row in costs)
    limit = cheapest * (1 + 1e-4)  # only choices within 0.01% of the cheapest fit
    picked = solve(scores, costs, limit)
    assert sum(row[index] for row, index in zip(costs, picked, strict=True)) <= limit * (1 + 1e-9)
