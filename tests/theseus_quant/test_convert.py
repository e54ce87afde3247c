"""quantize_, dequantize_ and the layers they install."""

import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from theseus_core.testing import toy_stacks
from theseus_quant import convert, split_ternary_, to_integer_
from theseus_quant.integer import IntegerLinear
from theseus_quant.layers import QuantEmbedding, QuantLinear
from theseus_quant.quantizers import LSQQuantizer, UniformQuantizer, quantize_weight, ternarize

from .helpers import assert_refused, bert_batch, tiny_bert, weights


def test_quant_linear_computes_the_quantized_affine_map():
    torch.manual_seed(0)
    linear = nn.Linear(6, 4)
    layer = QuantLinear.from_linear(linear, weight_bits=2, activation_bits=None)
    assert layer.weight is linear.weight and layer.bias is linear.bias, "parameters must be shared"
    x = torch.randn(3, 6)
    assert torch.equal(layer(x), nn.functional.linear(x, ternarize(linear.weight), linear.bias))
    assert isinstance(layer, nn.Linear)


@given(
    weights(max_rows=12),
    st.sampled_from([2, 1]),
    st.sampled_from([None, 0, 3]),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_a_row_quantized_embedding_looks_up_what_the_whole_quantized_table_gives(
    weight, bits, padding_idx, scale_grad_by_freq, seed
):
    # The layer quantizes only the rows a batch looks up; the reference quantizes the whole table, as F.embedding
    # with padding_idx and scale_grad_by_freq would use it.
    padding_idx = None if padding_idx is None or padding_idx >= weight.shape[0] else padding_idx
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(weight.shape[0], (3, 5), generator=generator)
    upstream = torch.randn(3, 5, weight.shape[1], generator=generator)
    table = nn.Embedding(*weight.shape, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq)
    with torch.no_grad():
        table.weight.copy_(weight)
    layer = QuantEmbedding.from_embedding(copy.deepcopy(table), weight_bits=bits)
    latent = weight.clone().requires_grad_(True)
    expected = nn.functional.embedding(
        ids, quantize_weight(latent, bits, "row"), padding_idx, scale_grad_by_freq=scale_grad_by_freq
    )
    found = layer(ids)
    assert torch.equal(found, expected)
    (found * upstream).sum().backward()
    (expected * upstream).sum().backward()
    assert torch.equal(layer.weight.grad, latent.grad)


def test_default_skip_on_bert_keeps_what_binarybert_keeps_in_full_precision():
    model = tiny_bert(classifier=True)
    params = {name: id(p) for name, p in model.named_parameters()}
    record = convert.quantize_(model, weight_bits=2, activation_bits=8)
    kinds = {name: type(m) for name, m in model.named_modules()}
    assert kinds["bert.embeddings.word_embeddings"] is QuantEmbedding
    for kept in ("bert.embeddings.position_embeddings", "bert.embeddings.token_type_embeddings"):
        assert kinds[kept] is nn.Embedding
    assert kinds["bert.pooler.dense"] is nn.Linear and kinds["classifier"] is nn.Linear
    assert all(kind is not nn.Linear for name, kind in kinds.items() if name.startswith("bert.encoder"))
    assert all(kind is nn.LayerNorm for name, kind in kinds.items() if name.endswith("LayerNorm"))
    assert {name: id(p) for name, p in model.named_parameters() if "act_quant" not in name} == params
    assert "bert.pooler.dense" in record.skipped and "classifier" in record.skipped
    assert len(record.quantized) == 1 + 2 * 6  # word embeddings, and 6 Linear layers per BERT layer
    assert "ternary" in str(record)
    model(**bert_batch()).logits.sum().backward()
    assert model.bert.encoder.layer[0].attention.self.query.act_quant.clip.grad is not None


@pytest.mark.parametrize(("bits", "quantizer"), [(8, UniformQuantizer), (4, LSQQuantizer), (None, type(None))])
def test_activation_bits_choose_the_quantizer(bits, quantizer):
    model = tiny_bert()
    convert.quantize_(model, 1, bits, embeddings=False)
    layer = model.encoder.layer[0].output.dense
    assert layer.weight_bits == 1 and type(layer.act_quant) is quantizer
    assert type(model.embeddings.word_embeddings) is nn.Embedding


def test_shared_modules_stay_shared_and_subclasses_are_left_alone():
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.ReLU(), shared, nn.MultiheadAttention(4, 1))
    convert.quantize_(model, skip=[])
    assert model[0] is model[2] and isinstance(model[0], QuantLinear)
    assert type(model[3].out_proj) is not QuantLinear  # MultiheadAttention reads out_proj.weight directly


