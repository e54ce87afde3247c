"""Choosing under a budget: the exact solver, and the measured search around it (`theseus_core.search`'s stage 4).

`solve` picks one candidate per group maximising the summed score under a limit on the summed cost, exactly (a
mixed-integer program). Candidates timed alone need not add up to the assembled model, and scores taken one group at
a time need not add up either, so `measured_choice` runs the solver under several given budgets, assembles and
measures each choice it makes (and any alternatives the caller names, such as the uniform choices), and keeps the
best of those that measured within the budget: by the summed score, or by an ``assess`` of the assembled choice.
`CandidateLibrary.choose_measured` is the way in; this module needs no model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

BELOW_ONE = 1 - 1e-9
"""The largest budget `measured_choice` gives the solver (a budget is a fraction in (0, 1))."""


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
        return ratio <= self.budget


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
    within = [index for index in assembled if trail[index]["measured_ratio"] <= budget]
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
