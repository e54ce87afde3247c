"""The statistics of reports and benchmarks, in one place: bootstrap standard errors and percentile intervals over
test examples, paired differences over examples and over seeds, ratios of geometric means (log-ratios), the
Student-t interval of a mean over seeds, and the verdicts the results pages may state: ahead / behind by that
interval, ``equivalent`` only by a two one-sided test (`tost`) against a stated margin.

Every bootstrap here resamples test examples with replacement, ``resamples`` times, and evaluates a statistic of the
chosen indices. Which indices are drawn, and in which arithmetic the resampled values are reduced, is the
`Resampling` a caller passes, and stays explicit because archived numbers depend on it:

- `TORCH` (the default): a ``torch.Generator`` seeded 0, reduced with torch (``Tensor.std``, ``Tensor.quantile`` at
  ``(1 - level) / 2``). Every ``report.json`` was written with it (standard errors and paired comparisons).
- `NUMPY`: ``numpy.random.default_rng(0)``, reduced with numpy (``np.quantile`` at ``0.025`` / ``0.975`` for a 95%
  interval). The seed-level tables of ``benchmarks/`` (`benchmarks.recipes`, `benchmarks.compare`,
  `benchmarks.budget`, `benchmarks.successors`, `benchmarks.llm_seeds`) were made with it.

The two draw different resamples, and even on the same values torch's and numpy's standard deviation differ in the
last bits, so one stream for both would change every archived number (a little); each caller names its own.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

Indices = Any
"""The example indices of one resample: a ``torch.Tensor`` (`TORCH`) or a ``numpy.ndarray`` (`NUMPY`)."""

Key = TypeVar("Key", bound=Hashable)


class Resampling(Protocol):
    """Where a bootstrap's resamples come from and how their values are reduced (module doc)."""

    def draws(self, size: int, resamples: int) -> Iterator[Indices]:
        """``resamples`` resamples of ``size`` example indices, from a fresh generator (the same every call)."""
        ...

    def everything(self, size: int) -> Indices:
        """Every example, as this stream's indices."""
        ...

    def standard_error(self, values: Sequence[float]) -> float:
        """The standard deviation (``n - 1``) of the resampled values."""
        ...

    def interval(self, values: Sequence[float], level: float) -> tuple[float, float]:
        """The central ``level`` percentile interval of the resampled values (linear interpolation)."""
        ...


@dataclass(frozen=True)
class TorchResampling:
    """Resamples from ``torch.Generator().manual_seed(seed)``, reduced with torch: what every report uses."""

    seed: int = 0

    def draws(self, size: int, resamples: int) -> Iterator[torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed)
        for _ in range(resamples):
            yield torch.randint(size, (size,), generator=generator)

    def everything(self, size: int) -> torch.Tensor:
        return torch.arange(size)

    def standard_error(self, values: Sequence[float]) -> float:
        return float(torch.tensor(values, dtype=torch.float64).std())

    def interval(self, values: Sequence[float], level: float) -> tuple[float, float]:
        resampled, tail = torch.tensor(values, dtype=torch.float64), (1 - level) / 2
        return float(resampled.quantile(tail)), float(resampled.quantile(1 - tail))


@dataclass(frozen=True)
class NumpyResampling:
    """Resamples from ``numpy.random.default_rng(seed)``, reduced with numpy: what the seed-level benchmark tables
    use. The tails are ``(1 - level) / 2`` rounded to 12 digits (``0.025`` and ``0.975`` exactly for 95%, as those
    tables were computed)."""

    seed: int = 0

    def draws(self, size: int, resamples: int) -> Iterator[np.ndarray]:
        generator = np.random.default_rng(self.seed)
        for _ in range(resamples):
            yield generator.integers(0, size, size)

    def everything(self, size: int) -> np.ndarray:
        return np.arange(size)

    def standard_error(self, values: Sequence[float]) -> float:
        return float(np.std(np.asarray(values, dtype=np.float64), ddof=1))

    def interval(self, values: Sequence[float], level: float) -> tuple[float, float]:
        tail = round((1 - level) / 2, 12)
        return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


TORCH = TorchResampling()
NUMPY = NumpyResampling()


