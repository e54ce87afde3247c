"""Integer inference: quantized successors on int8 kernels instead of fp32 simulation.

A trained `QuantLinear` computes ``y = A(x) · Q(W)ᵀ + b`` in fp32, where ``A(x) = s·round(clamp(x / s, ±qmax))``
(``s``: the activation quantizer's step, ``qmax`` = 127 at 8 bits, 7 at 4) and ``Q(W) = α·c`` with codes ``c`` in
{−1, 0, 1} (ternary) or {−1, 1} (binary). Both factors are integers times a scale, so

    y = (s·α) · (round(clamp(x / s, ±qmax)) · cᵀ) + b

with the product in int8 × int8 → int32, exact. `IntegerLinear` runs that. A `BinarySplitLinear` (two binary halves
whose outputs are summed) is one `IntegerLinear` with both halves' codes stacked: one GEMM of twice the width when the
halves share a step (as TWS leaves them), one GEMM per half when fine-tuning moved their clips apart.

Kernels (measured on this repository's 2-core AVX2 machine, one thread, ``benchmarks/results/deploy-kernels.md``):

- ``"onednn"`` (default on CPU): ``torch.ops.onednn.qlinear_pointwise``, PyTorch's x86 int8 GEMM (the one
  ``torch.compile`` lowers PT2E-quantized Linears to), on uint8 activations with zero point 128 (AVX2 has no fast
  s8 × s8 product) and one weight scale per output row; fp32 output and bias in the same call.
- ``"reference"``: ``F.linear`` on the integer codes held as fp32 (exact while every dot product stays below 2²⁴, i.e.
  ``in_features · qmax < 16,777,216``), then the scales: the semantics, on any device and in ``torch.export``.

`torch._int_mm` is exact too but 20-50× slower than fp32 on this CPU (a naive loop), so it is not offered; the
dynamic-quantization Linears of ``torch.ao`` / fbgemm pick their own activation scale per call and so cannot reproduce
the trained model's clip. ONNX Runtime's ``MatMulInteger`` is the fastest kernel here; `theseus_zoo.export.onnx`
writes that graph from the same `integer_linear` op.

`to_integer_` converts a model in place: quantized Linears → `IntegerLinear`, quantized embeddings → ``nn.Embedding``
holding the quantized table ŵ (a lookup has nothing to multiply), quantized Linears without an activation quantizer →
``nn.Linear`` holding ŵ. Quantized attention (`theseus_quant.bert`) is left as it is: its two matmuls take quantized
inputs already and run in fp32. The result is inference-only: an `IntegerLinear` holds buffers only, and the frozen
``nn.Linear`` / ``nn.Embedding`` layers hold ŵ as parameters with ``requires_grad=False``.

An `IntegerLinear` rounds its activation step to the input's dtype, as the simulated quantizer does
(``step().to(x.dtype)``), so that a bf16 or fp16 model puts its inputs on the same levels. Such inputs take the
``"reference"`` path (the ``"onednn"`` kernel runs fp32 inputs only), whose sums are then in that dtype: exact only
below 2⁸ (bf16) or 2¹¹ (fp16), so the outputs match the simulated model's to that dtype's rounding, not fp32's.

Tolerance: the integer path is exact; the simulated model rounds its fp32 sums. The difference of one layer's output
is bounded by ``in_features · qmax · s · α · 2⁻²³`` per element (a few 1e-6 relative); through a whole network it
stays within float noise (``tests/theseus_quant/test_integer.py`` states and checks the bounds).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .convert import _check_hooks, _check_not_bypassed, _children
from .layers import BinarySplitEmbedding, BinarySplitLinear, QuantEmbedding, QuantLinear
from .quantizers import LSQQuantizer, UniformQuantizer, dequantize

KERNELS = ("onednn", "reference")
EXACT_FP32_SUM = 2**24
"""fp32 holds every integer below this exactly: the ``"reference"`` kernel is exact while ``in_features · qmax`` is."""


@torch.library.custom_op("theseus_quant::integer_linear", mutates_args=())
def integer_linear(
    x: torch.Tensor, codes: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None, step: float, qmax: int
) -> torch.Tensor:
    """``(step·weight_scale) · (round(clamp(x / step, ±qmax)) · codesᵀ) + bias``: one integer Linear.

    The reference semantics of `IntegerLinear` (codes as fp32: exact sums below 2²⁴), and the op that
    ``torch.export`` / ``torch.onnx.export`` see, so that an ONNX translation can map it to ``MatMulInteger``.

    Shapes:
        ``x`` ``[*, K]`` float, ``codes`` ``[N, K]`` int8, ``weight_scale`` ``[N]``, ``bias`` ``[N]`` or ``None``
        → ``[*, N]`` in ``x``'s dtype.
    """
    levels = torch.round(torch.clamp(x / step, -qmax, qmax))
    out = F.linear(levels, codes.to(x.dtype)) * (weight_scale.to(x.dtype) * step)
    return out if bias is None else out + bias.to(x.dtype)


@integer_linear.register_fake
def _(x, codes, weight_scale, bias, step, qmax):
    return x.new_empty((*x.shape[:-1], codes.shape[0]))


def activation_step(quantizer: nn.Module) -> tuple[float, int]:
    """``(step, qmax)`` of an activation quantizer as its forward pass uses them (fp32 step).

    Raises:
        ValueError: An `LSQQuantizer` that never saw a batch (its step is not set yet).
        TypeError: Not one of theseus_quant's activation quantizers.
    """
    if isinstance(quantizer, UniformQuantizer):
        step = quantizer.step().detach().to(torch.float32)
    elif isinstance(quantizer, LSQQuantizer):
        if not bool(quantizer.initialized):
            raise ValueError("this LSQQuantizer has not been initialised by a forward pass: its step is not trained")
        step = quantizer.step.detach().abs().clamp(min=1e-8).to(torch.float32)
    else:
        raise TypeError(f"integer inference knows UniformQuantizer and LSQQuantizer, not {type(quantizer).__name__}")
    return float(step.item()), quantizer.qmax


@functools.lru_cache(maxsize=64)
def _step_in(step: float, dtype: torch.dtype) -> float:
    """``step`` (an fp32 value) rounded to ``dtype``, as the simulated quantizer's ``step().to(x.dtype)``."""
    if dtype in (torch.float32, torch.float64):
        return step  # exact in both
    return torch.tensor(step, dtype=torch.float32).to(dtype).item()


