"""Quantized layers: `QuantLinear`, `QuantEmbedding`, and the binary pairs TWS makes of them.

A quantized layer *is* the layer it replaces (a subclass, with the same
parameters under the same names): it keeps the latent full-precision weight,
which the optimizer updates, and quantizes it on every forward call. Biases stay
in full precision.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from theseus_core.checks import is_int

from .quantizers import GRANULARITIES, Granularity, activation_quantizer, quantize_weight, weight_codes

WEIGHT_BITS = (2, 1)


def _check_weight_bits(bits: object) -> None:
    """Raises ``ValueError`` unless ``bits`` is the integer 2 or 1 (not ``2.0``, not a bool)."""
    if not is_int(bits) or bits not in WEIGHT_BITS:
        raise ValueError(f"weight_bits must be 2 (ternary) or 1 (binary), got {bits!r}")


def _check_granularity(granularity: str) -> None:
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")


class QuantLinear(nn.Linear):
    """``nn.Linear`` with ternary or binary weights and optionally quantized inputs.

    ``y = A(x) · Q(W)ᵀ + b`` with ``Q`` = TWN (``weight_bits=2``) or BWN (``1``)
    of the latent weight ``W`` and ``A`` the activation quantizer
    (``act_quant``, ``None`` for full-precision inputs). Build one from a trained
    layer with `from_linear`.

    Args:
        in_features, out_features, bias, device, dtype: As ``nn.Linear``.
        weight_bits: 2 (ternary) or 1 (binary). (default: ``2``)
        activation_bits: 8 (`UniformQuantizer`), 4 (`LSQQuantizer`) or ``None``.
            (default: ``8``)
        granularity: One weight scale for the whole matrix (``"tensor"``,
            BinaryBERT's choice) or one per output row (``"row"``). (default: ``"tensor"``)

    Shapes:
        input ``[*, in_features]`` → output ``[*, out_features]``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        weight_bits: int = 2,
        activation_bits: int | None = 8,
        granularity: Granularity = "tensor",
    ) -> None:
        _check_weight_bits(weight_bits)
        _check_granularity(granularity)
        super().__init__(in_features, out_features, bias, device, dtype)
        self.weight_bits = weight_bits
        self.granularity = granularity
        self.act_quant = activation_quantizer(activation_bits)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        *,
        weight_bits: int = 2,
        activation_bits: int | None = 8,
        granularity: Granularity = "tensor",
    ) -> QuantLinear:
        """A `QuantLinear` that shares ``linear``'s weight and bias (the same ``Parameter`` objects)."""
        layer = cls(
            linear.in_features,
            linear.out_features,
            bias=False,
            device="meta",
            weight_bits=weight_bits,
            activation_bits=activation_bits,
            granularity=granularity,
        )
        layer.weight = linear.weight
        layer.bias = linear.bias
        if layer.act_quant is not None:
            layer.act_quant.to(device=linear.weight.device)
        layer.train(linear.training)
        return layer

    def quantized_weight(self) -> torch.Tensor:
        """The weight the forward pass uses (straight-through gradient to ``weight``)."""
        return quantize_weight(self.weight, self.weight_bits, self.granularity)

    def codes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(codes, scales)`` of the quantized weight: see `theseus_quant.ternary_codes`."""
        return weight_codes(self.weight, self.weight_bits, self.granularity)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.act_quant is not None:
            x = self.act_quant(x)
        return F.linear(x, self.quantized_weight(), self.bias)

    def extra_repr(self) -> str:
        kind = "ternary" if self.weight_bits == 2 else "binary"
        return f"{super().extra_repr()}, weights={kind}/{self.granularity}"


class QuantEmbedding(nn.Embedding):
    """``nn.Embedding`` whose table is ternary or binary, one scale per row by default (BinaryBERT's
    word embeddings). Build one with `from_embedding`; arguments as `QuantLinear` (no activations:
    the inputs are indices)."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        weight_bits: int = 2,
        granularity: Granularity = "row",
    ) -> None:
        _check_weight_bits(weight_bits)
        _check_granularity(granularity)
        super().__init__(num_embeddings, embedding_dim, padding_idx, device=device, dtype=dtype)
        self.weight_bits = weight_bits
        self.granularity = granularity

    @classmethod
    def from_embedding(
        cls, embedding: nn.Embedding, *, weight_bits: int = 2, granularity: Granularity = "row"
    ) -> QuantEmbedding:
        """A `QuantEmbedding` sharing ``embedding``'s weight; ``max_norm`` and sparse gradients are
        not supported (they act on the table in place, not on its quantized copy)."""
        if embedding.max_norm is not None or embedding.sparse:
            raise ValueError("QuantEmbedding does not support max_norm or sparse embeddings; skip this module")
        layer = cls(
            embedding.num_embeddings,
            embedding.embedding_dim,
            embedding.padding_idx,
            device="meta",
            weight_bits=weight_bits,
            granularity=granularity,
        )
        layer.weight = embedding.weight
        layer.scale_grad_by_freq = embedding.scale_grad_by_freq
        layer.train(embedding.training)
        return layer

    def quantized_weight(self) -> torch.Tensor:
        return quantize_weight(self.weight, self.weight_bits, self.granularity)

    def codes(self) -> tuple[torch.Tensor, torch.Tensor]:
        return weight_codes(self.weight, self.weight_bits, self.granularity)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.granularity == "tensor" or input.numel() == 0:
            return F.embedding(input, self.quantized_weight(), self.padding_idx, None, 2.0, self.scale_grad_by_freq)
        # One scale per row: only the rows looked up need quantizing, the same values and gradients as quantizing
        # the whole table (a 30,522-row table took 1.1 s a training step on one CPU thread, the rows of a batch ms).
        rows, positions = torch.unique(input, return_inverse=True)
        latent = self.weight[rows]
        if self.padding_idx is not None:  # as F.embedding's padding_idx: no gradient reaches that row
            latent = torch.where((rows == self.padding_idx).unsqueeze(1), latent.detach(), latent)
        table = quantize_weight(latent, self.weight_bits, "row")
        return F.embedding(positions, table, None, None, 2.0, self.scale_grad_by_freq)

    def extra_repr(self) -> str:
        kind = "ternary" if self.weight_bits == 2 else "binary"
        return f"{super().extra_repr()}, weights={kind}/{self.granularity}"


