"""Weight and activation quantizers with straight-through gradients (BinaryBERT, Bai et al. 2021).

Weights (Linear and Embedding matrices), one scale per *group*: the whole tensor
(``granularity="tensor"``, BinaryBERT's choice for Linear weights) or each row
(``"row"``, its choice for word embeddings).

- `ternarize` (TWN, Li et al. 2016): Δ = 0.7·mean|w|, α = mean of |w| over
  |w| > Δ, ŵ = α·sign(w) where |w| > Δ, else 0.
- `binarize` (BWN, Rastegari et al. 2016): ŵ = α·sign(w), α = mean|w|, with
  sign(0) = +1 so that every binary weight is ±α.

The backward pass is the identity (straight-through estimator): the gradient
that reaches the latent full-precision weight is the gradient at ŵ, as in the
reference code. Scales are computed in float64 and rounded once, which makes
both quantizers exactly idempotent (quantizing ŵ gives ŵ bit for bit): an
exported model whose latent weights are ŵ reproduces the same outputs.

Activations, symmetric and signed, with ``qmax = 2**(bits - 1) - 1`` levels on
each side of zero: `UniformQuantizer` (a learnable clip, initialised to 2.5,
BinaryBERT's 8-bit choice) and `LSQQuantizer` (a learnable step, Esser et al.
2020, its 4-bit choice). Inside the clip the gradient to the input is exactly
the incoming gradient; outside it is zero.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from theseus_core.checks import is_int

Granularity = Literal["tensor", "row"]
GRANULARITIES = ("tensor", "row")
TERNARY_THRESHOLD = 0.7  # Δ = 0.7·mean|w| (TWN; BinaryBERT's TwnQuantizer)


def _grouped(weight: torch.Tensor, granularity: str) -> torch.Tensor:
    """``weight`` viewed as ``[groups, elements]``: one row per scale group."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if weight.dim() < 1:
        raise ValueError("cannot quantize a 0-dimensional tensor; quantize weight matrices")
    return weight.reshape(1, -1) if granularity == "tensor" else weight.reshape(weight.shape[0], -1)


