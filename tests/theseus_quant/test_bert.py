"""theseus_quant.bert: quantized Q, K, V and attention probabilities in transformers' BERT."""

import copy
import pickle

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from theseus_quant import LSQQuantizer, UniformQuantizer, dequantize_, quantize_
from theseus_quant.bert import PROBS_CLIP, QuantBertSelfAttention, additive_mask, quantize_attention_

from .helpers import assert_refused, assert_unchanged, bert_batch, snapshot, tiny_bert


def attentions_of(model):
    return [m for m in model.modules() if isinstance(m, QuantBertSelfAttention)]


def set_quantizers(model, make):
    for attention in attentions_of(model):
        for name in attention.quantizer_names:
            setattr(attention, name, make(name))


@st.composite
def bert_cases(draw):
    heads, head_size = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([2, 4, 8]))
    model = tiny_bert(
        layers=draw(st.integers(1, 2)),
        seed=draw(st.integers(0, 1000)),
        classifier=draw(st.booleans()),
        attention=draw(st.sampled_from(["eager", "sdpa"])),
        hidden_size=heads * head_size,
        num_attention_heads=heads,
    )
    batch, length = draw(st.integers(1, 3)), draw(st.integers(1, 10))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 1000)))
    inputs = {"input_ids": torch.randint(3, 60, (batch, length), generator=generator)}
    if draw(st.booleans()):  # padding after the first token of each sequence
        lengths = torch.randint(1, length + 1, (batch,), generator=generator)
        inputs["attention_mask"] = (torch.arange(length) < lengths[:, None]).long()
    return model, inputs


def hidden(model, inputs):
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True).hidden_states[-1]


def compare_with_quantizers(case, make, atol):
    model, inputs = case
    expected = hidden(model, inputs)
    quantize_attention_(model)
    set_quantizers(model, make)
    torch.testing.assert_close(hidden(model, inputs), expected, rtol=1e-5 if atol < 1e-4 else 0, atol=atol)


@given(bert_cases())
def test_quantized_attention_with_quantizers_off_is_the_original_attention(case):
    compare_with_quantizers(case, lambda name: None, atol=1e-5)


@given(bert_cases())
def test_quantized_attention_at_16_bits_is_close_to_the_original(case):
    # Clips that cover every value: only the rounding (4 / 32767 at most) remains.
    compare_with_quantizers(
        case, lambda name: UniformQuantizer(16, clip=1.0 if name == "probs_quant" else 4.0), atol=2e-3
    )


