"""Choosing under a budget (`theseus_core.search`'s stage 4): the exact solver, the measured search around it, and
`CostTable`, the numbers a choice is made by.

`solve` picks one candidate per group maximising the summed score under a limit on the summed cost, exactly (a
mixed-integer program). Candidates timed alone need not add up to the assembled model, and scores taken one group at
a time need not add up either, so `measured_choice` runs the solver under several given budgets, assembles and
measures each choice it makes (and any alternatives the caller names, such as the uniform choices), and keeps the
best of those that measured within the budget: by the summed score, or by an ``assess`` of the assembled choice.
`CostTable` holds what choosing needs, as plain numbers (each group's candidates, their measured `Cost`s, the cost
of the rest of the model), and turns a budget into the solver's limit: `CostTable.check_budget`, `CostTable.choose`,
`CostTable.cheapest`, `CostTable.choose_measured`, `CostTable.priced`. `CandidateLibrary`'s methods of the same
names are the way in from a model; this module needs no model.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BELOW_ONE = 1 - 1e-9
"""The largest budget `measured_choice` gives the solver (a budget is a fraction in (0, 1))."""

RATIO_TOLERANCE = 1e-6
"""How far over its budget, relative to it, a choice's cost ratio may be and still count as within: sums of the same
costs in another order differ in their last bits, so that a budget equal to a choice's own predicted ratio was
refused now and then, and the solver's feasibility tolerance let a choice exceed a budget by as little. A millionth of
the predecessor's cost is far below what any measurement resolves."""


class NonFiniteScoreError(ValueError):
    """A candidate scored NaN or an infinity (its distillation diverged): what `CostTable` refuses to choose by.
    ``path`` and ``name`` say which candidate, ``value`` what it scored, so that a caller can say what to do in its
    own terms (the message's advice, a lower lr, is the library user's)."""

    def __init__(self, path: str, name: str, value: float) -> None:
        super().__init__(
            f"candidate {name!r} of the group at {path} scored {value!r}: every candidate needs a finite score (a "
            "distillation that diverged scores NaN: lower its lr)"
        )
        self.path, self.name, self.value = path, name, value

    def __reduce__(self) -> tuple[type, tuple[str, str, float]]:  # pickled (to another process) as it was raised
        return type(self), (self.path, self.name, self.value)


KINDS = ("latency", "params", "macs")
"""What a budget may limit: measured latency, parameters, multiply-adds (`theseus_core.costs.multiply_adds`)."""


@dataclass(frozen=True)
class Cost:
    """A candidate's measured cost: median ``latency`` in seconds on its group's input, ``params``, and the
    multiply-adds of one call on that input (``macs``; ``None`` where not counted)."""

    latency: float
    params: int
    macs: int | None = None

    def of(self, kind: str) -> float:
        if kind not in KINDS:
            raise ValueError(f"a budget is on one of {', '.join(map(repr, KINDS))}, got {kind!r}")
        value = getattr(self, kind)
        if value is None:
            raise ValueError(f"these costs have no {kind} (not counted when they were measured)")
        return float(value)


@dataclass(frozen=True)
class Choice:
    """What `CandidateLibrary.choose` picked: a candidate name per group path, the budget, the limit the solver
    chose under on the groups' summed cost, and the predicted cost of the whole model as a fraction of the
    predecessor's. From `CandidateLibrary.choose_measured`, ``budget`` is the caller's and ``limit`` the one of the
    budget it gave the solver (corrected by measurement; for an alternative the caller named, its own summed cost),
    so ``predicted_ratio`` may exceed ``budget``; ``measured_ratio`` is what the assembled choice measured (above
    ``budget`` when no choice measured within it), and ``assessed`` its score as a whole when it was chosen by one
    (else ``None``; both ``None`` from `CandidateLibrary.choose`)."""

    chosen: dict[str, str]
    kind: str
    budget: float
    limit: float
    predicted_ratio: float
    score: float
    measured_ratio: float | None = None
    assessed: float | None = None

    @property
    def within_budget(self) -> bool:
        """Whether the choice fits its budget: as measured when it was, else as predicted."""
        ratio = self.predicted_ratio if self.measured_ratio is None else self.measured_ratio
        return _within(ratio, self.budget)


def _within(ratio: float, budget: float) -> bool:
    """Whether a cost ratio fits a budget, up to `RATIO_TOLERANCE`."""
    return ratio <= budget * (1 + RATIO_TOLERANCE)


