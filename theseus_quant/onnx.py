"""ONNX translation of `theseus_quant.integer_linear`: an integer Linear becomes ``MatMulInteger``.

Pass `TRANSLATIONS` as ``torch.onnx.export(..., dynamo=True, custom_translation_table=TRANSLATIONS)`` for a model that
`theseus_quant.to_integer_` converted. Each `IntegerLinear` GEMM is written as

    levels = Round(Clip(x / step, −qmax, qmax))          # the activation quantizer, as in PyTorch (half to even)
    acc    = MatMulInteger(Cast<uint8>(levels + 128), codesᵀ, a_zero_point = 128)    # int32, exact
    y      = Cast<float>(acc) · (step · weight_scale) + bias

uint8 activations with zero point 128 because ONNX Runtime's x86 kernels (MLAS) are fast for u8 × s8 and slow for
s8 × s8 on CPUs without VNNI (measured: 11 ms against 58 ms for 1024×384 · 384×1536 on one AVX2 thread,
``benchmarks/results/deploy-kernels.md``). ONNX Runtime's graph optimizer fuses the cast, scale and bias into
``MatMulIntegerToFloat`` where it can.

Needs ``onnxscript`` (the ``onnx`` extra); `theseus_quant` itself does not import this module.
"""

from __future__ import annotations

import onnx.helper
import torch
from onnxscript import opset18 as op

from .integer import integer_linear

ZERO_POINT = 128
_UINT8, _FLOAT = onnx.TensorProto.UINT8, onnx.TensorProto.FLOAT


def integer_linear_onnx(x, codes, weight_scale, bias, step: float, qmax: int):
    """The ONNX graph of one `theseus_quant.integer_linear` call (module docstring)."""
    scaled = op.Div(x, op.Constant(value_float=step))
    levels = op.Round(op.Clip(scaled, op.Constant(value_float=-float(qmax)), op.Constant(value_float=float(qmax))))
    shifted = op.Cast(op.Add(levels, op.Constant(value_float=float(ZERO_POINT))), to=_UINT8)
    zero_point = op.Constant(value=onnx.helper.make_tensor("zero_point", _UINT8, [], [ZERO_POINT]))
    acc = op.MatMulInteger(shifted, op.Transpose(codes, perm=[1, 0]), zero_point)
    out = op.Mul(op.Cast(acc, to=_FLOAT), op.Mul(weight_scale, op.Constant(value_float=step)))
    return out if bias is None else op.Add(out, bias)


TRANSLATIONS = {torch.ops.theseus_quant.integer_linear.default: integer_linear_onnx}
"""``custom_translation_table`` for ``torch.onnx.export``: `integer_linear` → ``MatMulInteger``."""

__all__ = ["TRANSLATIONS", "ZERO_POINT", "integer_linear", "integer_linear_onnx"]
