"""BERT family (transformers): quantized Q, K, V and attention probabilities, as BinaryBERT does.

BinaryBERT (its ``modeling_dynabert_quant.BertSelfAttention``) quantizes the inputs of both
attention matmuls: Q and K before ``Q·Kᵀ``, the attention probabilities (after dropout) and V
before ``P·V``, with the same activation quantizer as the Linear inputs (8-bit uniform with a
learnable clip, or LSQ at 4 bits). `quantize_attention_` adds those four quantizers to every
``BertSelfAttention`` of a model, in place; `theseus_quant.quantize_` does the weights and the
Linear inputs, and the two are independent (call both, in either order).

transformers routes BERT attention through ``config._attn_implementation`` (``"sdpa"`` by default
in transformers 5, ``"eager"`` on request). A fused kernel has no place to quantize Q·Kᵀ's
output, so `QuantBertSelfAttention` always computes attention the eager way (explicit matmuls
and softmax, as ``eager_attention_forward``), whatever the config says; it accepts the masks
both implementations build (additive float, or boolean with True = attend) and returns the
attention probabilities it used, so ``output_attentions=True`` works even where the model is set
to sdpa. Decoder BERTs (causal masks, key/value caches) and flash / flex attention are refused.

Needs ``transformers``; `theseus_quant` itself does not import this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.bert.modeling_bert import BertSelfAttention

from theseus_core.checks import is_int

from .layers import QuantizedInPlace
from .quantizers import UniformQuantizer, activation_quantizer

ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa")
"""The implementations whose masks `QuantBertSelfAttention` reads (float additive, boolean)."""

PROBS_CLIP = 1.0
"""Initial clip of the 8-bit quantizer of attention probabilities. Probabilities lie in [0, 1]:
the activations' 2.5 would leave 60% of the positive levels unused (BinaryBERT instead rescales
by the per-head maximum on every call). The clip stays learnable."""


class QuantBertSelfAttention(QuantizedInPlace, BertSelfAttention):
    """``BertSelfAttention`` with quantized Q, K, V and attention probabilities (BinaryBERT).

    Made by `quantize_attention_` from an existing ``BertSelfAttention`` (same object, same
    ``query`` / ``key`` / ``value`` children, which `theseus_quant.quantize_` may turn into
    `QuantLinear` layers); `theseus_quant.dequantize_` turns it back. Always eager attention (see
    the module docstring). A quantizer set to ``None`` leaves that tensor in full precision.

    Attributes:
        query_quant, key_quant, value_quant, probs_quant: Activation quantizers (or ``None``).

    Shapes:
        ``hidden_states`` ``[batch, seq, hidden]`` → ``(output [batch, seq, hidden],
        probs [batch, heads, seq, seq])``; ``probs`` are the quantized probabilities that
        multiplied V.
    """

    original_class = BertSelfAttention
    quantizer_names = ("query_quant", "key_quant", "value_quant", "probs_quant")

    query_quant: nn.Module | None
    key_quant: nn.Module | None
    value_quant: nn.Module | None
    probs_quant: nn.Module | None

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        past_key_values: object | None = None,
        **kwargs: object,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if past_key_values is not None:
            raise ValueError("QuantBertSelfAttention does not support key/value caches (decoder BERT)")
        hidden_shape = (*hidden_states.shape[:-1], -1, self.attention_head_size)
        query = _maybe(self.query_quant, self.query(hidden_states).view(hidden_shape).transpose(1, 2))
        key = _maybe(self.key_quant, self.key(hidden_states).view(hidden_shape).transpose(1, 2))
        scores = torch.matmul(query, key.transpose(2, 3)) * self.scaling
        mask = additive_mask(attention_mask, scores.dtype)
        if mask is not None:
            scores = scores + mask
        probs = F.softmax(scores, dim=-1)
        probs = F.dropout(probs, p=self.dropout.p, training=self.training)
        probs = _maybe(self.probs_quant, probs)
        value = _maybe(self.value_quant, self.value(hidden_states).view(hidden_shape).transpose(1, 2))
        output = torch.matmul(probs, value).transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)
        return output, probs


def _maybe(quantizer: nn.Module | None, x: torch.Tensor) -> torch.Tensor:
    return x if quantizer is None else quantizer(x)


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The attention mask as eager attention adds it to the scores: a float mask as it is, a
    boolean one (sdpa's: True = attend) as 0 / the dtype's minimum, ``None`` as ``None``."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"QuantBertSelfAttention reads float or boolean attention masks (implementations "
            f"{ATTENTION_IMPLEMENTATIONS}), got a {type(mask).__name__}"
        )
    if mask.dtype == torch.bool:
        return torch.zeros((), dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
    return mask.to(dtype)


@dataclass(frozen=True)
class AttentionRecord:
    """What `quantize_attention_` did: the qualified names of the attention modules quantized."""

    names: tuple[str, ...]
    bits: int

    def __str__(self) -> str:
        names = ", ".join(name or "(root)" for name in self.names)
        count = len(self.names)
        return f"quantize_attention_: Q, K, V and probabilities at {self.bits} bits in {count} modules: {names}"


def _quantizers(bits: int, device: torch.device) -> dict[str, nn.Module]:
    quantizers = {name: activation_quantizer(bits) for name in QuantBertSelfAttention.quantizer_names}
    if bits == 8:  # LSQ (4 bits) initialises its step from the data, probabilities included
        quantizers["probs_quant"] = UniformQuantizer(8, clip=PROBS_CLIP)
    return {name: quantizer.to(device=device) for name, quantizer in quantizers.items()}


def quantize_attention_(module: nn.Module, bits: int = 8) -> AttentionRecord:
    """Quantizes Q, K, V and the attention probabilities of every ``BertSelfAttention`` in
    ``module`` (root included), in place: each becomes a `QuantBertSelfAttention`.

    Everything is checked before anything changes; `theseus_quant.dequantize_` undoes it (the
    same modules, with their original class, children and parameters).

    Args:
        module: A BERT model (``BertModel``, ``BertFor*``, all-MiniLM-L6-v2, ...) or part of one.
        bits: 8 (`UniformQuantizer`, learnable clip: 2.5 for Q, K, V, `PROBS_CLIP` for the
            probabilities) or 4 (`LSQQuantizer`). (default: ``8``)

    Returns:
        An `AttentionRecord` (print it).

    Raises:
        TypeError, ValueError: Not a module, bits not 8 or 4, no ``BertSelfAttention`` (or
            attention already quantized), a decoder config, an attention implementation other
            than eager or sdpa; the model is then unchanged.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"quantize_attention_ takes an nn.Module, got {type(module).__name__}")
    if not is_int(bits) or bits not in (8, 4):
        raise ValueError(f"attention bits must be 8 (uniform) or 4 (LSQ), got {bits!r}")
    done = [name or "(root)" for name, m in module.named_modules() if isinstance(m, QuantBertSelfAttention)]
    if done:
        raise ValueError(f"attention already quantized in {done}; dequantize_ first")
    targets = [(name, m) for name, m in module.named_modules() if type(m) is BertSelfAttention]
    if not targets:
        raise ValueError(
            f"no BertSelfAttention in this {type(module).__name__}; quantize_attention_ knows the BERT family "
            "(BertModel and its heads, MiniLM); cross-attention is not quantized"
        )
    for name, attention in targets:
        config = attention.config
        if config.is_decoder:
            raise ValueError(f"{name or '(root)'} belongs to a decoder BERT (causal masks, caches): not supported")
        if config._attn_implementation not in ATTENTION_IMPLEMENTATIONS:
            raise ValueError(
                f"{name or '(root)'} uses {config._attn_implementation!r} attention, whose masks "
                "QuantBertSelfAttention cannot read; model.set_attn_implementation('eager') first "
                f"(supported: {ATTENTION_IMPLEMENTATIONS})"
            )
    quantizers = {id(m): _quantizers(bits, next(m.parameters()).device) for _, m in targets}
    # --- nothing above this line changes the model ---
    for _, attention in targets:
        QuantBertSelfAttention.quantize_module_(attention, quantizers[id(attention)])
    return AttentionRecord(tuple(name for name, _ in targets), bits)
