"""Ternary weight splitting (TWS, BinaryBERT §3.1): a ternary layer becomes two binary layers with
the same output, so that a half-width ternary model becomes a full-width binary one that starts
exactly where the ternary one was.

The split of a latent weight ``w`` (per scale group), with ternary ŵ = TWN(w) of scale α,
I = {ŵ ≠ 0} and the rest J ∪ K (J: w ≥ 0, K: w < 0; exact zeros join J so that every binary
weight is ±α', never 0)::

    w₁ = a·w      on I,   w + b  on J,   b      on K
    w₂ = (1−a)·w  on I,   −b     on J,   w − b  on K

keeps ``w₁ + w₂ = w`` everywhere. On I both halves have w's sign when 0 < a < 1; on J ∪ K they
have opposite signs when b > 0. Then BWN(w₁) + BWN(w₂) = TWN(w) iff both halves have scale
mean|wᵢ| = α/2, which fixes

    b = (α·|J∪K| − Σ_{J∪K}|w|) / (2·|J∪K|)         (= (α·n − Σ|w|) / (2(|J|+|K|)), since α·|I| = Σ_I|w|)
    a = (Σ_I|w| − D) / (2·Σ_I|w|),   D = Σ_J|w| − Σ_K|w|

b > 0 always holds (every |w| on J ∪ K is ≤ Δ < α). 0 < a < 1 needs |D| < Σ_I|w|, which fails
for skewed groups (most weights small and of one sign, a few large). There, and only there, J ∪ K
is re-partitioned between the halves: sorted by magnitude and alternated, so that the half that
carries each element's magnitude takes turns and |D| ≤ max_{J∪K}|w| ≤ Δ < Σ_I|w|. Degenerate
groups: J ∪ K empty gives b = 0 (unused), a = 1/2; an all-zero group splits into two zero halves.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .convert import _check_hooks, _check_not_bypassed, _children
from .layers import BinarySplitEmbedding, BinarySplitLinear, QuantEmbedding, QuantLinear
from .quantizers import Granularity, _grouped, _ternary, binarize, ternarize


def split_ternary_weight(
    weight: torch.Tensor, granularity: Granularity = "tensor"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Splits a latent weight into ``(w1, w2)`` with ``w1 + w2 = weight`` and
    ``binarize(w1) + binarize(w2) == ternarize(weight)`` (to float rounding), per scale group.

    Computed in float64 and returned in ``weight``'s dtype. See the module docstring for the
    formulas and the degenerate cases.
    """
    grouped = _grouped(weight.detach(), granularity)
    # I and α exactly as the forward pass computes them (in the weight's dtype: an element within
    # rounding of Δ must fall on the same side here as in `ternarize`), the rest in float64.
    codes, alpha = _ternary(grouped)
    flat = grouped.to(torch.float64)
    inner = codes != 0  # I
    rest = ~inner  # J ∪ K
    magnitude = flat.abs()
    sum_inner = (magnitude * inner).sum(dim=1, keepdim=True)
    count_rest = rest.sum(dim=1, keepdim=True)
    sum_rest = (magnitude * rest).sum(dim=1, keepdim=True)

    first_carries = _carrying_half(flat, rest, sum_inner)
    difference = _imbalance(first_carries, magnitude, rest)
    a = torch.where(sum_inner > 0, (sum_inner - difference) / (2 * sum_inner.clamp(min=1e-300)), 0.5)
    b = torch.where(count_rest > 0, (alpha * count_rest - sum_rest) / (2 * count_rest.clamp(min=1)), 0.0)
    shift = torch.where(flat >= 0, b, -b)  # carrying half: w + sign(w)·b; other half: −sign(w)·b
    w1 = torch.where(inner, a * flat, torch.where(first_carries, flat + shift, -shift))
    w2 = torch.where(inner, (1 - a) * flat, torch.where(first_carries, -shift, flat + shift))
    return w1.reshape(weight.shape).to(weight.dtype), w2.reshape(weight.shape).to(weight.dtype)


def _imbalance(first_carries: torch.Tensor, magnitude: torch.Tensor, rest: torch.Tensor) -> torch.Tensor:
    """D per group: Σ|w| over J ∪ K elements whose magnitude the first half carries, minus the rest."""
    return (torch.where(first_carries, magnitude, -magnitude) * rest).sum(dim=1, keepdim=True)


def _carrying_half(flat: torch.Tensor, rest: torch.Tensor, sum_inner: torch.Tensor) -> torch.Tensor:
    """Per element of J ∪ K, whether the first half carries its magnitude (True) or the second.

    The reference assignment (J: first, K: second) where it keeps 0 < a < 1; elsewhere the
    magnitudes alternate between the halves in descending order (ranks 0, 2, 4, ... to the first).
    """
    magnitude = flat.abs()
    first_carries = flat >= 0
    feasible = _imbalance(first_carries, magnitude, rest).abs() < sum_inner
    if bool(feasible.all()):
        return first_carries
    key = torch.where(rest, magnitude, torch.full_like(magnitude, -1.0))
    order = key.argsort(dim=1, descending=True, stable=True)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(flat.shape[1], device=flat.device).expand_as(order))
    return torch.where(feasible, first_carries, rank % 2 == 0)


