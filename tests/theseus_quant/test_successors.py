"""quantized_copy as a successor factory for theseus_core.replace_."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from transformers.models.bert.modeling_bert import BertSelfAttention

import theseus_core as th
from theseus_core.testing import ToyStack, assert_replacement_equivalence, groupings, toy_stacks
from theseus_quant import QuantLinear, quantized_copy
from theseus_quant.bert import QuantBertSelfAttention

from .helpers import bert_batch, tiny_bert


@given(toy_stacks(max_blocks=4), st.data(), st.sampled_from([2, 1]), st.sampled_from([8, 4, None]))
def test_quantized_successors_satisfy_the_replacement_contract(model, data, bits, activation_bits):
    compress = data.draw(st.booleans())
    specs = [
        th.ModuleSpec(f"blocks[{start}:{stop}]", quantized_copy(bits, activation_bits, [0] if compress else None))
        for start, stop in data.draw(groupings(len(model.blocks)))
    ]
    # rate 0 is the original exactly; rate 1 and eval equal the finalized model; only successors learn.
    assert_replacement_equivalence(model, specs, model.example_inputs())


def test_finalized_toy_stack_has_quantized_blocks_and_full_precision_ends():
    model = ToyStack(num_blocks=4, dropout=0.0)
    theseus = th.replace_(model, th.plan(model, "blocks", num_groups=2, successor=quantized_copy(2, 8, layers=[0])))
    theseus.rate = 1.0
    model(*model.example_inputs()).sum().backward()
    clips = [m.act_quant.clip for m in model.modules() if isinstance(m, QuantLinear)]
    assert clips and all(clip.grad is not None for clip in clips), "activation clips must learn"
    theseus.finalize()
    assert len(model.blocks) == 2
    linears = [m for m in model.blocks.modules() if isinstance(m, nn.Linear)]
    assert linears and all(isinstance(m, QuantLinear) and m.weight_bits == 2 for m in linears)
    assert type(model.embed) is nn.Linear and type(model.head) is nn.Linear


@pytest.mark.parametrize("layers", [None, [0]])
def test_quantized_bert_layers_satisfy_the_replacement_contract(layers):
    model = tiny_bert(layers=4)
    specs = th.plan(model, "encoder.layer", num_groups=2, successor=quantized_copy(2, 8, layers))
    assert_replacement_equivalence(model, specs, (), bert_batch())
    theseus = th.replace_(model, specs)
    theseus.finalize()
    linears = [m for m in model.encoder.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 6 * (4 if layers is None else 2)
    assert all(isinstance(m, QuantLinear) and m.act_quant is not None for m in linears)
    assert type(model.pooler.dense) is nn.Linear
    assert torch.isfinite(model(**bert_batch()).last_hidden_state).all()


@pytest.mark.parametrize("attention", [True, False])
def test_quantized_bert_layers_quantize_their_attention_unless_told_not_to(attention):
    model = tiny_bert(layers=2)
    successor = quantized_copy(2, 8, attention=attention)([model.encoder.layer[0]])
    quantized = [m for m in successor.modules() if isinstance(m, QuantBertSelfAttention)]
    assert len(quantized) == (1 if attention else 0)
    assert type(model.encoder.layer[0].attention.self) is BertSelfAttention, "the predecessor must be left alone"
    if attention:
        hidden = torch.randn(3, 9, 16)
        _, probs = quantized[0](hidden)
        step = quantized[0].probs_quant.step().detach()
        torch.testing.assert_close(probs, torch.round(probs / step) * step)  # on the 8-bit grid
    assert quantized_copy(2, None)([model.encoder.layer[0]]).attention.self.__class__ is BertSelfAttention


def test_a_single_linear_group_becomes_a_quant_linear():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
    theseus = th.replace_(model, [th.ModuleSpec("0", quantized_copy(1, None))])
    assert isinstance(theseus.finalize()[0], QuantLinear)


def test_bad_factory_arguments_raise_when_the_spec_is_made():
    with pytest.raises(ValueError, match="weight_bits"):
        quantized_copy(3)
    with pytest.raises(ValueError, match="activation_bits"):
        quantized_copy(2, 16)
    with pytest.raises(ValueError, match="layers"):
        quantized_copy(2, 8, [])
    with pytest.raises(ValueError, match="weight_bits"):
        quantized_copy(2.0)
    with pytest.raises(ValueError, match="activation_bits"):
        quantized_copy(2, 8.0)
    with pytest.raises(ValueError, match="layers"):
        quantized_copy(2, 8, [True])
    assert repr(quantized_copy(2, 8, [0])) == "quantized_copy(2, 8, layers=[0])"
    assert repr(quantized_copy(1, 8, attention=False)) == "quantized_copy(1, 8, attention=False)"