def _row_scales(layer: QuantLinear) -> tuple[torch.Tensor, torch.Tensor]:
    """``(codes [N, K] int8, α per output row [N] fp32)`` of a quantized Linear."""
    codes, scales = layer.codes()
    return codes, scales.reshape(-1).to(torch.float32).expand(layer.out_features).contiguous()


class IntegerLinear(nn.Module):
    """Inference form of a `QuantLinear` (one part) or a `BinarySplitLinear` (two parts, outputs summed) whose inputs
    are quantized: int8 codes, per-row fp32 weight scales, one activation step per part.

    Build it with `from_quantized`. Buffers: ``codes`` ``[parts·N, K]`` int8, ``weight_scale`` ``[parts·N]``,
    ``bias`` ``[parts·N]`` (each part's own bias) or ``None``; ``steps`` (a tuple of floats, one per part) and
    ``qmax`` are attributes, saved in the state_dict as its extra state (``load_state_dict`` restores all of it).
    Parts that share a step are quantized once and multiplied in one GEMM. The ``"onednn"`` kernel's prepacked
    weights are a cache: a load, a move or a dtype change clears it, and copies and pickles leave it out.

    Args:
        kernel: ``"onednn"`` (int8 GEMM, CPU) or ``"reference"`` (see the module docstring). (default:
            ``"onednn"`` where ``torch.ops.onednn.qlinear_pointwise`` exists, else ``"reference"``)

    Shapes:
        input ``[*, in_features]`` → output ``[*, out_features]``.
    """

    def __init__(
        self,
        codes: torch.Tensor,
        weight_scale: torch.Tensor,
        bias: torch.Tensor | None,
        steps: tuple[float, ...],
        qmax: int,
        kernel: str | None = None,
    ) -> None:
        super().__init__()
        parts = len(steps)
        if codes.dtype != torch.int8 or codes.dim() != 2 or codes.shape[0] % parts:
            raise ValueError(f"codes must be int8 [parts·N, K] with {parts} parts, got {codes.dtype} {codes.shape}")
        if codes.shape[1] * qmax >= EXACT_FP32_SUM:
            raise ValueError(f"in_features · qmax = {codes.shape[1] * qmax} reaches 2²⁴: fp32 sums would round")
        self.register_buffer("codes", codes.contiguous())
        self.register_buffer("weight_scale", weight_scale.to(torch.float32).contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.float32).contiguous())
        self.steps = tuple(float(s) for s in steps)
        self.qmax = int(qmax)
        self.in_features = codes.shape[1]
        self.out_features = codes.shape[0] // parts
        if kernel is None:
            kernel = "onednn" if _onednn_available() else "reference"
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        self.kernel = kernel
        self._packed: dict[tuple[int, int], torch.Tensor] = {}

    @classmethod
    def from_quantized(cls, layer: QuantLinear | BinarySplitLinear, kernel: str | None = None) -> IntegerLinear:
        """The integer form of a quantized Linear with an activation quantizer (both halves' for a split).

        Raises:
            ValueError: A half without an activation quantizer, or halves with different ``qmax``.
        """
        halves = [layer.first, layer.second] if isinstance(layer, BinarySplitLinear) else [layer]
        if any(half.act_quant is None for half in halves):
            raise ValueError("IntegerLinear needs quantized inputs; a layer without act_quant runs as nn.Linear(ŵ)")
        steps = [activation_step(half.act_quant) for half in halves]
        if len({qmax for _, qmax in steps}) != 1:
            raise ValueError(f"the halves quantize their inputs at different widths: {steps}")
        codes, scales = zip(*(_row_scales(half) for half in halves), strict=True)
        biases = [half.bias for half in halves]
        bias = (
            None
            if all(b is None for b in biases)
            else torch.cat([_bias_or_zeros(b, h) for b, h in zip(biases, halves, strict=True)])
        )
        return cls(
            torch.cat(codes),
            torch.cat(scales),
            bias,
            tuple(step for step, _ in steps),
            steps[0][1],
            kernel,
        )

    def _chunks(self) -> list[tuple[float, int, int]]:
        """``(step, first row, last row)`` of each GEMM: consecutive parts with equal steps share one."""
        chunks: list[tuple[float, int, int]] = []
        for part, step in enumerate(self.steps):
            start, stop = part * self.out_features, (part + 1) * self.out_features
            if chunks and chunks[-1][0] == step:
                chunks[-1] = (step, chunks[-1][1], stop)
            else:
                chunks.append((step, start, stop))
        return chunks

    def _onednn(self, x: torch.Tensor, step: float, start: int, stop: int) -> torch.Tensor:
        key = (start, stop)
        if key not in self._packed:  # prepacked once per chunk (onednn's blocked layout); not part of the state
            self._packed[key] = torch.ops.onednn.qlinear_prepack(self.codes[start:stop], None)
        levels = (x / step).clamp_(-self.qmax, self.qmax).round_().add_(128).to(torch.uint8)
        zero = torch.zeros(stop - start, dtype=torch.int64)
        bias = None if self.bias is None else self.bias[start:stop]
        return torch.ops.onednn.qlinear_pointwise(
            levels, step, 128, self._packed[key], self.weight_scale[start:stop], zero, bias, 1.0, 0, torch.float32,
            "none", [], "",
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fast = (
            self.kernel == "onednn"
            and x.device.type == "cpu"
            and x.dtype == torch.float32
            and not torch.compiler.is_compiling()
            and not torch.compiler.is_exporting()
        )
        outputs = []
        for step, start, stop in self._chunks():
            if fast:
                out = self._onednn(x.contiguous(), step, start, stop)
            else:
                bias = None if self.bias is None else self.bias[start:stop]
                step = _step_in(step, x.dtype)
                out = integer_linear(x, self.codes[start:stop], self.weight_scale[start:stop], bias, step, self.qmax)
            outputs.append(out)
        out = torch.cat(outputs, dim=-1) if len(outputs) > 1 else outputs[0]
        if len(self.steps) == 1:
            return out
        first, second = out.split(self.out_features, dim=-1)
        return first + second  # as BinarySplitLinear: first(x) + second(x), each with its own bias

    def _apply(self, fn, recurse=True):
        self._packed = {}  # a move or dtype change invalidates the prepacked weights
        return super()._apply(fn, recurse)

    def get_extra_state(self) -> torch.Tensor:
        """``[qmax, step₁, ...]`` (float64: the steps exactly), so that a state_dict carries the activation steps."""
        return torch.tensor([self.qmax, *self.steps], dtype=torch.float64)

    def set_extra_state(self, state: torch.Tensor) -> None:
        values = [float(v) for v in state.reshape(-1).tolist()]
        if len(values) != 1 + len(self.steps):
            raise ValueError(
                f"the state holds {len(values) - 1} activation steps, this IntegerLinear has {len(self.steps)} parts"
            )
        self.qmax, self.steps = int(values[0]), tuple(values[1:])

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        self._packed = {}  # new codes: the prepacked ones are stale
        super()._load_from_state_dict(*args, **kwargs)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_packed"] = {}  # onednn's opaque tensors have no storage to copy or pickle; rebuilt on the next call
        return state

    def extra_repr(self) -> str:
        parts = "binary pair" if len(self.steps) == 2 else "one layer"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, {parts}, qmax={self.qmax}, "
            f"bias={self.bias is not None}, kernel={self.kernel}"
        )


