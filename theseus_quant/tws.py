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
from dataclasses import dataclass, field

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
    layers left as they were (not in ``names``), each layer once (under its first name);
    ``aliases`` maps the further names of a layer reachable under several to its first."""

    split: tuple[str, ...]
    kept_ternary: tuple[str, ...]
    aliases: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        also = {first: [n for n, f in self.aliases.items() if f == first] for first in self.split}
        listed = ", ".join(name + (f" (also {', '.join(also[name])})" if also[name] else "") for name in self.split)
        text = f"split_ternary_: {len(self.split)} ternary layers → binary pairs: {listed}"
        return text + (f"\n  left ternary: {', '.join(self.kept_ternary)}" if self.kept_ternary else "")


def _check_split(layer: QuantLinear | QuantEmbedding, w1: torch.Tensor, w2: torch.Tensor, name: str) -> None:
    """Trust by running: the promise of TWS, BWN(w₁) + BWN(w₂) = TWN(w), checked per scale group before anything is
    swapped. The halves are rounded to the weight's dtype, which moves each half's scale by up to half an ulp, and
    the two scales are summed in that dtype: a few ulps of α (4·eps of the dtype, at least 1e-5: bf16 2⁻⁵, fp16 2⁻⁸
    of α), plus as many of the dtype's subnormal steps where α is that small. A broken split misses by a large part
    of α."""
    granularity = layer.granularity
    with torch.no_grad():
        summed = binarize(w1, granularity) + binarize(w2, granularity)
        expected = ternarize(layer.weight, granularity)
    info = torch.finfo(layer.weight.dtype)
    tolerance = max(1e-5, 4 * info.eps)
    error = _grouped((summed.double() - expected.double()).abs(), granularity)
    alpha = _grouped(expected.double().abs(), granularity).amax(dim=1, keepdim=True)
    if bool((error > tolerance * (alpha + info.tiny)).any()):
        raise RuntimeError(f"ternary weight splitting of {name} broke its quantized weight; please report this")


def _check_ties(module: nn.Module, layers: dict[int, tuple[str, QuantLinear | QuantEmbedding]]) -> None:
    """Raises ``ValueError`` when a parameter of a layer to split is tied to a module that is not split with it, or
    two layers to split share a weight they quantize per different groups: the split would untie them."""
    holders: dict[int, list[tuple[str, nn.Module]]] = {}
    for name, m in module.named_modules():
        for parameter in m._parameters.values():
            if parameter is not None:
                holders.setdefault(id(parameter), []).append((name, m))
    for name, layer in layers.values():
        for key, parameter in layer._parameters.items():
            if parameter is None:
                continue
            for other_name, other in holders[id(parameter)]:
                if other is layer:
                    continue
                if id(other) not in layers:
                    raise ValueError(
                        f"{name}.{key} is tied to {other_name} ({type(other).__name__}), which split_ternary_ "
                        "would not split with it: the tie would be lost; split both (names=[...]) or neither"
                    )
                if key == "weight" and other.granularity != layer.granularity:
                    raise ValueError(
                        f"{name} and {other_name} share one weight but scale it per {layer.granularity} and per "
                        f"{other.granularity}: their splits differ, so splitting would untie them; quantize tied "
                        "layers alike (quantize_'s linear_granularity / embedding_granularity)"
                    )


def _split_layers(layers: dict[int, tuple[str, QuantLinear | QuantEmbedding]]) -> dict[int, nn.Module]:
    """The binary pair of each layer. The first halves are deep-copied with one memo, the second halves with another,
    so that a parameter tied between layers stays tied between their first halves and between their second halves
    (tied layers quantize alike, `_check_ties`: their splits are equal)."""
    memos: tuple[dict, dict] = ({}, {})
    halved: set[int] = set()
    splits = {}
    for key, (name, layer) in layers.items():
        w1, w2 = split_ternary_weight(layer.weight, layer.granularity)
        _check_split(layer, w1, w2, name)
        halves = []
        for part, memo in zip((w1, w2), memos, strict=True):
            half = copy.deepcopy(layer, memo)  # carries the activation quantizer's state, device, dtype, mode
            half.weight_bits = 1
            with torch.no_grad():
                half.weight.copy_(part)
                bias = getattr(half, "bias", None)
                if bias is not None and id(bias) not in halved:  # a tied bias once
                    bias.mul_(0.5)
                    halved.add(id(bias))
            halves.append(half)
        pair = BinarySplitLinear if isinstance(layer, QuantLinear) else BinarySplitEmbedding
        splits[key] = pair(*halves)
        splits[key].train(layer.training)
    return splits


def split_ternary_(module: nn.Module, names: Sequence[str] | None = None) -> SplitRecord:
    """Ternary weight splitting, in place: each ternary `QuantLinear` / `QuantEmbedding` inside
    ``module`` becomes a `BinarySplitLinear` / `BinarySplitEmbedding` with the same output.

    Each half is a binary copy of the layer (same granularity, half the bias, its own copy of the
    activation quantizer with the same state); fine-tune the result (BinaryBERT §3.2). Layers that
    share a weight (tied word embeddings and output projection) are split together and their
    halves share it too. The pairs are new module objects: attributes set on the ternary layers
    do not carry over.

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
            parent reads its weight directly (`theseus_quant.convert.WEIGHT_READERS`), a layer
            tied to a module not split with it or quantized per other groups; the model is then
            unchanged.
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
    layers: dict[int, tuple[str, QuantLinear | QuantEmbedding]] = {}
    for _, _, name, child in chosen:
        layers.setdefault(id(child), (name, child))
    _check_ties(module, layers)
    splits = _split_layers(layers)
    # --- nothing above this line changes the model ---
    for parent, key, _, child in chosen:
        parent._modules[key] = splits[id(child)]
    first = {id(child): name for _, _, name, child in reversed(ternary)}  # each layer's first name
    aliases = {name: first[id(child)] for _, _, name, child in ternary if name != first[id(child)]}
    done = tuple(dict.fromkeys(first[id(child)] for _, _, _, child in ternary if id(child) in splits))
    kept = tuple(dict.fromkeys(first[id(child)] for _, _, _, child in ternary if id(child) not in splits))
    return SplitRecord(done, kept, aliases)


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