@dataclass(frozen=True)
class SplitRecord:
    """What `split_ternary_` did: the qualified names of the layers split, and of the ternary
    layers left as they were (not in ``names``)."""

    split: tuple[str, ...]
    kept_ternary: tuple[str, ...]

    def __str__(self) -> str:
        text = f"split_ternary_: {len(self.split)} ternary layers → binary pairs: {', '.join(self.split)}"
        return text + (f"\n  left ternary: {', '.join(self.kept_ternary)}" if self.kept_ternary else "")


def _split_layer(layer: QuantLinear | QuantEmbedding, name: str) -> nn.Module:
    w1, w2 = split_ternary_weight(layer.weight, layer.granularity)
    halves = []
    for part in (w1, w2):
        half = copy.deepcopy(layer)  # carries the activation quantizer's state, device, dtype, mode
        half.weight_bits = 1
        with torch.no_grad():
            half.weight.copy_(part)
            if getattr(half, "bias", None) is not None:
                half.bias.mul_(0.5)
        halves.append(half)
    # Trust by running: the promise of TWS, checked on the weights before anything is swapped.
    with torch.no_grad():
        summed = binarize(w1, layer.granularity) + binarize(w2, layer.granularity)
        expected = ternarize(layer.weight, layer.granularity)
    scale = expected.abs().max().clamp(min=1e-30)
    if not torch.allclose(summed, expected, rtol=1e-5, atol=1e-5 * float(scale)):
        raise RuntimeError(f"ternary weight splitting of {name} broke its quantized weight; please report this")
    pair = BinarySplitLinear if isinstance(layer, QuantLinear) else BinarySplitEmbedding
    split = pair(*halves)
    split.train(layer.training)
    return split


def split_ternary_(module: nn.Module, names: Sequence[str] | None = None) -> SplitRecord:
    """Ternary weight splitting, in place: each ternary `QuantLinear` / `QuantEmbedding` inside
    ``module`` becomes a `BinarySplitLinear` / `BinarySplitEmbedding` with the same output.

    Each half is a binary copy of the layer (same granularity, half the bias, its own copy of the
    activation quantizer with the same state); fine-tune the result (BinaryBERT §3.2). The pairs
    are new module objects: attributes set on the ternary layers do not carry over.

    Args:
        module: The model, changed in place.
        names: Qualified names of the ternary layers to split (adaptive splitting, see
            `choose_splits`); the others stay ternary (`binarize_` them if the model must be
            binary). (default: every ternary layer)

    Returns:
        A `SplitRecord`.

    Raises:
        TypeError: ``names`` is a string, not a list of names.
        ValueError: No ternary layer, or ``names`` naming something that is not a ternary layer
            of ``module``, a layer carrying hooks (the pair would not have them), a layer whose
            parent reads its weight directly (`theseus_quant.convert.WEIGHT_READERS`); the model
            is then unchanged.
    """
    edges = [edge for edge in _children(module) if isinstance(edge[3], (QuantLinear, QuantEmbedding))]
    ternary = [edge for edge in edges if edge[3].weight_bits == 2]
    if isinstance(module, (QuantLinear, QuantEmbedding)):
        raise ValueError("split_ternary_ works on the layers inside a model; the root is a quantized layer")
    if not ternary:
        raise ValueError(f"no ternary layer in this {type(module).__name__}; quantize_(model, weight_bits=2) first")
    available = {name for _, _, name, _ in ternary}
    if names is not None:
        if isinstance(names, str):
            raise TypeError("names must be a list of qualified layer names")
        unknown = [name for name in names if name not in available]
        if unknown or not names:
            raise ValueError(
                f"not ternary layers of this model: {unknown or 'an empty list'}; ternary: {sorted(available)}"
            )
        chosen_ids = {id(child) for _, _, name, child in ternary if name in set(names)}
    else:
        chosen_ids = {id(child) for _, _, _, child in ternary}
    chosen = [edge for edge in ternary if id(edge[3]) in chosen_ids]
    _check_not_bypassed(chosen, "split_ternary_")
    _check_hooks(chosen, "split_ternary_")
    splits: dict[int, nn.Module] = {}
    for _, _, name, child in ternary:
        if id(child) in chosen_ids and id(child) not in splits:
            splits[id(child)] = _split_layer(child, name)
    # --- nothing above this line changes the model ---
    for parent, key, _, child in ternary:
        if id(child) in splits:
            parent._modules[key] = splits[id(child)]
    done = tuple(dict.fromkeys(name for _, _, name, child in ternary if id(child) in splits))
    kept = tuple(dict.fromkeys(name for _, _, name, child in ternary if id(child) not in splits))
    return SplitRecord(done, kept)


def binarize_(module: nn.Module, names: Sequence[str] | None = None) -> tuple[str, ...]:
    """Turns ternary layers into binary ones directly (BWN of the latent weight: the paper's weak
    baseline, and what adaptive splitting does with the layers it does not split), in place.
    Returns the qualified names changed.

    Raises:
        TypeError: ``names`` is a string, not a list of names.
        ValueError: ``names`` names something that is not a ternary layer; the model is then
            unchanged.
    """
    ternary = {
        name: child
        for _, _, name, child in _children(module)
        if isinstance(child, (QuantLinear, QuantEmbedding)) and child.weight_bits == 2
    }
    if isinstance(names, str):
        raise TypeError(f"names must be a list of qualified layer names, got the string {names!r}")
    chosen = list(ternary) if names is None else list(names)
    unknown = [name for name in chosen if name not in ternary]
    if unknown:
        raise ValueError(f"not ternary layers of this model: {unknown}")
    for name in chosen:
        ternary[name].weight_bits = 1
    return tuple(chosen)
