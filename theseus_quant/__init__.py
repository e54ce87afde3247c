"""theseus_quant: ternary and binary layers for Theseus compression (BinaryBERT, Bai et al. 2021).

- Quantizers with straight-through gradients: `ternarize` (TWN), `binarize` (BWN),
  `UniformQuantizer` (8-bit, learnable clip), `LSQQuantizer` (4-bit).
- Layers: `QuantLinear`, `QuantEmbedding`, and the binary pairs `BinarySplitLinear`,
  `BinarySplitEmbedding` that ternary weight splitting makes.
- In-place conversion: `quantize_`, `dequantize_`, `split_ternary_` (TWS), `binarize_`.
- Successors for `theseus_core.replace_`: `quantized_copy` (attention included, `quantize_known_attention_`).
- Adaptive splitting: `measure_sensitivity`, `split_costs`, `choose_splits`.
- Export: `save_packed`, `load_packed` (2 / 1 bits a weight plus scales); a model's folder with its versioned
  `QuantizedLayout` (``quantization.json``): `save_quantized`, `load_quantized`, `rebuild_`.
- Integer inference: `to_integer_` (quantized Linears → `IntegerLinear`, int8 GEMMs; exact up to fp32 rounding).
- Two-stage distillation losses: `intermediates`, `intermediate_loss` (hidden states and
  attentions), `prediction_loss` (soft cross-entropy), `layer_map`.
- BERT (transformers), in `theseus_quant.bert`, imported on its own: `quantize_attention_`
  (Q, K, V and attention probabilities).

Needs torch and `theseus_core`, which ships in the same distribution (``import theseus_quant`` imports its
``distillation`` and ``checks`` modules, torch only; `quantized_copy` its engine); imports no model library;
safetensors is used when installed.

`quantize_`, `dequantize_`, `split_ternary_` and `to_integer_` swap module objects (see `theseus_quant.convert`):
attributes set on the old modules do not carry over, and modules carrying hooks are refused.
"""

from .adaptive import SplitChoice, choose_splits, measure_sensitivity, split_costs
from .convert import (
    DEFAULT_SKIP,
    QuantizationRecord,
    dequantize_,
    matches,
    quantize_,
    quantize_known_attention_,
    quantized_copy,
)
from .distill import Intermediates, intermediate_loss, intermediates, layer_map, prediction_loss
from .export import (
    ExportReport,
    QuantizedLayout,
    load_packed,
    load_quantized,
    pack_codes,
    quantized_layers,
    quantized_layout,
    read_layout,
    rebuild_,
    save_packed,
    save_quantized,
    unpack_codes,
)
from .integer import IntegerLinear, IntegerRecord, activation_step, integer_linear, to_integer_
from .layers import BinarySplitEmbedding, BinarySplitLinear, QuantEmbedding, QuantizedInPlace, QuantLinear
from .quantizers import (
    LSQQuantizer,
    UniformQuantizer,
    activation_quantizer,
    binarize,
    binary_codes,
    dequantize,
    straight_through,
    ternarize,
    ternary_codes,
)
from .tws import SplitRecord, binarize_, split_ternary_, split_ternary_weight

__all__ = [
    "DEFAULT_SKIP",
    "BinarySplitEmbedding",
    "BinarySplitLinear",
    "ExportReport",
    "IntegerLinear",
    "IntegerRecord",
    "Intermediates",
    "LSQQuantizer",
    "QuantEmbedding",
    "QuantLinear",
    "QuantizedInPlace",
    "QuantizationRecord",
    "QuantizedLayout",
    "SplitChoice",
    "SplitRecord",
    "UniformQuantizer",
    "activation_quantizer",
    "activation_step",
    "binarize",
    "binarize_",
    "binary_codes",
    "choose_splits",
    "dequantize",
    "dequantize_",
    "integer_linear",
    "intermediate_loss",
    "intermediates",
    "layer_map",
    "load_packed",
    "load_quantized",
    "matches",
    "measure_sensitivity",
    "pack_codes",
    "prediction_loss",
    "quantize_",
    "quantize_known_attention_",
    "quantized_copy",
    "quantized_layers",
    "quantized_layout",
    "read_layout",
    "rebuild_",
    "save_packed",
    "save_quantized",
    "split_costs",
    "split_ternary_",
    "split_ternary_weight",
    "straight_through",
    "ternarize",
    "ternary_codes",
    "to_integer_",
    "unpack_codes",
]