def bootstrap(
    statistic: Callable[[Indices], float], size: int, resamples: int = 1000, resampling: Resampling = TORCH
) -> list[float]:
    """``statistic(indices)`` over ``resamples`` bootstrap resamples of ``size`` examples."""
    return [statistic(chosen) for chosen in resampling.draws(size, resamples)]


def bootstrap_standard_error(
    statistic: Callable[[Indices], float], size: int, resamples: int = 1000, resampling: Resampling = TORCH
) -> float:
    """The standard deviation of ``statistic(indices)`` over bootstrap resamples of ``size`` examples."""
    return resampling.standard_error(bootstrap(statistic, size, resamples, resampling))


def bootstrap_interval(
    statistic: Callable[[Indices], float],
    size: int,
    resamples: int = 1000,
    level: float = 0.95,
    resampling: Resampling = TORCH,
) -> tuple[float, float]:
    """The percentile interval of ``statistic(indices)`` over bootstrap resamples of ``size`` examples."""
    return resampling.interval(bootstrap(statistic, size, resamples, resampling), level)


def paired_difference(
    score_a: Callable[[Indices | None], float],
    score_b: Callable[[Indices | None], float],
    size: int,
    resamples: int = 1000,
    level: float = 0.95,
    resampling: Resampling = TORCH,
) -> dict[str, float]:
    """``a`` minus ``b`` on one test set: ``{"difference", "low", "high"}``, the difference on every example
    (``score(None)``) and its paired bootstrap interval (both scored on the same resampled examples)."""

    def difference(chosen: Indices | None) -> float:
        return score_a(chosen) - score_b(chosen)

    low, high = bootstrap_interval(difference, size, resamples, level, resampling)
    return {"difference": difference(None), "low": low, "high": high}


def paired_difference_over_seeds(
    pairs: Mapping[Key, tuple[Callable[[Indices], float], Callable[[Indices], float]]],
    size: int,
    resamples: int = 1000,
    level: float = 0.95,
    resampling: Resampling = NUMPY,
) -> dict[str, Any]:
    """``a`` minus ``b`` over seeds, each seed's ``(score_a, score_b)`` scoring the same ``size`` test examples:
    ``{"per_seed", "mean", "low", "high"}``, the difference per seed, their mean, and a bootstrap interval of the
    mean (one resample of the examples for every seed and both sides)."""

    def mean_difference(chosen: Indices) -> float:
        return float(np.mean([score_a(chosen) - score_b(chosen) for score_a, score_b in pairs.values()]))

    low, high = bootstrap_interval(mean_difference, size, resamples, level, resampling)
    everything = resampling.everything(size)
    return {
        "per_seed": {key: score_a(everything) - score_b(everything) for key, (score_a, score_b) in pairs.items()},
        "mean": mean_difference(everything),
        "low": low,
        "high": high,
    }


