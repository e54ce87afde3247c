"""theseus_core.budget: the exact solver, the measured search around it (any solver, any measurement), and
`CostTable`, the choosing of a candidate library on plain numbers."""

import itertools
import math
import pickle
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples
from theseus_core import budget
from theseus_core.budget import Choice, Cost, CostTable, NonFiniteScoreError, measured_choice, solve

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


# ------------------------------------------------------------------------------------------ the cost table
@st.composite
def cost_tables(draw):
    """A small table of whole-number latencies (parameters drawn apart from them; ``skip`` and some others have
    none), its scores (half the time every parameter-free candidate scores best), and a budget whose limit on the
    groups' summed latency is k + 0.5: no summed latency lies on it."""
    candidates, costs, scores, free_first = {}, {}, {}, draw(st.booleans())
    for group in range(draw(st.integers(1, 4))):
        path = f"blocks[{group}]"
        others = draw(st.lists(st.sampled_from(["skip", "one", "narrow"]), min_size=1, max_size=3, unique=True))
        candidates[path] = ["keep", *others]
        for name in candidates[path]:
            params = 0 if name == "skip" else draw(st.sampled_from([0, 3, 50]))
            latency = draw(st.integers(10, 20) if name == "keep" else st.integers(1, 20))  # keep: mostly dearest
            costs[(path, name)] = Cost(float(latency), params)
            if free_first:  # the solver's best has nothing to train whenever such a choice fits
                scores[(path, name)] = 0.0 if params == 0 else -float(draw(st.integers(1, 10)))
            else:
                scores[(path, name)] = 0.0 if name == "keep" else -float(draw(st.integers(0, 10)))
    rest = Cost(float(draw(st.integers(0, 20))), draw(st.integers(0, 100)))
    inside = sum(costs[(path, "keep")].latency for path in candidates)
    cheapest = sum(min(costs[(path, name)].latency for name in names) for path, names in candidates.items())
    low, high = max(0, int(cheapest) - 2), int(inside) - 1  # down to just below the cheapest
    limit = high - round(draw(st.floats(0, 1)) * (high - low)) + 0.5
    budget = (rest.latency + limit) / (rest.latency + inside)
    return CostTable(candidates, costs, rest), scores, budget, limit


def every_choice(table):
    """Each choice of one candidate per group, as its (path, name) keys, with its summed latency and whether any of
    its candidates has parameters to train."""
    for names in itertools.product(*table.candidates.values()):
        keys = list(zip(table.paths, names, strict=True))
        yield keys, sum(table.costs[key].latency for key in keys), any(table.costs[key].params > 0 for key in keys)


@settings(max_examples=examples(60), deadline=None)
@given(cost_tables())
def test_the_choice_keeps_the_budget_and_scores_as_the_best_choice_enumerated(drawn):
    """Whatever the table and the budget: a choice within the limit with a parameter to train, scoring what the best
    such choice enumerated scores; no choice within: refused as below the cheapest; only parameter-free ones
    within: refused as such."""
    table, scores, budget, limit = drawn
    fits = [(keys, trains) for keys, cost, trains in every_choice(table) if cost <= limit]
    if not fits:
        with pytest.raises(ValueError, match="is below what the cheapest candidates reach"):
            table.choose(scores, budget)
        return
    if not any(trains for _, trains in fits):
        with pytest.raises(ValueError, match="fits only choices without a parameter to train"):
            table.choose(scores, budget)
        return
    best = max(sum(scores[key] for key in keys) for keys, trains in fits if trains)
    choice = table.choose(scores, budget)
    used = sum(table.costs[item].latency for item in choice.chosen.items())
    whole = table.rest.latency + sum(table.costs[(path, "keep")].latency for path in table.paths)
    assert table.rest.latency + used <= budget * whole
    assert choice.predicted_ratio <= budget and choice.limit == pytest.approx(limit)
    assert any(table.costs[item].params > 0 for item in choice.chosen.items())
    assert choice.score == best == sum(scores[item] for item in choice.chosen.items())
    priced = table.priced(choice.chosen, scores)
    assert (priced.predicted_ratio, priced.score, priced.limit) == (choice.predicted_ratio, choice.score, used)


@settings(max_examples=examples(30), deadline=None)
@given(cost_tables())
def test_the_cheapest_choice_is_the_least_latency_enumerated_with_a_parameter_to_train(drawn):
    """The cheapest even where it saves nothing (`choose_measured` then refuses with the caller's budget); refused
    only where no candidate has parameters."""
    table, _, _, _ = drawn
    trained = [cost for _, cost, trains in every_choice(table) if trains]
    if not trained:
        with pytest.raises(ValueError, match=r"no candidate has parameters to train"):
            table.cheapest()
        return
    cheapest = table.cheapest()
    assert sum(table.costs[item].latency for item in cheapest.chosen.items()) == min(trained)
    assert cheapest.budget == cheapest.predicted_ratio  # its own cost: priced, not chosen under a budget


