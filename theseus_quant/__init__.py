"""theseus_quant: ternary and binary layers for Theseus compression (BinaryBERT, Bai et al. 2021).

- Quantizers with straight-through gradients: `ternarize` (TWN), `binarize` (BWN),
  `UniformQuantizer` (8-bit, learnable clip), `LSQQuantizer` (4-bit).
- Layers: `QuantLinear`, `QuantEmbedding`, and the binary pairs `BinarySplitLinear`,
  `BinarySplitEmbedding` that ternary weight splitting makes.
- In-place conversion: `quantize_`, `dequantize_`, `split_ternary_` (TWS), `binarize_`.
- Successors for `theseus_core.replace_`: `quantized_copy` (attention included, `quantize_known_attention_`).
- Adaptive splitting: `measure_sensitivity`, `split_costs`, `choose_splits`.
- Export: `save_packed`, `load_packed` (2 / 1 bits a weight plus scales).
- Two-stage distillation losses: `intermediates`, `intermediate_loss` (hidden states and
  attentions), `prediction_loss` (soft cross-entropy), `layer_map`.
- BERT (transformers), in `theseus_quant.bert`, imported on its own: `quantize_attention_`
  (Q, K, V and attention probabilities).

Needs torch only (and theseus_core for `quantized_copy`); safetensors is used when installed.
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
from .export import ExportReport, load_packed, pack_codes, save_packed, unpack_codes
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
    "Intermediates",
    "LSQQuantizer",
    "QuantEmbedding",
    "QuantLinear",
    "QuantizedInPlace",
    "QuantizationRecord",
    "SplitChoice",
    "SplitRecord",
    "UniformQuantizer",
    "activation_quantizer",
    "binarize",
    "binarize_",
    "binary_codes",
    "choose_splits",
    "dequantize",
    "dequantize_",
    "intermediate_loss",
    "intermediates",
    "layer_map",
    "load_packed",
    "matches",
    "measure_sensitivity",
    "pack_codes",
    "prediction_loss",
    "quantize_",
    "quantize_known_attention_",
    "quantized_copy",
    "save_packed",
    "split_costs",
    "split_ternary_",
    "split_ternary_weight",
    "straight_through",
    "ternarize",
    "ternary_codes",
    "unpack_codes",
]