def _bias_or_zeros(bias: torch.Tensor | None, layer: QuantLinear) -> torch.Tensor:
    return torch.zeros(layer.out_features) if bias is None else bias.detach().to(torch.float32)


def _onednn_available() -> bool:
    return hasattr(torch.ops.onednn, "qlinear_pointwise") and torch.backends.mkldnn.is_available()


def _frozen_linear(layer: QuantLinear | BinarySplitLinear) -> nn.Linear:
    """An ``nn.Linear`` holding the quantized weight (the halves' sum for a split) of a layer with float inputs."""
    halves = [layer.first, layer.second] if isinstance(layer, BinarySplitLinear) else [layer]
    if isinstance(layer, BinarySplitLinear) and any(h.act_quant is not None for h in halves):
        raise ValueError("a binary pair with one quantized half and one float half: convert each half apart")
    weight = sum(h.quantized_weight().detach() for h in halves)
    biases = [h.bias for h in halves if h.bias is not None]
    linear = nn.Linear(layer.in_features, layer.out_features, bias=bool(biases), dtype=weight.dtype)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if biases:
            linear.bias.copy_(sum(b.detach() for b in biases))
    return linear.requires_grad_(False)


def _frozen_embedding(layer: QuantEmbedding | BinarySplitEmbedding) -> nn.Embedding:
    """An ``nn.Embedding`` of the quantized table (both halves' sum for a split: the same sums the pair's forward
    adds)."""
    halves = [layer.first, layer.second] if isinstance(layer, BinarySplitEmbedding) else [layer]
    tables = [dequantize(*h.codes(), h.granularity) for h in halves]
    table = tables[0] if len(tables) == 1 else tables[0] + tables[1]
    first = halves[0]
    embedding = nn.Embedding(
        first.num_embeddings, first.embedding_dim, first.padding_idx, scale_grad_by_freq=first.scale_grad_by_freq
    )
    with torch.no_grad():
        embedding.weight = nn.Parameter(table.detach().clone(), requires_grad=False)
    return embedding