# (keep, skip, narrow) latencies (4, 1, 2) in each of two groups, the rest 2: the predecessor costs 10, the cheapest
# choice 4 (every group skipped, nothing to train), the cheapest with a parameter to train 5; multiply-adds 10 times
# as many
GROUPS = ["a", "b"]
COSTS = {
    **{(path, "keep"): Cost(4.0, 10, 40) for path in GROUPS},
    **{(path, "skip"): Cost(1.0, 0, 10) for path in GROUPS},
    **{(path, "narrow"): Cost(2.0, 3, 20) for path in GROUPS},
}
SCORES = {("a", "keep"): 0.0, ("b", "keep"): 0.0, ("a", "narrow"): -1.0, ("b", "narrow"): -2.0}


def small_table(refused=0):
    candidates = {path: ["keep", "skip", "narrow"] for path in GROUPS}
    return CostTable(candidates, COSTS, Cost(2.0, 5, 20), refused=refused)


def test_a_budget_outside_zero_one_below_the_cheapest_or_fitting_only_what_trains_nothing_is_refused(monkeypatch):
    """Each refusal in one line, before anything is solved or measured; the refused candidates are said when the
    budget is below the cheapest, and the least budget that fits a choice to train when only skipping fits."""
    monkeypatch.setattr(budget, "solve", lambda *args: pytest.fail("solved"))
    scores = {**SCORES, ("a", "skip"): -5.0, ("b", "skip"): -3.0}
    unmeasured = lambda chosen: pytest.fail("measured")  # noqa: E731
    table, in_range = small_table(), r"a fraction of the predecessor's \w+ in \(0, 1\), got"
    for bad in (0, 1, 1.5, -0.2, "half", None):
        with pytest.raises(ValueError, match=in_range):
            table.check_budget(bad)
        with pytest.raises(ValueError, match=in_range):
            table.choose(scores, bad, "params")
        for kind in ("latency", "params"):
            with pytest.raises(ValueError, match=in_range):
                table.choose_measured(scores, bad, unmeasured, kind)
    with pytest.raises(ValueError, match=r"latency budget of 0.3 is below .* \(0.400 of the predecessor's\)") as below:
        small_table().choose(scores, 0.3)
    assert "refused" not in str(below.value)
    with pytest.raises(ValueError, match=r"\(2 were refused when built: CandidateLibrary.refused\)$") as below:
        small_table(refused=2).check_budget(0.3)
    with pytest.raises(ValueError, match=r"fits only choices without .* at least 0.500 of the predecessor's") as only:
        small_table().choose(scores, 0.45)
    with pytest.raises(ValueError, match="fits only choices without a parameter to train"):
        small_table().choose_measured(scores, 0.45, unmeasured, "macs")
    for refused in (below, only):
        assert "\n" not in str(refused.value)


def test_a_solver_over_the_limit_however_it_is_tightened_is_never_taken_for_a_choice(monkeypatch):
    """The solver's feasibility tolerance may exceed the limit by a hair, which a tighter limit takes back; a solver
    that stays over (never seen with HiGHS) is an error, not a choice over the budget."""
    limits = []
    keep_both = lambda values, table, limit: limits.append(limit) or [0, 0]  # noqa: E731  (cost 8, over any budget)
    monkeypatch.setattr(budget, "solve", keep_both)
    scores = {**SCORES, ("a", "skip"): -5.0, ("b", "skip"): -3.0}
    with pytest.raises(RuntimeError, match=r"costs 8 of the groups' latency where 3(\.0*\d)? is allowed, after"):
        small_table().choose(scores, 0.5)
    assert len(limits) == 3 and limits[0] == pytest.approx(3, rel=1e-5) and limits[2] == pytest.approx(-7, rel=1e-5)


def test_the_solvers_parameter_free_best_gives_way_to_the_best_with_a_parameter_to_train():
    """Every group skipped scores best and fits; the choice is the best that keeps something to train."""
    scores = {**SCORES, ("a", "skip"): -0.1, ("b", "skip"): -0.1}
    assert solve([[0.0, -0.1, -1.0], [0.0, -0.1, -2.0]], [[4.0, 1.0, 2.0], [4.0, 1.0, 2.0]], 3.0) == [1, 1]
    choice = small_table().choose(scores, 0.5)
    assert choice == Choice({"a": "narrow", "b": "skip"}, "latency", 0.5, 3.0, 0.5, -1.1)
    assert small_table().cheapest("params").chosen in ({"a": "narrow", "b": "skip"}, {"a": "skip", "b": "narrow"})