def _check_range(budget: Any, kind: str) -> None:
    """Raises `ValueError` in one line unless ``budget`` is a fraction in (0, 1) (any real number: numpy's too)."""
    if not (isinstance(budget, numbers.Real) and not isinstance(budget, bool) and 0 < budget < 1):
        raise ValueError(f"a budget is a fraction of the predecessor's {kind} in (0, 1), got {budget!r}")


def _check_choice(chosen: Mapping[str, str], candidates: Mapping[str, Sequence[str]]) -> None:
    """Raises `ValueError` in one line unless ``chosen`` names one of ``candidates[path]`` for every group path."""
    paths = list(candidates)
    if set(chosen) != set(paths):
        raise ValueError(f"a choice names one candidate for each group {paths}, got {sorted(chosen)}")
    for path in paths:
        if chosen[path] not in candidates[path]:
            raise ValueError(f"group {path} has no candidate {chosen[path]!r}; it has {list(candidates[path])}")


@dataclass(frozen=True)
class CostTable:
    """What choosing under a budget needs, as plain numbers: `CandidateLibrary`'s groups and the costs it measured.

    Args:
        candidates: Group path -> its candidates' names, in order; every group has ``keep``.
        costs: (path, name) -> the candidate's measured `Cost`, one for every candidate named.
        rest: The cost of the model outside the groups: the predecessor costs ``rest`` plus every group's ``keep``.
        keep: The name of each group's own candidate (its layers as they are). (default: ``"keep"``, as
            `CandidateLibrary`'s)
        refused: How many candidates were left out when built (`CandidateLibrary.refused`), said when a budget is
            below the cheapest choice. (default: 0)

    A budget is a fraction in (0, 1) of the predecessor's cost of one kind (`KINDS`); a choice keeps at least one
    candidate with parameters to train (``params`` > 0: every group skipped would leave nothing to learn). Scores
    are (path, name) -> float, one for every candidate (higher is better).
    """

    candidates: Mapping[str, Sequence[str]]
    costs: Mapping[tuple[str, str], Cost]
    rest: Cost
    keep: str = "keep"
    refused: int = 0

    def __post_init__(self) -> None:
        for path, names in self.candidates.items():
            if self.keep not in names:
                raise ValueError(f"CostTable: the group at {path} has no {self.keep!r} candidate, got {list(names)}")
            missing = [name for name in names if (path, name) not in self.costs]
            if missing:
                raise ValueError(f"CostTable: no cost for candidate {missing[0]!r} of the group at {path}")

    @property
    def paths(self) -> list[str]:
        """The group paths, in order."""
        return list(self.candidates)

    def _rows(self, kind: str) -> tuple[list[list[str]], list[list[float]], float]:
        """The candidates' names and ``kind`` costs, a row per group, and the predecessor's whole ``kind`` cost."""
        names = [list(self.candidates[path]) for path in self.paths]
        table = [
            [self.costs[(path, name)].of(kind) for name in group] for path, group in zip(self.paths, names, strict=True)
        ]
        return names, table, self.rest.of(kind) + sum(self.costs[(path, self.keep)].of(kind) for path in self.paths)

    def _trainable_premiums(self, names: list[list[str]], table: list[list[float]]) -> list[float]:
        """For each group with a candidate that has parameters, what the cheapest such costs over the group's
        cheapest candidate."""
        return [
            min(cost for name, cost in zip(group, row, strict=True) if self.costs[(path, name)].params > 0) - min(row)
            for path, group, row in zip(self.paths, names, table, strict=True)
            if any(self.costs[(path, name)].params > 0 for name in group)
        ]

    def check_budget(self, budget: float, kind: str = "latency") -> None:
        """Raises `ValueError` in one line for a budget outside (0, 1), one that even the cheapest candidates (the
        cheapest of every group, with the rest of the model) exceed, or one that only choices without a parameter
        to train fit; solves nothing. `choose` refuses by it."""
        _check_range(budget, kind)
        names, table, total = self._rows(kind)
        cheapest = self.rest.of(kind) + sum(min(row) for row in table)
        if not _within(cheapest / total, budget):
            raise ValueError(
                f"a {kind} budget of {budget:g} is below what the cheapest candidates reach "
                f"({cheapest / total:.3f} of the predecessor's): raise it, or add cheaper candidates"
                + (f" ({self.refused} were refused when built: CandidateLibrary.refused)" if self.refused else "")
            )
        trained = cheapest + min(self._trainable_premiums(names, table), default=math.inf)
        if not _within(trained / total, budget):
            raise ValueError(
                f"a {kind} budget of {budget:g} fits only choices without a parameter to train (such as every group "
                f"skipped): raise it to at least {trained / total:.3f} of the predecessor's"
            )

    def choose(self, scores: Mapping[tuple[str, str], float], budget: float, kind: str = "latency") -> Choice:
        """The candidates maximising the summed score with the whole model's cost within ``budget`` times the
        predecessor's (`solve`, under the limit ``budget`` times the predecessor's cost less ``rest``), at least one
        of them with parameters to train. Raises what `check_budget` raises, before solving."""
        self.check_budget(budget, kind)
        self._check_scores(scores)
        names, _, total = self._rows(kind)
        limit = budget * total - self.rest.of(kind)
        values = [[scores[(path, name)] for name in group] for path, group in zip(self.paths, names, strict=True)]
        return self._solved(values, float(budget), limit, kind, slack=budget * total * RATIO_TOLERANCE)

    def _solved(self, values: list[list[float]], budget: float, limit: float, kind: str, slack: float = 0.0) -> Choice:
        """The solver's choice of ``values`` (a row per group) under ``limit`` (``slack`` over it allowed) on the
        groups' summed ``kind`` cost, keeping a candidate with parameters to train, as a `Choice` under ``budget``."""
        names, table, total = self._rows(kind)
        rest = self.rest.of(kind)
        trainable = [
            [self.costs[(path, name)].params > 0 for name in group]
            for path, group in zip(self.paths, names, strict=True)
        ]
        given = allowed = limit + slack
        for _ in range(3):  # the solver's feasibility tolerance may exceed the limit by a hair: tighten by as much
            picked = solve(values, table, given)
            if not any(row[index] for row, index in zip(trainable, picked, strict=True)):
                picked = _solve_trained(values, table, given, trainable)
            used = sum(row[index] for row, index in zip(table, picked, strict=True))
            if used <= allowed:
                break
            given -= used - allowed
        else:
            raise RuntimeError(
                f"the solver's choice costs {used:.6g} of the groups' {kind} where {allowed:.6g} is allowed, after "
                "three solves, each under the last limit less the excess (a solver whose tolerance exceeds it)"
            )
        chosen = {path: group[index] for path, group, index in zip(self.paths, names, picked, strict=True)}
        score = sum(row[index] for row, index in zip(values, picked, strict=True))
        return Choice(chosen, kind, budget, limit, (rest + used) / total, score)

    def _check_scores(self, scores: Mapping[tuple[str, str], float]) -> None:
        """Raises `ValueError` in one line unless every candidate has a real score, `NonFiniteScoreError` unless
        it is finite (a distillation that diverged scores NaN)."""
        for path in self.paths:
            for name in self.candidates[path]:
                value = scores.get((path, name)) if isinstance(scores, Mapping) else None
                if not isinstance(value, numbers.Real):
                    raise ValueError(f"candidate {name!r} of the group at {path} has no score (got {value!r})")
                if not math.isfinite(value):
                    raise NonFiniteScoreError(path, name, value)

    def cheapest(self, kind: str = "latency") -> Choice:
        """The choice of least summed cost that keeps a candidate with parameters to train (each candidate scored
        minus its cost, with no limit), its ``budget`` and ``limit`` its own cost. Raises `ValueError` when no
        candidate has parameters to train."""
        names, table, total = self._rows(kind)
        if not self._trainable_premiums(names, table):
            raise ValueError("no candidate has parameters to train: a choice would leave nothing to learn")
        negated = [[-cost for cost in row] for row in table]
        choice = self._solved(negated, BELOW_ONE, sum(max(row) for row in table), kind)
        return dataclasses.replace(choice, budget=choice.predicted_ratio, limit=choice.predicted_ratio * total)

    def choose_measured(
        self,
        scores: Mapping[tuple[str, str], float],
        budget: float,
        measure: Callable[[dict[str, str]], float],
        kind: str = "latency",
        *,
        rounds: int = 6,
        tolerance: float = 0.01,
        also: Sequence[Mapping[str, str]] = (),
        assess: Callable[[dict[str, str]], float] | None = None,
    ) -> tuple[Choice, list[dict[str, Any]]]:
        """`choose`, corrected by measurement (`CandidateLibrary.choose_measured` says how): `measured_choice` over
        `choose`, from no lower than what `cheapest` is predicted to cost, with the ``also`` choices `priced` beside
        (those without a parameter to train left out). Refuses before measuring anything: under ``kind="latency"``
        a budget outside (0, 1), under another kind what `check_budget` refuses; an ``also`` choice that does not
        name a candidate for every group."""
        if kind == "latency":  # below the cheapest choice by the costs, that choice may still measure within
            _check_range(budget, kind)
        else:
            self.check_budget(budget, kind)
        self._check_scores(scores)
        cheapest = self.cheapest(kind)
        if cheapest.predicted_ratio >= BELOW_ONE:  # no candidate saves anything: refused with the caller's budget
            self.check_budget(budget, kind)
        alternatives = [self.priced(chosen, scores, kind) for chosen in also]
        # like the solver's, an alternative keeps a candidate with parameters to train (every group skipped does not)
        alternatives = [a for a in alternatives if any(self.costs[key].params > 0 for key in a.chosen.items())]
        floor = min(cheapest.predicted_ratio, BELOW_ONE)  # what the solver is given
        return measured_choice(
            lambda given: self.choose(scores, given, kind),  # given stays in [floor, 1): the solver finds one
            measure,
            budget,
            floor,
            rounds=rounds,
            tolerance=tolerance,
            also=alternatives,
            assess=assess,
        )

    def priced(
        self, chosen: Mapping[str, str], scores: Mapping[tuple[str, str], float], kind: str = "latency"
    ) -> Choice:
        """``chosen`` (a candidate name per group) as a `Choice`: its summed score and predicted cost ratio, its own
        summed cost as ``limit``, no budget. Raises `ValueError` for a choice that does not name a candidate for
        every group."""
        _check_choice(chosen, self.candidates)
        self._check_scores(scores)
        _, _, total = self._rows(kind)
        used = sum(self.costs[(path, chosen[path])].of(kind) for path in self.paths)
        score = sum(scores[(path, chosen[path])] for path in self.paths)
        return Choice(dict(chosen), kind, 0.0, used, (self.rest.of(kind) + used) / total, score)