def _ternary(flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """TWN on ``[groups, elements]``: (codes in {−1, 0, 1} in ``flat``'s dtype, α as float64 ``[groups, 1]``).

    Elementwise work stays in ``flat``'s dtype; only the sums are taken in float64, which is what
    makes α exact on a quantized input (k equal float32 values sum exactly in float64).
    """
    magnitude = flat.abs()
    count = flat.shape[1]
    delta = TERNARY_THRESHOLD * magnitude.sum(dim=1, keepdim=True, dtype=torch.float64) / max(count, 1)
    kept = magnitude > delta.to(flat.dtype)
    codes = torch.sign(flat) * kept
    # An all-zero group keeps nothing: α = 0 (the clamp only avoids 0 / 0).
    alpha = (magnitude * kept).sum(dim=1, keepdim=True, dtype=torch.float64) / kept.sum(dim=1, keepdim=True).clamp(
        min=1
    )
    return codes, alpha


def _binary(flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """BWN on ``[groups, elements]``: (codes ±1 in ``flat``'s dtype, sign(0) = +1; α float64 ``[groups, 1]``)."""
    alpha = flat.abs().sum(dim=1, keepdim=True, dtype=torch.float64) / max(flat.shape[1], 1)
    codes = torch.where(flat >= 0, 1.0, -1.0).to(flat.dtype)
    return codes, alpha


def ternary_codes(weight: torch.Tensor, granularity: Granularity = "tensor") -> tuple[torch.Tensor, torch.Tensor]:
    """TWN codes and scales of ``weight`` (no gradient).

    Returns:
        ``(codes, scales)``: ``codes`` is an int8 tensor shaped like ``weight``
        with values in {−1, 0, 1}; ``scales`` has shape ``[groups, 1]`` (one
        group for ``"tensor"``, one per row for ``"row"``) in ``weight``'s dtype,
        so that ``codes * scales`` (viewed per group) is the ternary weight.
    """
    codes, alpha = _ternary(_grouped(weight.detach(), granularity))
    return codes.to(torch.int8).reshape(weight.shape), alpha.to(weight.dtype)


def binary_codes(weight: torch.Tensor, granularity: Granularity = "tensor") -> tuple[torch.Tensor, torch.Tensor]:
    """BWN codes and scales of ``weight`` (no gradient): codes ±1 (int8, sign(0) = +1) and
    scales ``[groups, 1]`` = mean|w| per group, as in `ternary_codes`."""
    codes, alpha = _binary(_grouped(weight.detach(), granularity))
    return codes.to(torch.int8).reshape(weight.shape), alpha.to(weight.dtype)


def dequantize(codes: torch.Tensor, scales: torch.Tensor, granularity: Granularity = "tensor") -> torch.Tensor:
    """``codes * scales`` per group, shaped like ``codes``, in the scales' dtype."""
    grouped = _grouped(codes, granularity).to(scales.dtype)
    return (grouped * scales).reshape(codes.shape)


def straight_through(value: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``value`` in the forward pass (bit for bit), the identity to ``source`` in the backward pass."""
    return value.detach() + (source - source.detach())


def ternarize(weight: torch.Tensor, granularity: Granularity = "tensor") -> torch.Tensor:
    """TWN ternary weight ŵ ∈ {−α, 0, α} per group, with a straight-through gradient to ``weight``."""
    codes, alpha = _ternary(_grouped(weight.detach(), granularity))
    return straight_through((codes * alpha.to(weight.dtype)).reshape(weight.shape), weight)


def binarize(weight: torch.Tensor, granularity: Granularity = "tensor") -> torch.Tensor:
    """BWN binary weight ŵ = ±α per group (α = mean|w|), with a straight-through gradient to ``weight``."""
    codes, alpha = _binary(_grouped(weight.detach(), granularity))
    return straight_through((codes * alpha.to(weight.dtype)).reshape(weight.shape), weight)


def quantize_weight(weight: torch.Tensor, bits: int, granularity: Granularity = "tensor") -> torch.Tensor:
    """`ternarize` for ``bits=2``, `binarize` for ``bits=1``."""
    if bits == 2:
        return ternarize(weight, granularity)
    if bits == 1:
        return binarize(weight, granularity)
    raise ValueError(f"weight bits must be 2 (ternary) or 1 (binary), got {bits!r}")


def weight_codes(
    weight: torch.Tensor, bits: int, granularity: Granularity = "tensor"
) -> tuple[torch.Tensor, torch.Tensor]:
    """`ternary_codes` for ``bits=2``, `binary_codes` for ``bits=1``."""
    if bits == 2:
        return ternary_codes(weight, granularity)
    if bits == 1:
        return binary_codes(weight, granularity)
    raise ValueError(f"weight bits must be 2 (ternary) or 1 (binary), got {bits!r}")


# ----------------------------------------------------------------- activations


class _FakeQuantize(torch.autograd.Function):
    """``round(clamp(x / step, −qmax, qmax)) · step``; gradient to x: exactly the incoming
    gradient inside the clip, zero outside; gradient to step as in LSQ (Esser et al. 2020, eq. 3)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, step: torch.Tensor, qmax: int) -> torch.Tensor:
        scaled = x / step
        inside = scaled.abs() <= qmax
        ctx.save_for_backward(scaled, inside)
        ctx.qmax = qmax
        return torch.round(scaled.clamp(-qmax, qmax)) * step

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        scaled, inside = ctx.saved_tensors
        grad_x = torch.where(inside, grad, torch.zeros_like(grad)) if ctx.needs_input_grad[0] else None
        grad_step = None
        if ctx.needs_input_grad[1]:
            local = torch.where(inside, torch.round(scaled) - scaled, torch.sign(scaled) * ctx.qmax)
            grad_step = (grad * local).sum().reshape(1).to(grad.dtype)
        return grad_x, grad_step, None


def _check_bits(bits: int) -> int:
    if not is_int(bits) or not 2 <= bits <= 16:
        raise ValueError(f"activation bits must be an integer in [2, 16], got {bits!r}")
    return 2 ** (bits - 1) - 1


class UniformQuantizer(nn.Module):
    """Symmetric uniform activation quantizer with a learnable clip (BinaryBERT's 8-bit choice).

    Values are clipped to [−clip, clip] and rounded to ``2·qmax + 1`` levels,
    ``qmax = 2**(bits - 1) - 1``.

    Args:
        bits: Bits per activation. (default: ``8``)
        clip: Initial clip value. (default: ``2.5``, as the reference code)
    """

    def __init__(self, bits: int = 8, clip: float = 2.5) -> None:
        super().__init__()
        self.qmax = _check_bits(bits)
        self.bits = bits
        self.clip = nn.Parameter(torch.tensor([float(clip)]))

    def step(self) -> torch.Tensor:
        return self.clip.abs().clamp(min=1e-8) / self.qmax

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FakeQuantize.apply(x, self.step().to(x.dtype), self.qmax)

    def extra_repr(self) -> str:
        return f"bits={self.bits}, clip={self.clip.item():.4g}"


class LSQQuantizer(nn.Module):
    """Learned step size quantization (Esser et al., ICLR 2020; BinaryBERT's 4-bit choice).

    The step is initialised on the first forward call (training or not) with a
    non-empty batch, as ``2·mean|x| / sqrt(qmax)``; its gradient is scaled by
    ``1 / sqrt(numel(x)·qmax)``. The clip is ``step · qmax``. An empty batch
    has nothing to quantize: it passes through unchanged, and neither
    initialises the step nor gives it a gradient.

    Args:
        bits: Bits per activation. (default: ``4``)
    """

    def __init__(self, bits: int = 4) -> None:
        super().__init__()
        self.qmax = _check_bits(bits)
        self.bits = bits
        self.step = nn.Parameter(torch.ones(1))
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() == 0:  # mean|x| of nothing is NaN, and the gradient scale divides by numel(x)
            return x.clone()
        if not self.initialized:
            with torch.no_grad():
                self.step.fill_(max(2 * x.detach().abs().mean().item() / math.sqrt(self.qmax), 1e-8))
                self.initialized.fill_(True)
        step = self.step.abs().clamp(min=1e-8)
        scale = 1.0 / math.sqrt(x.numel() * self.qmax)
        step = straight_through(step, step * scale)  # value: step; gradient: scaled (LSQ's grad_scale)
        return _FakeQuantize.apply(x, step.to(x.dtype), self.qmax)

    def extra_repr(self) -> str:
        return f"bits={self.bits}, step={self.step.item():.4g}, initialized={bool(self.initialized)}"


ACTIVATION_BITS = (8, 4, None)


def _check_activation_bits(bits: object) -> None:
    """Raises ``ValueError`` unless ``bits`` is one of `ACTIVATION_BITS`: the integer 8 or 4 (not ``8.0``, not a
    bool), or ``None``."""
    if bits is not None and (not is_int(bits) or bits not in ACTIVATION_BITS):
        raise ValueError(f"activation_bits must be one of {ACTIVATION_BITS}, got {bits!r}")


def activation_quantizer(bits: int | None) -> nn.Module | None:
    """BinaryBERT's activation quantizer for ``bits``: `UniformQuantizer` for 8, `LSQQuantizer`
    for 4, ``None`` (full precision) for ``None``."""
    _check_activation_bits(bits)
    if bits is None:
        return None
    return UniformQuantizer(8) if bits == 8 else LSQQuantizer(4)