def test_dequantize_gives_back_the_original_model():
    model = tiny_bert()
    original = copy.deepcopy(model)
    convert.quantize_(model)
    assert convert.dequantize_(model)
    assert [type(m) for m in model.modules()] == [type(m) for m in original.modules()]
    assert torch.equal(model(**bert_batch()).last_hidden_state, original(**bert_batch()).last_hidden_state)


def _already_quantized(model):
    convert.quantize_(model.blocks[0], skip=[])  # part of the model, before the snapshot


BAD_CALLS = {
    "weight bits 3": lambda model: convert.quantize_(model, 3),
    "weight bits 0": lambda model: convert.quantize_(model, 0),
    "weight bits True": lambda model: convert.quantize_(model, True),
    "weight bits as text": lambda model: convert.quantize_(model, "2"),
    "weight bits 2.0": lambda model: convert.quantize_(model, 2.0),
    "activation bits 16": lambda model: convert.quantize_(model, 2, 16),
    "activation bits 2": lambda model: convert.quantize_(model, 2, 2),
    "activation bits 8.0": lambda model: convert.quantize_(model, 2, 8.0),
    "activation bits True": lambda model: convert.quantize_(model, 2, True),
    "skip matching nothing": lambda model: convert.quantize_(model, skip=["head", "pooler"]),
    "skip as one string": lambda model: convert.quantize_(model, skip="head"),
    "skip everything": lambda model: convert.quantize_(model, skip=["*"]),
    "bad granularity": lambda model: convert.quantize_(model, linear_granularity="column"),
    "not a module": lambda model: convert.quantize_(model.state_dict()),
    "the root is a Linear": lambda model: convert.quantize_(model.head),
}


@given(toy_stacks(max_blocks=3), st.sampled_from([*BAD_CALLS, "already quantized", "embedding with max_norm"]))
def test_quantize_rejects_bad_input_before_any_change(model, case):
    if case == "already quantized":
        _already_quantized(model)
        call = lambda model: convert.quantize_(model)  # noqa: E731
    elif case == "embedding with max_norm":
        model.table = nn.Embedding(5, 3, max_norm=1.0)
        call = lambda model: convert.quantize_(model)  # noqa: E731
    else:
        call = BAD_CALLS[case]
    assert_refused(model, call)


@given(toy_stacks(max_blocks=3), st.sampled_from([2, 1]), st.sampled_from([8, 4, None]))
def test_quantize_replaces_every_linear_outside_the_skip_list(model, bits, activation_bits):
    record = convert.quantize_(model, bits, activation_bits, skip=["head"])
    for name, module in model.named_modules():
        if name == "head":
            assert type(module) is nn.Linear
        elif isinstance(module, nn.Linear):
            assert type(module) is QuantLinear and module.weight_bits == bits and name in record.quantized
    assert record.skipped == ("head",)
    assert model(*model.example_inputs()).shape == (4, 3)