def log_ratio(
    log_differences: np.ndarray, resamples: int = 1000, level: float = 0.95, resampling: Resampling = NUMPY
) -> dict[str, float]:
    """The ratio of two geometric means from per-example log differences (``(seeds, examples)``, e.g. NLL of ``a``
    minus NLL of ``b`` per sequence: then the ratio is a's perplexity over b's when every example weighs alike):
    ``{"ratio", "low", "high", "mean_log_difference"}``, with a bootstrap interval over examples (one resample for
    every seed)."""
    stacked = np.asarray(log_differences)
    low, high = bootstrap_interval(
        lambda chosen: stacked[:, chosen].mean(), stacked.shape[1], resamples, level, resampling
    )
    return {
        "ratio": math.exp(stacked.mean()),
        "low": math.exp(low),
        "high": math.exp(high),
        "mean_log_difference": float(stacked.mean()),
    }


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The Student-t interval of the mean of ``values`` (``n - 1`` degrees of freedom): over seeds, where a bootstrap
    over test examples covers test-set noise only. Needs two values or more, and scipy (a dev extra)."""
    from scipy import stats as distributions

    if len(values) < 2:
        raise ValueError(f"a t interval needs two values or more, got {len(values)}")
    mean, spread = statistics.mean(values), statistics.stdev(values)
    half = distributions.t.ppf(0.5 + level / 2, len(values) - 1) * spread / math.sqrt(len(values))
    return mean - half, mean + half


SEED_VERDICT_MINIMUM = 3
"""Fewer seeds than this get no verdict: their spread says too little about the next seed."""


def seed_verdict(interval: tuple[float, float] | None, seeds: int) -> str:
    """``"ahead"`` / ``"behind"`` / ``"not distinguishable"`` by a seed-level interval of a difference (`t_interval`);
    ``"one seed: no verdict"`` / ``"two seeds: no verdict"`` below `SEED_VERDICT_MINIMUM` seeds or without one."""
    if interval is None or seeds < SEED_VERDICT_MINIMUM:
        return {1: "one seed: no verdict", 2: "two seeds: no verdict"}.get(seeds, "no verdict")
    low, high = interval
    return "ahead" if low > 0 else "behind" if high < 0 else "not distinguishable"


EQUIVALENCE_MARGIN = 0.5
"""The margin of `tost` in the results pages, in points of the test metric: a difference inside ±0.5 points is one
the pages call ``equivalent`` when the test says so."""

EQUIVALENCE_ALPHA = 0.05
"""The level of each one-sided test of `tost`."""


def tost(values: Sequence[float], margin: float, alpha: float = EQUIVALENCE_ALPHA) -> dict[str, Any]:
    """Two one-sided t tests (Schuirmann's TOST) that the mean of ``values`` (per-seed differences) lies inside
    ``(-margin, +margin)``: ``{"p_value", "low", "high", "equivalent"}``. ``p_value`` is the larger of the two
    one-sided p-values (H0: mean <= -margin; H0: mean >= +margin), ``equivalent`` is ``p_value < alpha``, and
    ``(low, high)`` is the ``1 - 2 alpha`` t interval of the mean (90% for alpha 0.05), which lies inside the margins
    exactly when the test says equivalent. Needs two values or more and a positive margin, and scipy (a dev extra)."""
    from scipy import stats as distributions

    if len(values) < 2:
        raise ValueError(f"an equivalence test needs two values or more, got {len(values)}")
    if not margin > 0:
        raise ValueError(f"an equivalence margin must be positive, got {margin}")
    mean, spread = statistics.mean(values), statistics.stdev(values)
    degrees = len(values) - 1
    if spread == 0:  # every seed the same difference: no doubt about the mean
        p_value = 0.0 if -margin < mean < margin else 1.0
        low = high = mean
    else:
        error = spread / math.sqrt(len(values))
        above_lower = float(distributions.t.sf((mean + margin) / error, degrees))  # H0: mean <= -margin
        below_upper = float(distributions.t.cdf((mean - margin) / error, degrees))  # H0: mean >= +margin
        p_value = max(above_lower, below_upper)
        half = distributions.t.ppf(1 - alpha, degrees) * error
        low, high = mean - half, mean + half
    return {"p_value": p_value, "low": low, "high": high, "equivalent": p_value < alpha}


VERDICTS = ("ahead", "behind", "not distinguishable", "equivalent")
"""The words a comparison over seeds may be given (`verdict`)."""


def verdict(values: Sequence[float], margin: float | None = EQUIVALENCE_MARGIN, level: float = 0.95) -> str | None:
    """The verdict on per-seed differences (a minus b): ``None`` below `SEED_VERDICT_MINIMUM` seeds; ``"ahead"`` /
    ``"behind"`` when the ``level`` t interval over seeds (`t_interval`) excludes 0; otherwise ``"equivalent"`` when
    `tost` at ``margin`` (alpha ``(1 - level)``, 0.05 for 95%) says so, else ``"not distinguishable"``. A difference
    the interval detects is never hidden behind ``equivalent``; ``margin=None`` (no margin stated for this unit)
    never says ``equivalent``."""
    if len(values) < SEED_VERDICT_MINIMUM:
        return None
    low, high = t_interval(values, level)
    if low > 0 or high < 0:
        return "ahead" if low > 0 else "behind"
    if margin is not None and tost(values, margin, alpha=round(1 - level, 12))["equivalent"]:
        return "equivalent"
    return "not distinguishable"
