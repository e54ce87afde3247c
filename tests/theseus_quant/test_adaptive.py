"""Adaptive splitting: the knapsack is exact, sensitivities are what binarizing one layer costs."""

import copy
import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from theseus_core.testing import ToyStack
from theseus_quant import adaptive
from theseus_quant.convert import quantize_
from theseus_quant.layers import QuantLinear
from theseus_quant.tws import binarize_, split_ternary_


def brute_force(sensitivities, costs, budget):
    best = 0.0
    for size in range(len(costs) + 1):
        for subset in itertools.combinations(list(costs), size):
            if sum(costs[name] for name in subset) <= budget:
                best = max(best, sum(sensitivities[name] for name in subset))
    return best


@st.composite
def knapsacks(draw):
    count = draw(st.integers(0, 8))
    names = [f"layer{i}" for i in range(count)]
    sensitivities = {name: draw(st.floats(-1, 10, allow_nan=False)) for name in names}
    costs = {name: draw(st.integers(0, 60)) for name in names}
    return sensitivities, costs, draw(st.integers(0, 200))


@given(knapsacks())
def test_choose_splits_is_an_exact_knapsack(problem):
    sensitivities, costs, budget = problem
    choice = adaptive.choose_splits(sensitivities, costs, budget)
    assert choice.cost == sum(costs[name] for name in choice.names) <= budget
    assert math.isclose(choice.recovered, sum(sensitivities[name] for name in choice.names), abs_tol=1e-9)
    assert math.isclose(choice.recovered, brute_force(sensitivities, costs, budget), abs_tol=1e-9)
    assert list(choice.names) == [name for name in sensitivities if name in choice.names], "not in the given order"


def test_choose_splits_rejects_bad_input():
    with pytest.raises(ValueError, match="different layers"):
        adaptive.choose_splits({"a": 1.0}, {"b": 1}, 10)
    with pytest.raises(ValueError, match="budget"):
        adaptive.choose_splits({"a": 1.0}, {"a": 1}, -1)
    with pytest.raises(ValueError, match="cost"):
        adaptive.choose_splits({"a": 1.0}, {"a": 1.5}, 10)
    with pytest.raises(ValueError, match="finite"):
        adaptive.choose_splits({"a": math.nan}, {"a": 1}, 10)
    assert "layers" in str(adaptive.choose_splits({"a": 1.0}, {"a": 1}, 1))


def ternary_toy(seed=0):
    torch.manual_seed(seed)
    model = ToyStack(num_blocks=2, dropout=0.0).eval()
    reference = copy.deepcopy(model)
    quantize_(model, 2, None, skip=["head"])
    inputs = model.example_inputs(batch_size=16)
    with torch.no_grad():
        target = reference(*inputs)

    def evaluate(candidate):
        with torch.no_grad():
            return -torch.nn.functional.mse_loss(candidate(*inputs), target).item()

    return model, evaluate


def test_sensitivity_is_the_drop_when_only_that_layer_is_binarized():
    model, evaluate = ternary_toy()
    drops = adaptive.measure_sensitivity(model, None, evaluate)
    assert list(drops) == [name for name, m in model.named_modules() if isinstance(m, QuantLinear)]
    assert all(m.weight_bits == 2 for m in model.modules() if isinstance(m, QuantLinear)), "not restored"
    for name in ("blocks.0.fc1", "embed"):
        binary = copy.deepcopy(model)
        binarize_(binary, [name])
        assert drops[name] == pytest.approx(evaluate(model) - evaluate(binary), abs=1e-12)


def test_sensitivity_restores_the_layer_when_evaluate_raises():
    model, _ = ternary_toy()

    def failing(candidate):
        if any(getattr(m, "weight_bits", 2) == 1 for m in candidate.modules()):
            raise RuntimeError("boom")
        return 0.0

    with pytest.raises(RuntimeError, match="boom"):
        adaptive.measure_sensitivity(model, ["blocks.1.fc2"], failing)
    assert model.blocks[1].fc2.weight_bits == 2
    with pytest.raises(ValueError, match="not ternary layers"):
        adaptive.measure_sensitivity(model, ["head"], failing)


def test_adaptive_splitting_end_to_end():
    model, evaluate = ternary_toy()
    drops = adaptive.measure_sensitivity(model, None, evaluate)
    costs = adaptive.split_costs(model)
    assert costs["blocks.0.fc1"] == 16 * 32 + 32 + 32 * 32  # codes, scale, bias
    budget = sum(costs.values()) // 2
    choice = adaptive.choose_splits(drops, costs, budget)
    split_ternary_(model, choice.names)
    binarize_(model)
    assert all(m.weight_bits == 1 for m in model.modules() if isinstance(m, QuantLinear))
    assert choice.cost <= budget
