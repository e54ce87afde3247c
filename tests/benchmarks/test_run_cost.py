"""`benchmarks.run_cost`: a whole run's training cost per method, stage by stage, and the steps that match it."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import run_cost


@given(st.integers(1, 10_000), st.integers(1, 50))
def test_sampled_steps_lie_in_the_stage_spread_evenly(steps, samples):
    at = run_cost.sampled_steps(steps, samples)
    assert at == sorted(set(at)) and all(0 <= step < steps for step in at)
    assert len(at) == min(steps, samples)


def test_matched_steps_give_the_reference_cost():
    stages = [{"steps": 10, "seconds": 2.0}, {"steps": 100, "seconds": 50.0}]  # 0.5 s a step in the last stage
    assert run_cost.matched_steps(stages, 52.0) == 100  # its own cost: its own steps
    assert run_cost.matched_steps(stages, 102.0) == 200
    assert run_cost.matched_steps(stages[1:], 5.0) == 10
    assert run_cost.matched_steps(stages, 1.0) == 1  # never below one step


def test_every_stage_of_a_method_is_timed_and_the_reference_matches_its_own_steps(tmp_path):
    arguments = ["--recipe", "toy", "--methods", "theseus+warmup+kd", "kd", "truncated", "--rounds", "1"]
    assert run_cost.main([*arguments, "--samples", "2", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "run-cost-toy.json").read_text())
    assert results["reference"] == "theseus+warmup+kd" and results["samples"] == 2
    variant = results["methods"]["theseus+warmup+kd"]
    assert [stage["stage"] for stage in variant["stages"]] == ["warmup", "replacing"]
    warmup, replacing = variant["stages"]
    assert warmup["rates"] == [0.0, 0.0] and replacing["rates"][0] < replacing["rates"][-1] <= 1.0  # the curriculum
    assert variant["matched_steps"] == replacing["steps"] and variant["ratio_to_reference"] == 1.0
    assert variant["run_seconds"] == pytest.approx(sum(stage["seconds"] for stage in variant["stages"]))
    kd = results["methods"]["kd"]
    assert [stage["stage"] for stage in kd["stages"]] == ["baseline:kd"]
    expected = variant["run_seconds"] / (kd["stages"][0]["seconds"] / kd["stages"][0]["steps"])
    assert kd["matched_steps"] == max(1, round(expected))


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        run_cost.main(["--recipe", "toy"])
    with pytest.raises(SystemExit):
        run_cost.main(["--recipe", "toy", "--methods", "kd", "--reference", "truncated"])
    assert "--reference truncated is not one of --methods" in capsys.readouterr().err