@dataclass(frozen=True)
class IntegerRecord:
    """What `to_integer_` did: qualified names of the layers made `IntegerLinear`, frozen ``nn.Linear`` (float
    inputs) and frozen ``nn.Embedding``."""

    integer: tuple[str, ...]
    linear: tuple[str, ...]
    embedding: tuple[str, ...]
    kernel: str

    def __str__(self) -> str:
        return (
            f"to_integer_: {len(self.integer)} integer Linears ({self.kernel}), {len(self.linear)} Linears with float "
            f"inputs frozen to ŵ, {len(self.embedding)} embeddings frozen to ŵ"
        )


_LINEARS = (QuantLinear, BinarySplitLinear)
_EMBEDDINGS = (QuantEmbedding, BinarySplitEmbedding)


def to_integer_(model: nn.Module, kernel: str | None = None) -> IntegerRecord:
    """Replaces every quantized layer of ``model`` by its inference form, in place; returns an `IntegerRecord`.

    The outputs equal the simulated model's within fp32 rounding (module docstring); the model is put in eval mode
    and its converted layers carry no gradient. Everything is checked and built before the first swap. The new layers
    are new module objects: a layer reachable under several names is converted once and stays shared, attributes set
    on the quantized layers do not carry over, and a quantized layer carrying hooks is refused.

    Args:
        model: A model with `QuantLinear` / `QuantEmbedding` layers or their TWS pairs (e.g. `load_quantized`'s).
        kernel: `IntegerLinear`'s kernel. (default: ``"onednn"`` where available)

    Raises:
        ValueError: No quantized layer (nothing to convert), the root itself is one, a layer cannot be converted,
            carries hooks or sits where its parent reads its weight directly (`theseus_quant.convert.WEIGHT_READERS`),
            named; the model is then unchanged.
    """
    if isinstance(model, _LINEARS + _EMBEDDINGS):
        raise ValueError("the root module is a quantized layer; wrap it in a container first")
    targets = [
        edge
        for edge in _children(model)
        if isinstance(edge[3], _LINEARS + _EMBEDDINGS)
        and not isinstance(edge[0], (BinarySplitLinear, BinarySplitEmbedding))  # a pair is converted whole
    ]
    if not targets:
        raise ValueError(f"this {type(model).__name__} has no quantized layer: nothing to make integer")
    _check_not_bypassed(targets, "to_integer_")
    _check_hooks([edge for edge in _children(model) if isinstance(edge[3], _LINEARS + _EMBEDDINGS)], "to_integer_")
    replacements: dict[int, nn.Module] = {}
    kinds: dict[str, list[str]] = {"integer": [], "linear": [], "embedding": []}
    for _, _, name, module in targets:
        if id(module) in replacements:  # reachable under several names: one replacement, shared as the layer was
            continue
        try:
            if isinstance(module, _EMBEDDINGS):
                replacements[id(module)] = _frozen_embedding(module)
                kinds["embedding"].append(name)
            elif _has_quantized_inputs(module):
                replacements[id(module)] = IntegerLinear.from_quantized(module, kernel)
                kinds["integer"].append(name)
            else:
                replacements[id(module)] = _frozen_linear(module)
                kinds["linear"].append(name)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{name}: {error}") from error
    # --- nothing above this line changes the model ---
    for parent, key, _, module in targets:
        parent._modules[key] = replacements[id(module)]
    model.eval()
    used = next((m.kernel for m in replacements.values() if isinstance(m, IntegerLinear)), kernel or "none")
    return IntegerRecord(tuple(kinds["integer"]), tuple(kinds["linear"]), tuple(kinds["embedding"]), used)


def _has_quantized_inputs(layer: QuantLinear | BinarySplitLinear) -> bool:
    halves = [layer.first, layer.second] if isinstance(layer, BinarySplitLinear) else [layer]
    return all(h.act_quant is not None for h in halves)