def test_skip_patterns_match_names_and_their_ancestors():
    assert convert.matches("bert.pooler.dense", "pooler")
    assert convert.matches("classifier", "classifier")
    assert convert.matches("encoder.layer.0.output.dense", "encoder.layer.0.*")
    assert not convert.matches("bert.poolers", "pooler")
    assert not convert.matches("encoder.layer.10.output", "layer.1")
    assert convert.matches("0.weight_holder", "/0") and convert.matches("0", "/0")
    assert not convert.matches("encoder.0", "/0") and convert.matches("encoder.0", "0")


def _encoder(**overrides) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, **overrides)
    return nn.Sequential(layer, nn.Linear(8, 3)).eval()


def test_linears_a_transformer_encoder_layer_reads_directly_are_refused():
    # In eval mode without gradients, PyTorch's fast path reads linear1.weight / linear2.weight and would bypass
    # the quantized layers (and break on layers without a weight); the refusal names the module and the skip.
    model = _encoder()
    with pytest.raises(
        ValueError, match=r"0\.linear1: its parent 0 is an nn\.TransformerEncoderLayer.*skip=\[\.\.\., '0'\]"
    ):
        convert.quantize_(model)
    assert_refused(model, lambda model: convert.quantize_(model, 2, None))
    with pytest.raises(ValueError, match="TransformerEncoderLayer"):
        convert.quantized_copy(2, 8)([_encoder()[0]])  # a successor of encoder layers: the copy is refused too
    record = convert.quantize_(model, skip=["0"])  # kept in full precision: correct on every path
    assert list(record.quantized) == ["1"]
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        fast = model(x)
    torch.testing.assert_close(fast, model(x))


def test_layers_carrying_hooks_are_refused_before_any_change():
    # quantize_, dequantize_, split_ternary_ and to_integer_ put new module objects in place: hooks would be lost.
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    handle = model[2].register_forward_hook(lambda module, args, output: None)
    with pytest.raises(ValueError, match=r"^2 carries forward hooks, which quantize_ would lose"):
        convert.quantize_(model, skip=[])
    assert_refused(model, lambda model: convert.quantize_(model, skip=[]))
    with pytest.raises(ValueError, match="carries forward hooks, which quantized_copy would lose"):
        convert.quantized_copy(2, 8)([model[2]])  # a group of one hooked Linear: its copy has the hooks too
    handle.remove()
    convert.quantize_(model, skip=[])
    model[0].register_forward_pre_hook(lambda module, args: None)
    for verb in (convert.dequantize_, split_ternary_, to_integer_):
        with pytest.raises(ValueError, match=r"^0 carries forward pre-hooks"):
            verb(model)
        assert type(model[0]) is QuantLinear and type(model[2]) is QuantLinear


def test_the_record_lists_weight_matrices_left_in_full_precision_by_their_type():
    model = nn.Sequential(nn.EmbeddingBag(10, 4), nn.Linear(4, 4), nn.Conv1d(4, 4, 1), nn.MultiheadAttention(4, 1))
    record = convert.quantize_(model)
    assert list(record.quantized) == ["1"]
    assert record.not_converted == {
        "0": "EmbeddingBag",
        "2": "Conv1d",
        "3": "MultiheadAttention",  # in_proj_weight
        "3.out_proj": "NonDynamicallyQuantizableLinear",
    }
    assert "left in full precision: 0 (EmbeddingBag), 2 (Conv1d)" in str(record)


def test_quantize_refuses_a_model_converted_to_integer_kernels():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    convert.quantize_(model, skip=[])
    to_integer_(model)
    assert isinstance(model[0], IntegerLinear)
    assert_refused(model, convert.quantize_)
    with pytest.raises(ValueError, match="already converted to integer kernels by to_integer_"):
        convert.quantize_(model)


def test_an_embedding_quantize_cannot_convert_is_named():
    model = nn.Sequential(nn.Linear(4, 4))
    model.add_module("table", nn.Embedding(5, 4, sparse=True))
    with pytest.raises(ValueError, match=r"^table: QuantEmbedding does not support max_norm or sparse"):
        convert.quantize_(model)