class _BinarySplit(nn.Module):
    """Two binary layers run in parallel on the same input, outputs summed."""

    def __init__(self, first: nn.Module, second: nn.Module) -> None:
        super().__init__()
        for half in (first, second):
            if getattr(half, "weight_bits", None) != 1:
                raise ValueError(f"{type(self).__name__} holds two binary layers (weight_bits=1)")
        self.first = first
        self.second = second

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.first(x) + self.second(x)


class BinarySplitLinear(_BinarySplit):
    """What ternary weight splitting makes of a ternary `QuantLinear`: two binary `QuantLinear`
    halves (each with half the bias and its own copy of the activation quantizer) whose outputs
    are summed, ``y = first(x) + second(x)``. See `theseus_quant.split_ternary_`."""

    first: QuantLinear
    second: QuantLinear

    @property
    def in_features(self) -> int:
        return self.first.in_features

    @property
    def out_features(self) -> int:
        return self.first.out_features


class BinarySplitEmbedding(_BinarySplit):
    """What ternary weight splitting makes of a ternary `QuantEmbedding`: two binary tables whose
    lookups are summed."""

    first: QuantEmbedding
    second: QuantEmbedding

    @property
    def embedding_dim(self) -> int:
        return self.first.embedding_dim

    @property
    def num_embeddings(self) -> int:
        return self.first.num_embeddings


QUANTIZED_TYPES = (QuantLinear, QuantEmbedding, BinarySplitLinear, BinarySplitEmbedding)


class QuantizedInPlace(nn.Module):
    """Base of a module quantized *in place* by a family adapter: the module keeps its identity
    (parameters, children, forward hooks) and only its class changes, to a subclass of its own class
    that adds activation quantizers as children (the way ``torch.nn.utils.parametrize`` swaps
    classes). Example: `theseus_quant.bert.QuantBertSelfAttention`.

    A subclass names the class it came from (``original_class``) and the children it adds
    (``quantizer_names``); `dequantize_` calls `dequantize_self_` on each such module.
    """

    original_class: type[nn.Module]
    quantizer_names: tuple[str, ...]

    @classmethod
    def quantize_module_(cls, module: nn.Module, quantizers: dict[str, nn.Module | None]) -> None:
        """Turns ``module`` (of type exactly ``original_class``) into a ``cls`` holding ``quantizers``."""
        if type(module) is not cls.original_class or set(quantizers) != set(cls.quantizer_names):
            raise TypeError(f"{cls.__name__} quantizes a {cls.original_class.__name__} with {cls.quantizer_names}")
        module.__class__ = cls
        for name, quantizer in quantizers.items():
            module.add_module(name, quantizer)

    def dequantize_self_(self) -> None:
        """Drops the quantizers and gives the module its original class back (same object)."""
        for name in self.quantizer_names:
            del self._modules[name]
        self.__class__ = self.original_class