def test_an_exact_prediction_measures_one_choice_and_a_parameter_free_alternative_is_not_measured():
    table = small_table()
    scores = {**SCORES, ("a", "skip"): -5.0, ("b", "skip"): -3.0}
    measured = []

    def exact(chosen):
        measured.append(chosen)
        return table.priced(chosen, scores).predicted_ratio

    skipped, narrow = dict.fromkeys(GROUPS, "skip"), dict.fromkeys(GROUPS, "narrow")
    choice, trail = table.choose_measured(scores, 0.6, exact, rounds=6, also=[skipped])
    assert measured == [narrow] and len(trail) == 1 and choice.chosen == table.choose(scores, 0.6).chosen == narrow
    assert choice.measured_ratio == choice.predicted_ratio == 0.6
    with pytest.raises(ValueError, match="group b has no candidate 'wide'; it has \\['keep', 'skip', 'narrow'\\]"):
        table.choose_measured(scores, 0.6, exact, also=[{"a": "keep", "b": "wide"}])
    with pytest.raises(ValueError, match=r"one candidate for each group \['a', 'b'\], got \['a'\]"):
        table.priced({"a": "keep"}, scores)
    assert len(measured) == 1


def test_a_table_without_keep_or_a_cost_for_a_candidate_is_refused():
    with pytest.raises(ValueError, match="the group at a has no 'keep' candidate"):
        CostTable({"a": ["skip"]}, COSTS, Cost(1.0, 1))
    with pytest.raises(ValueError, match="no cost for candidate 'wide' of the group at b"):
        CostTable({"a": ["keep"], "b": ["keep", "wide"]}, COSTS, Cost(1.0, 1))


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.lists(st.floats(0.001, 5.0), min_size=2, max_size=4), min_size=1, max_size=6), st.data())
def test_a_budget_equal_to_a_choices_own_ratio_admits_it_and_no_choice_exceeds_its_budget(costs, data):
    """Sums of the same costs in another order differ in their last bits: a budget read off a choice's predicted
    ratio was refused now and then as below it, and the solver's tolerance let a choice exceed a budget by as much."""
    paths = [f"g{index}" for index in range(len(costs))]
    candidates = {
        path: ["keep", *(f"c{index}" for index in range(1, len(row)))] for path, row in zip(paths, costs, strict=True)
    }
    table = CostTable(
        candidates,
        {
            (path, name): Cost(cost, params=1, macs=None)
            for path, row in zip(paths, costs, strict=True)
            for name, cost in zip(candidates[path], row, strict=True)
        },
        Cost(0.5, params=0),
    )
    picked = {path: data.draw(st.sampled_from(candidates[path])) for path in paths}
    scores = {key: data.draw(st.floats(-1, 0)) for key in table.costs}
    ratio = table.priced(picked, scores).predicted_ratio
    if not 0 < ratio < 1:
        return
    table.check_budget(ratio)  # the choice's own ratio is never below the cheapest
    choice = table.choose(scores, ratio)
    assert choice.within_budget and choice.predicted_ratio <= ratio * (1 + budget.RATIO_TOLERANCE)
    assert choice.score >= table.priced(picked, scores).score


def test_a_non_finite_score_or_nothing_cheaper_than_keep_is_refused_in_one_line_with_the_budget_given():
    table = CostTable({"g": ["keep", "wide"]}, {("g", "keep"): Cost(1.0, 4), ("g", "wide"): Cost(2.0, 8)}, Cost(1.0, 0))
    scores = {("g", "keep"): 0.0, ("g", "wide"): 0.1}
    with pytest.raises(ValueError, match=r"a latency budget of 0.5 is below what the cheapest") as refused:
        table.choose_measured(scores, 0.5, lambda chosen: 0.4)
    assert "\n" not in str(refused.value)
    cheap = CostTable({"g": ["keep", "one"]}, {("g", "keep"): Cost(1.0, 4), ("g", "one"): Cost(0.2, 2)}, Cost(1.0, 0))
    diverged = {("g", "keep"): 0.0, ("g", "one"): float("nan")}
    for choose in (
        lambda: cheap.choose(diverged, 0.8),
        lambda: cheap.choose_measured(diverged, 0.8, lambda c: 0.5),
        lambda: cheap.priced({"g": "one"}, diverged),  # a recipe's own choice, priced
    ):
        with pytest.raises(
            NonFiniteScoreError, match=r"candidate 'one' of the group at g scored nan.*lower its lr"
        ) as error:
            choose()
        assert (error.value.path, error.value.name, math.isnan(error.value.value)) == ("g", "one", True)
    sent = pickle.loads(pickle.dumps(error.value))  # as multiprocessing sends it back
    assert type(sent) is NonFiniteScoreError and str(sent) == str(error.value) and sent.name == "one"
    with pytest.raises(ValueError, match=r"candidate 'one' of the group at g has no score \(got None\)") as missing:
        cheap.choose({("g", "keep"): 0.0}, 0.8)  # not a score at all: no NonFiniteScoreError to reword
    assert not isinstance(missing.value, NonFiniteScoreError)
    assert cheap.choose({("g", "keep"): 0.0, ("g", "one"): -0.1}, np.float32(0.8)).chosen == {"g": "one"}
