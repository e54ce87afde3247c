"""Schedules are pure functions of the step that stay in [0, 1]."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import theseus_core as th

probabilities = st.floats(0, 1)
slopes = st.floats(1e-6, 10)
steps = st.integers(0, 10**7)


@given(probabilities, slopes, steps)
def test_every_schedule_stays_in_the_unit_interval(base, k, step):
    for schedule in (th.ConstantSchedule(base), th.LinearSchedule(base, k), th.AntiCurriculumSchedule(base, k)):
        assert 0.0 <= schedule(step) <= 1.0


@given(probabilities, slopes, steps)
def test_the_curriculum_is_monotone_and_the_anti_curriculum_mirrors_it(base, k, step):
    curriculum, anti = th.LinearSchedule(base, k), th.AntiCurriculumSchedule(base, k)
    assert curriculum(step) <= curriculum(step + 1)
    assert anti(step) == 1.0 - curriculum(step)
    assert curriculum(step) == min(1.0, k * step + base)


@given(probabilities, st.floats(1e-4, 10))
def test_the_curriculum_reaches_one_at_step_at_one(base, k):
    schedule = th.LinearSchedule(base, k)
    at_one = schedule.step_at_one
    assert schedule(at_one) == 1.0
    assert at_one == 0 or schedule(at_one - 1) < 1.0
    assert abs(at_one - (1 - base) / k) <= 1  # t = (1 - b) / k, up to rounding to a step


# Within one ulp of 1 a base cannot be told apart from k·1 + base, so the domain stops short of it.
@given(st.integers(1, 10**6), st.floats(0, 0.999) | st.just(1.0))
def test_reaching_one_at_takes_that_many_steps(steps_to_one, base):
    schedule = th.LinearSchedule.reaching_one_at(steps_to_one, base=base)
    assert schedule(0) == base
    assert schedule.step_at_one == (0 if base == 1 else steps_to_one)


def test_rate_zero_and_one_are_allowed():
    assert th.ConstantSchedule(0.0)(10) == 0.0 and th.ConstantSchedule(0.0).step_at_one is None
    assert th.ConstantSchedule(1.0).step_at_one == 0
    assert th.AntiCurriculumSchedule(0.0, 0.1).step_at_one == 0
    assert th.AntiCurriculumSchedule(0.3, 0.1).step_at_one is None


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: th.ConstantSchedule(1.5), r"ConstantSchedule.rate must be a number in \[0, 1\], got 1.5"),
        (lambda: th.ConstantSchedule(math.nan), r"ConstantSchedule.rate must be a number in \[0, 1\], got nan"),
        (lambda: th.LinearSchedule(-0.1, 0.1), r"LinearSchedule.base must be a number in \[0, 1\]"),
        (lambda: th.LinearSchedule(0.3, 0.0), r"LinearSchedule.k must be a finite number > 0, got 0.0"),
        (lambda: th.LinearSchedule(0.3, -1.0), r"LinearSchedule.k must be a finite number > 0"),
        (lambda: th.LinearSchedule(0.3, math.inf), r"LinearSchedule.k must be a finite number > 0, got inf"),
        (lambda: th.AntiCurriculumSchedule(0.3, math.nan), r"AntiCurriculumSchedule.k must be a finite number"),
        (lambda: th.LinearSchedule.reaching_one_at(0), r"steps must be an integer >= 1, got 0"),
        (lambda: th.LinearSchedule(0.3, True), r"LinearSchedule.k must be a finite number > 0, got True"),
        (lambda: th.LinearSchedule.reaching_one_at(True), r"steps must be an integer >= 1, got True"),
    ],
)
def test_invalid_schedules_raise(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("step", [-1, 1.5, "3", True])
def test_schedules_take_only_non_negative_integer_steps(step):
    with pytest.raises(ValueError, match="integer >= 0"):
        th.LinearSchedule(0.3, 0.1)(step)