def measured_choice(
    propose: Callable[[float], Choice],
    measure: Callable[[dict[str, str]], float],
    budget: float,
    floor: float,
    *,
    rounds: int = 6,
    tolerance: float = 0.01,
    also: Sequence[Choice] = (),
    assess: Callable[[dict[str, str]], float] | None = None,
) -> tuple[Choice, list[dict[str, Any]]]:
    """The search of `CandidateLibrary.choose_measured` (see there), on any solver: ``propose(given)`` is the
    solver's choice under the given budget (a fraction in [``floor``, 1)), ``measure(chosen)`` the assembled
    choice's cost as a fraction of the predecessor's (``inf``: it does not assemble), ``also`` alternatives measured
    beside the solver's choices, ``assess(chosen)`` the assembled choice's score (higher is better). A NaN
    measurement counts as ``inf`` (never within), a NaN assessment as ``-inf``.

    Returns the chosen `Choice` (``budget`` set to ``budget``, ``measured_ratio`` what it measured: above
    ``budget`` when nothing measured within, `Choice.within_budget` says which) and the trail: one entry per solver call
    (``budget_given``, ``predicted_ratio``, ``measured_ratio``, ``score``, ``chosen``), then one per alternative not
    met already (``budget_given`` ``None``); with ``assess``, each entry measured within the budget holds its
    ``assessed`` score."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds!r}")
    given, trail, measured = max(float(budget), floor), [], {}  # below the floor: the cheapest choice first
    made: list[Choice] = []  # the trail's choices, in its order

    def add(choice: Choice, given: float | None) -> float:
        key = tuple(sorted(choice.chosen.items()))
        if key not in measured:
            value = float(measure(dict(choice.chosen)))
            measured[key] = math.inf if math.isnan(value) else value  # NaN: no reading, so never within
        trail.append(
            {
                "budget_given": given,
                "predicted_ratio": choice.predicted_ratio,
                "measured_ratio": measured[key],
                "score": choice.score,
                "chosen": dict(choice.chosen),
            }
        )
        made.append(choice)
        return measured[key]

    within_at = over_at = None  # the largest given budget whose choice measured within, the smallest over
    for _ in range(rounds):
        choice = propose(given)
        ratio = add(choice, given)
        if ratio <= budget:
            within_at = given if within_at is None else max(within_at, given)
        else:  # an inf (does not assemble) too
            over_at = given if over_at is None else min(over_at, given)
        if within_at is not None and over_at is not None:
            if over_at - within_at <= tolerance:
                break
            given = (within_at + over_at) / 2
            continue
        if within_at is None and given <= floor:
            break  # the cheapest choice measured over: nothing cheaper to try
        # the solver's costs were off by predicted / measured for this choice: correct its budget by as much
        corrected = budget * choice.predicted_ratio / ratio if ratio > 0 else given
        corrected = min(max(corrected, floor), BELOW_ONE)
        if within_at is not None and corrected <= within_at:
            break  # within, and the measurement leaves no more room
        if over_at is not None and corrected >= over_at:
            corrected = max(over_at * (1 - tolerance), floor)  # over, and the correction would not go lower
        given = corrected
    met = {tuple(sorted(entry["chosen"].items())) for entry in trail}
    for alternative in also:
        if tuple(sorted(alternative.chosen.items())) not in met:
            met.add(tuple(sorted(alternative.chosen.items())))
            add(alternative, None)
    assembled = [index for index, entry in enumerate(trail) if entry["measured_ratio"] != float("inf")]
    if not assembled:
        raise ValueError(
            f"none of the {len(measured)} choice(s) measured under a {made[0].kind} budget of {budget:g} "
            "assembled; see why with replace_ on CandidateLibrary.plan(choice)"
        )
    within = [index for index in assembled if _within(trail[index]["measured_ratio"], budget)]
    if not within:
        best = min(assembled, key=lambda index: trail[index]["measured_ratio"])
    elif assess is None:
        best = max(within, key=lambda index: trail[index]["score"])
    else:
        assessed: dict[tuple[tuple[str, str], ...], float] = {}
        for index in within:
            key = tuple(sorted(trail[index]["chosen"].items()))
            if key not in assessed:
                value = float(assess(dict(trail[index]["chosen"])))
                assessed[key] = -math.inf if math.isnan(value) else value  # NaN: never the best
            trail[index]["assessed"] = assessed[key]
        best = max(within, key=lambda index: trail[index]["assessed"])
    chosen = dataclasses.replace(
        made[best],
        budget=float(budget),
        measured_ratio=trail[best]["measured_ratio"],
        assessed=trail[best].get("assessed"),
    )
    return chosen, trail


def solve(scores: Sequence[Sequence[float]], costs: Sequence[Sequence[float]], limit: float) -> list[int]:
    """One index per row maximising the summed ``scores`` with the summed ``costs`` at most ``limit``: an exact
    mixed-integer program (``scipy.optimize.milp``, HiGHS). Rows may differ in length. Raises `ValueError` when no
    choice fits, and `ImportError` naming the extra without scipy."""
    if len(scores) != len(costs) or any(len(s) != len(c) or not s for s, c in zip(scores, costs, strict=True)):
        raise ValueError("scores and costs need one non-empty row per group, of equal lengths")
    try:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
    except ImportError:  # pragma: no cover - the search extra brings it
        raise ImportError("the budget search needs scipy: pip install 'theseus-compression[search]'") from None
    sizes = [len(row) for row in scores]
    count = sum(sizes)
    objective = -np.concatenate([np.asarray(row, dtype=float) for row in scores])  # milp minimises
    one_each = np.zeros((len(sizes), count))
    start = 0
    for row, size in enumerate(sizes):
        one_each[row, start : start + size] = 1
        start += size
    weights = np.concatenate([np.asarray(row, dtype=float) for row in costs])[None, :]
    # in units of the largest cost: HiGHS's feasibility tolerance is absolute (1e-7), and latencies in seconds are
    # small enough that a choice over the limit by a fraction of a percent would pass unscaled
    scale = max(float(np.abs(weights).max()), abs(float(limit)), 1e-300)
    constraints = [LinearConstraint(one_each, 1, 1), LinearConstraint(weights / scale, -np.inf, limit / scale)]
    result = milp(objective, constraints=constraints, integrality=np.ones(count), bounds=Bounds(0, 1))
    if result.x is None:
        raise ValueError(f"no choice of one candidate per group keeps the summed cost within {limit:g}")
    picked, start = [], 0
    for size in sizes:
        picked.append(int(np.argmax(result.x[start : start + size])))
        start += size
    return picked


def _solve_trained(
    values: list[list[float]], table: list[list[float]], limit: float, trainable: list[list[bool]]
) -> list[int]:
    """`solve` with at least one candidate that has parameters: the best of solving with each group in turn held to
    those of its candidates (`CostTable.check_budget` has made sure one fits)."""
    best, best_value = None, -math.inf
    for group, allowed in enumerate(trainable):
        kept = [index for index, has in enumerate(allowed) if has]
        if not kept:
            continue
        held_values = [[values[group][i] for i in kept] if g == group else row for g, row in enumerate(values)]
        held_costs = [[table[group][i] for i in kept] if g == group else row for g, row in enumerate(table)]
        try:
            picked = solve(held_values, held_costs, limit)
        except ValueError:
            continue
        picked[group] = kept[picked[group]]
        value = sum(row[index] for row, index in zip(values, picked, strict=True))
        if value > best_value:
            best, best_value = picked, value
    if best is None:  # pragma: no cover - check_budget refuses this first
        raise ValueError(f"no choice with a parameter to train keeps the summed cost within {limit:g}")
    return best