def test_eager_attention_reproduces_both_masks_of_transformers():
    model = tiny_bert(classifier=True, attention="eager")
    batch = bert_batch()
    eager = model(**batch, output_attentions=True).attentions
    quantize_attention_(model)
    set_quantizers(model, lambda name: None)
    for implementation in ("eager", "sdpa"):  # float additive mask, then boolean mask
        model.set_attn_implementation(implementation)
        ours = model(**batch, output_attentions=True).attentions
        assert len(ours) == 2, "QuantBertSelfAttention returns probabilities under sdpa too"
        for got, want in zip(ours, eager, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    float_mask = torch.tensor([[0.0, -1e4]])
    assert additive_mask(float_mask, torch.float32) is not None and torch.equal(
        additive_mask(float_mask, torch.float32), float_mask
    )
    bool_mask = torch.tensor([[True, False]])
    assert additive_mask(bool_mask, torch.float32).tolist() == [[0.0, torch.finfo(torch.float32).min]]


@pytest.mark.parametrize("bits", [8, 4])
def test_q_k_v_and_probabilities_are_quantized_and_learn(bits):
    model = tiny_bert(classifier=True, attention="sdpa", hidden_dropout_prob=0.0)
    record = quantize_attention_(model, bits)
    assert record.names == ("bert.encoder.layer.0.attention.self", "bert.encoder.layer.1.attention.self")
    assert "8 bits" in str(quantize_attention_(tiny_bert())) and record.bits == bits
    calls = {}
    for name, module in model.named_modules():
        if name.endswith("_quant") and ".attention.self." in name:
            module.register_forward_hook(lambda m, args, out, name=name: calls.setdefault(name, []).append(out))
    outputs = model(**bert_batch(), output_attentions=True)
    assert len(calls) == 8 and all(len(outs) == 1 for outs in calls.values()), "each quantizer runs once a call"
    for attention in attentions_of(model):
        kind = UniformQuantizer if bits == 8 else LSQQuantizer
        assert all(type(getattr(attention, n)) is kind for n in attention.quantizer_names)
        if bits == 8:
            assert attention.probs_quant.clip.item() == PROBS_CLIP and attention.query_quant.clip.item() == 2.5
    for name, (out,) in calls.items():
        quantizer = model.get_submodule(name)
        step = quantizer.step() if bits == 8 else quantizer.step.abs()
        levels = out.detach() / step
        torch.testing.assert_close(levels, levels.round(), rtol=0, atol=1e-3, msg=f"{name} off its grid")
        assert levels.abs().max() <= quantizer.qmax + 1e-3
    # The attentions the model returns are the quantized probabilities that multiplied V.
    for layer, attention in enumerate(outputs.attentions):
        assert torch.equal(attention, calls[f"bert.encoder.layer.{layer}.attention.self.probs_quant"][0])
    outputs.logits.sum().backward()
    for attention in attentions_of(model):
        for name in attention.quantizer_names:
            param = next(getattr(attention, name).parameters())
            assert param.grad is not None and param.grad.abs().sum() > 0, f"{name} does not learn"


def test_dequantize_restores_the_same_modules_exactly():
    model = tiny_bert(classifier=True, attention="eager")
    before = snapshot(model)
    expected = model(**bert_batch(), output_attentions=True)
    quantize_attention_(model)
    quantize_(model)
    assert {type(m) for m in model.modules()} >= {QuantBertSelfAttention}
    names = dequantize_(model)
    assert "bert.encoder.layer.1.attention.self" in names
    # dequantize_ gives back new Linear / Embedding objects (holding the same parameters); every other
    # module, the attention modules included, is the very object it was.
    replaced = {name for name in names if not name.endswith("attention.self")}
    before["modules"] = [(n, None if n in replaced else i, t) for n, i, t in before["modules"]]
    restored = snapshot(model)
    restored["modules"] = [(n, None if n in replaced else i, t) for n, i, t in restored["modules"]]
    assert_unchanged(model, before, restored)  # also parameters (the same objects), state, modes
    outputs = model(**bert_batch(), output_attentions=True)
    assert torch.equal(outputs.logits, expected.logits)
    assert all(torch.equal(a, b) for a, b in zip(outputs.attentions, expected.attentions, strict=True))


def test_hooks_installed_before_quantization_keep_recording():
    model = tiny_bert(attention="sdpa")
    model(**bert_batch(), output_attentions=True)  # transformers installs its recording hooks on first use
    quantize_attention_(model)
    assert len(model(**bert_batch(), output_attentions=True).attentions) == 2


def test_quantized_attention_copies_and_pickles():
    model = tiny_bert()
    quantize_attention_(model, 4)
    # Pickled before the first call: transformers then installs output-recording hooks (local functions)
    # that no model, quantized or not, can be pickled with.
    pickled = pickle.loads(pickle.dumps(model))
    expected = hidden(model, bert_batch())  # LSQ steps initialised
    assert torch.equal(hidden(pickled, bert_batch()), expected) and len(attentions_of(pickled)) == 2
    clone = copy.deepcopy(model)
    assert torch.equal(hidden(clone, bert_batch()), expected) and len(attentions_of(clone)) == 2


def _decoder(model):
    model.config.is_decoder = True


def _flex(model):
    model.config._attn_implementation = "flex_attention"


def _quantize_one_layer(model):
    quantize_attention_(model.bert.encoder.layer[1])


BAD_CALLS = {
    "bits 3": (None, lambda model: quantize_attention_(model, 3)),
    "bits None": (None, lambda model: quantize_attention_(model, None)),
    "bits True": (None, lambda model: quantize_attention_(model, True)),
    "bits 8.0": (None, lambda model: quantize_attention_(model, 8.0)),
    "bits as text": (None, lambda model: quantize_attention_(model, "8")),
    "not a module": (None, lambda model: quantize_attention_(model.state_dict())),
    "no attention in the part given": (None, lambda model: quantize_attention_(model.bert.pooler)),
    "not a BERT": (None, lambda model: quantize_attention_(nn.Sequential(nn.Linear(2, 2)))),
    "already quantized": (_quantize_one_layer, quantize_attention_),
    "decoder": (_decoder, quantize_attention_),
    "flex attention": (_flex, quantize_attention_),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_quantize_attention_rejects_bad_input_before_any_change(case):
    model = tiny_bert(classifier=True)
    prepare, call = BAD_CALLS[case]
    if prepare is not None:
        prepare(model)
    assert_refused(model, call)
