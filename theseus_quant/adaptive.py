"""Adaptive splitting (BinaryBERT §3.3): split only the layers whose binarization hurts most,
under a budget.

`measure_sensitivity` binarizes one ternary layer at a time and records the drop in a metric;
`split_costs` gives what splitting each layer adds to the exported model, in bits;
`choose_splits` solves the resulting 0/1 knapsack exactly. Then
``split_ternary_(model, choice.names)`` and ``binarize_(model)`` for the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from torch import nn

from .convert import _children
from .layers import QuantEmbedding, QuantLinear


@dataclass(frozen=True)
class SplitChoice:
    """The layers to split (``names``, in the order given), the total sensitivity they recover,
    and the bits they cost out of the budget."""

    names: tuple[str, ...]
    recovered: float
    cost: int
    budget: int

    def __str__(self) -> str:
        return (
            f"split {len(self.names)} layers ({self.cost:,} of {self.budget:,} bits), "
            f"recovering {self.recovered:.4g}: {', '.join(self.names) or 'none'}"
        )


def choose_splits(sensitivities: Mapping[str, float], costs: Mapping[str, int], budget: int) -> SplitChoice:
    """The subset of layers maximising total sensitivity with total cost ≤ ``budget`` (exact 0/1 knapsack).

    Solved by dynamic programming over Pareto-optimal (cost, value) pairs, exact for any integer
    costs (no rounding of the budget). Layers with a sensitivity ≤ 0 are never worth a bit and are
    left out; among equally good subsets the cheapest is returned.

    Args:
        sensitivities: Per layer name, the metric drop when it is binarized instead of split
            (from `measure_sensitivity`); finite numbers.
        costs: Per layer name (the same names), the bits splitting it adds (from `split_costs`);
            non-negative integers.
        budget: Bits available for splits; a non-negative integer.

    Raises:
        ValueError: Mismatched names, negative or non-integer costs or budget, non-finite sensitivities.
    """
    if set(sensitivities) != set(costs):
        raise ValueError(f"sensitivities and costs name different layers: {sorted(set(sensitivities) ^ set(costs))}")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget must be a non-negative integer number of bits, got {budget!r}")
    for name in sensitivities:
        cost, value = costs[name], sensitivities[name]
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
            raise ValueError(f"cost of {name!r} must be a non-negative integer, got {cost!r}")
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"sensitivity of {name!r} must be a finite number, got {value!r}")
    # front: list of (cost, value, chosen names) with costs and values both strictly increasing.
    front: list[tuple[int, float, tuple[str, ...]]] = [(0, 0.0, ())]
    for name in sensitivities:
        cost, value = costs[name], float(sensitivities[name])
        if value <= 0 or cost > budget:
            continue
        extended = [(c + cost, v + value, (*chosen, name)) for c, v, chosen in front if c + cost <= budget]
        merged = sorted(front + extended, key=lambda item: (item[0], -item[1]))
        front = []
        for item in merged:
            if not front or item[1] > front[-1][1]:
                front.append(item)
    cost, value, chosen = front[-1]
    order = {name: index for index, name in enumerate(sensitivities)}
    return SplitChoice(tuple(sorted(chosen, key=order.__getitem__)), value, cost, budget)


def _ternary_layers(model: nn.Module) -> dict[str, QuantLinear | QuantEmbedding]:
    return {
        name: child
        for _, _, name, child in _children(model)
        if isinstance(child, (QuantLinear, QuantEmbedding)) and child.weight_bits == 2
    }


def _check_names(model: nn.Module, names: Iterable[str] | None) -> dict[str, QuantLinear | QuantEmbedding]:
    layers = _ternary_layers(model)
    if names is None:
        return layers
    if isinstance(names, str):
        raise TypeError("names must be a list of qualified layer names")
    names = list(names)
    unknown = [name for name in names if name not in layers]
    if unknown:
        raise ValueError(f"not ternary layers of this model: {unknown}; ternary layers: {sorted(layers)}")
    return {name: layers[name] for name in names}


def split_costs(model: nn.Module, names: Iterable[str] | None = None) -> dict[str, int]:
    """Bits that splitting each ternary layer adds to the packed export, against binarizing it:
    a second set of 1-bit codes, a second float32 scale per group, and a second float32 bias.
    (default ``names``: every ternary layer)"""
    costs = {}
    for name, layer in _check_names(model, names).items():
        groups = 1 if layer.granularity == "tensor" else layer.weight.shape[0]
        bias = getattr(layer, "bias", None)
        costs[name] = layer.weight.numel() + 32 * groups + (32 * bias.numel() if bias is not None else 0)
    return costs


def measure_sensitivity(
    model: nn.Module, names: Iterable[str] | None, evaluate: Callable[[nn.Module], float]
) -> dict[str, float]:
    """Per ternary layer, ``evaluate(model)`` with every layer ternary minus the same with only
    that layer binarized (BWN of its latent weight): how much binarizing it costs (higher: more
    worth splitting).

    Args:
        model: A ternary model (after `quantize_` with ``weight_bits=2``); it is restored to
            ternary after each measurement, also when ``evaluate`` raises.
        names: Qualified names of the ternary layers to measure. (``None``: all)
        evaluate: Returns the metric (higher is better) of the model; it should put the model in
            eval mode and run without gradients as it sees fit.

    Returns:
        ``{name: drop}`` in the order of ``names``.
    """
    layers = _check_names(model, names)
    base = float(evaluate(model))
    drops = {}
    for name, layer in layers.items():
        layer.weight_bits = 1
        try:
            drops[name] = base - float(evaluate(model))
        finally:
            layer.weight_bits = 2
    return drops
