"""Replacing-rate schedules: pure functions of the optimizer step.

A schedule holds no counter: ``schedule(step)`` depends on ``step`` alone, so a
resumed run only needs its step back (BERT-of-Theseus §3.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .checks import check_probability, is_integral, is_real


def _check_step(step: int) -> int:
    if not is_integral(step) or step < 0:
        raise ValueError(f"a schedule is evaluated at an optimizer step, an integer >= 0; got {step!r}")
    return int(step)


@dataclass(frozen=True)
class ConstantSchedule:
    """p(t) = ``rate`` for every step (the paper finds 0.5–0.7 works; 0 and 1 are allowed)."""

    rate: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", check_probability("ConstantSchedule.rate", self.rate))

    def __call__(self, step: int) -> float:
        _check_step(step)
        return self.rate

    @property
    def step_at_one(self) -> int | None:
        """First step with p = 1 (0 for a rate of 1, else ``None``)."""
        return 0 if self.rate == 1.0 else None


@dataclass(frozen=True)
class LinearSchedule:
    """The curriculum p(t) = min(1, k·t + base) (BERT-of-Theseus eq. 5).

    Args:
        base: The basic replacing rate b at step 0, in [0, 1].
        k: The slope per optimizer step, > 0. `reaching_one_at` picks k from the
            step at which p should reach 1, as the paper's grid does.
    """

    base: float
    k: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", check_probability(f"{type(self).__name__}.base", self.base))
        if not is_real(self.k) or not math.isfinite(self.k) or self.k <= 0:
            raise ValueError(f"{type(self).__name__}.k must be a finite number > 0, got {self.k!r}")
        object.__setattr__(self, "k", float(self.k))

    @classmethod
    def reaching_one_at(cls, steps: int, base: float = 0.3) -> LinearSchedule:
        """The curriculum from ``base`` that reaches p = 1 after ``steps`` optimizer steps."""
        if not is_integral(steps) or steps < 1:
            raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
        base = check_probability(f"{cls.__name__}.base", base)
        if base == 1.0:
            return cls(base=base, k=1.0)
        k = (1.0 - base) / steps
        while k * steps + base < 1.0:  # floating-point rounding must not cost an extra step
            k = math.nextafter(k, math.inf)
        return cls(base=base, k=k)

    def _curriculum(self, step: int) -> float:
        return min(1.0, self.k * _check_step(step) + self.base)

    def __call__(self, step: int) -> float:
        return self._curriculum(step)

    @property
    def step_at_one(self) -> int:
        """The first step with p = 1, where successor fine-tuning begins: ⌈(1 − b)/k⌉,
        corrected for floating-point rounding."""
        step = max(0, math.ceil((1.0 - self.base) / self.k))
        while self._curriculum(step) < 1.0:
            step += 1
        while step > 0 and self._curriculum(step - 1) >= 1.0:
            step -= 1
        return step


@dataclass(frozen=True)
class AntiCurriculumSchedule(LinearSchedule):
    """p(t) = 1 − min(1, k·t + base): the paper's anti-curriculum baseline (Table 6)."""

    def __call__(self, step: int) -> float:
        return 1.0 - self._curriculum(step)

    @property
    def step_at_one(self) -> int | None:
        """First step with p = 1: 0 when base is 0, else never (``None``)."""
        return 0 if self.base == 0.0 else None
