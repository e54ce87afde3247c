"""The comparison of `benchmarks.fsdp_check` on records and logits made up here (no SmolLM2): it finds a planted
difference where it is, and refuses runs that did not log the same steps."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from benchmarks import fsdp_check

ALONE = [
    {"phase": "replacing", "step": 1, "loss": 10.0, "grad_norm": 60.0, "rate": 0.3},
    {"phase": "replacing", "step": 2, "loss": 9.0, "rate": 0.5, "dev": {"nll": 8.0, "perplexity": math.exp(8.0)}},
    {"phase": "baseline:truncated", "step": 1, "loss": 12.0, "grad_norm": 80.0},
    {"phase": "baseline:truncated", "step": 2, "loss": 11.0, "grad_norm": 70.0, "dev": {"nll": 10.0}},
]


def sharded(records: list[dict] = ALONE) -> list[dict]:
    """``records`` as a two-process run logs them: the rank fingerprints at each evaluation (no routes in a
    baseline's)."""
    found = copy.deepcopy(records)
    for record in found:
        if "dev" in record:
            routes = "abc" if record["phase"] == "replacing" else None
            record["ranks"] = [{"routes": routes, "forward_rng": "x"}, {"routes": routes, "forward_rng": "y"}]
    return found


def test_equal_runs_differ_nowhere_and_their_routes_agree():
    found = fsdp_check.compare_records(ALONE, sharded())
    assert found["max"] == {"loss": 0.0, "grad_norm": 0.0, "dev": 0.0}
    assert found["routes"] == {"evaluations": 1, "ranks_agree": True, "same_steps_without_gradient": True}
    assert [row["grad_norm"] is None for row in found["records"]] == [False, True, False, False]


def test_a_planted_difference_is_found_at_its_record_and_relative_to_one_process():
    other = sharded()
    other[2]["loss"] *= 1 + 2e-3
    other[3]["grad_norm"] = 70.0 * (1 - 5e-4)
    other[1]["dev"]["perplexity"] *= 1 + 3e-3
    found = fsdp_check.compare_records(ALONE, other)
    assert found["max"]["loss"] == pytest.approx(2e-3)
    assert [row["loss"][2] > 0 for row in found["records"]] == [False, False, True, False]
    assert found["max"]["grad_norm"] == pytest.approx(5e-4)
    assert found["max"]["dev"] == pytest.approx(3e-3) and found["records"][1]["dev"]["nll"] == 0.0


def test_routes_that_differ_between_ranks_or_steps_are_reported():
    other = sharded()
    other[1]["ranks"][1]["routes"] = "abd"
    other[0].pop("grad_norm")  # a step on every predecessor in one run only
    found = fsdp_check.compare_records(ALONE, other)
    assert not found["routes"]["ranks_agree"] and not found["routes"]["same_steps_without_gradient"]
    assert found["max"]["grad_norm"] == math.inf


def test_runs_of_other_steps_or_evaluations_are_refused():
    with pytest.raises(ValueError, match="different stages or steps"):
        fsdp_check.compare_records(ALONE, sharded(ALONE[:3]))
    other = sharded()
    other[3].pop("dev")
    with pytest.raises(ValueError, match="evaluated differently at step 2 of baseline:truncated"):
        fsdp_check.compare_records(ALONE, other)


def test_logits_are_compared_in_absolute_and_relative_to_the_largest():
    one = torch.tensor([[1.0, -20.0], [3.0, 4.0]], dtype=torch.float64)
    found = fsdp_check.compare_logits(one, one + torch.tensor([[0.0, 0.0], [0.0, 0.01]], dtype=torch.float64))
    assert found["max_abs"] == pytest.approx(0.01) and found["max_relative"] == pytest.approx(0.01 / 20)
    assert not found["allclose"]  # 0.01 > 1e-3 + 1e-3 × 4
    assert fsdp_check.compare_logits(one, one * (1 + 5e-4))["allclose"]


def test_the_short_config_replaces_every_step_count_and_keeps_the_recipes_methods():
    from theseus_zoo.recipes import get_recipe

    recipe = get_recipe(fsdp_check.RECIPE).with_overrides(fsdp_check.overrides(6))
    assert (recipe.replacing.steps, recipe.replacing.eval_every, recipe.steps_to_one) == (6, 3, 4)
    assert recipe.theseus and recipe.baselines == ("truncated",)
    assert recipe.options["dev_sequences"] == recipe.options["test_sequences"] == 16
