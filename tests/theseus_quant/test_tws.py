"""Ternary weight splitting: BWN(w1) + BWN(w2) = TWN(w), and split models compute what ternary ones did."""

import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from theseus_core.testing import toy_stacks
from theseus_quant import tws
from theseus_quant.convert import quantize_
from theseus_quant.layers import BinarySplitEmbedding, BinarySplitLinear, QuantLinear
from theseus_quant.quantizers import binarize, binary_codes, ternarize, ternary_codes

from .helpers import _skewed, assert_unchanged, bert_batch, snapshot, tiny_bert, weights

GRANULARITY = st.sampled_from(["tensor", "row"])


def assert_split_is_exact(weight: torch.Tensor, granularity: str) -> None:
    w1, w2 = tws.split_ternary_weight(weight, granularity)
    scale = weight.abs().max().item() + 1e-30
    torch.testing.assert_close(w1 + w2, weight, rtol=1e-5, atol=1e-6 * scale, msg="w1 + w2 != w")
    ternary = ternarize(weight, granularity)
    torch.testing.assert_close(
        binarize(w1, granularity) + binarize(w2, granularity),
        ternary,
        rtol=1e-5,
        atol=1e-6 * scale,
        msg="BWN(w1) + BWN(w2) != TWN(w)",
    )
    _, alpha = ternary_codes(weight, granularity)
    for half in (w1, w2):
        _, half_alpha = binary_codes(half, granularity)
        torch.testing.assert_close(half_alpha, alpha / 2, rtol=1e-5, atol=1e-7 * scale, msg="scale != α/2")


@given(weights(), GRANULARITY)
def test_binary_halves_sum_to_the_ternary_weight(weight, granularity):
    assert_split_is_exact(weight, granularity)


def reference_a(weight: torch.Tensor) -> float:
    w = weight.double().reshape(-1)
    kept = w.abs() > 0.7 * w.abs().mean()
    s_i, s_j, s_k = w.abs()[kept].sum(), w[~kept & (w >= 0)].abs().sum(), w[~kept & (w < 0)].abs().sum()
    return ((s_i + s_k - s_j) / (2 * s_i)).item()


def test_skewed_groups_where_the_reference_formula_breaks_still_split_exactly():
    weight = _skewed(1, 10, torch.Generator().manual_seed(0))
    assert not 0 < reference_a(weight) < 1, "this example should defeat the reference assignment"
    assert_split_is_exact(weight, "tensor")


def near_threshold_weight() -> torch.Tensor:
    """A float32 weight with an element at float32(Δ), where Δ computed in float64 is below it: kept in
    float64, dropped in float32. Found by search (a few hundred tries at most)."""
    for seed in range(2000):
        w = torch.randn(64, generator=torch.Generator().manual_seed(seed))
        for _ in range(5):
            delta = 0.7 * w.double().abs().sum() / w.numel()
            if delta.float().double() <= delta:
                break
            w[0] = delta.float() * (1 if w[0] >= 0 else -1)
        delta = 0.7 * w.double().abs().sum() / w.numel()
        if w[0].abs().double() > delta and not w[0].abs() > delta.float():
            return w.reshape(1, -1)
    raise AssertionError("no near-threshold weight found")


def test_an_element_at_the_threshold_falls_on_the_same_side_as_in_the_forward_pass():
    # Found on a BERT-base 3072x768 matrix: the split decided I in float64, ternarize in float32.
    weight = near_threshold_weight()
    assert_split_is_exact(weight, "tensor")
    layer = QuantLinear(64, 1, weight_bits=2, activation_bits=None)
    with torch.no_grad():
        layer.weight.copy_(weight)
    tws.split_ternary_(torch.nn.Sequential(layer))


@pytest.mark.parametrize(
    "weight",
    [
        torch.tensor([[1.0, -1.0, 1.0, -1.0]]),  # J ∪ K empty: every weight above Δ
        torch.zeros(3, 4),  # α = 0
        torch.tensor([[0.0, 0.0, 5.0, 0.0]]),  # exact zeros join J
        torch.tensor([[2.5]]),  # one weight
        torch.tensor([[1e-30, -1e-30, 1.0]]),
    ],
)
@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_degenerate_groups_split_exactly(weight, granularity):
    assert_split_is_exact(weight, granularity)
    w1, w2 = tws.split_ternary_weight(weight, granularity)
    zero = (ternarize(weight, granularity) == 0) & (weight.abs().max() > 0)
    assert torch.all((w1[zero] >= 0) != (w2[zero] >= 0)), "the halves must cancel where the ternary weight is 0"


def _forward(model, inputs):
    with torch.no_grad():
        return model(*inputs)


def _layer_calls(model, inputs):
    """Input and output of every quantized Linear in one forward pass."""
    calls, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, QuantLinear):
            handles.append(module.register_forward_hook(lambda m, a, out, name=name: calls.update({name: (a[0], out)})))
    _forward(model, inputs)
    for handle in handles:
        handle.remove()
    return calls


@given(toy_stacks(max_blocks=3, dropout=False), st.sampled_from([8, 4, None]), st.integers(0, 100))
def test_split_model_computes_what_the_ternary_model_computed(model, activation_bits, seed):
    quantize_(model, 2, activation_bits, skip=["head"])
    inputs = model.example_inputs(seed=seed)
    for training in (False, True):
        model.train(training)
        ternary = _forward(model, inputs)  # also initialises LSQ steps
        calls = _layer_calls(model, inputs)
        split = copy.deepcopy(model)
        record = tws.split_ternary_(split)
        assert set(record.split) == set(calls)
        assert not any(type(m) is QuantLinear and m.weight_bits == 2 for m in split.modules())
        # Layer by layer, on the same input: equal to float rounding, with quantized activations too.
        for name, (x, out) in calls.items():
            torch.testing.assert_close(_forward(split.get_submodule(name), (x,)), out, rtol=1e-5, atol=1e-5)
        if activation_bits is None:
            # Whole model: with quantized activations a rounding difference of 1e-7 can move an activation
            # across a rounding boundary (one step, ~1e-2 at 8 bits) in a later layer, so only without them.
            torch.testing.assert_close(_forward(split, inputs), ternary, rtol=1e-5, atol=1e-5)


def test_split_bert_computes_what_the_ternary_bert_computed():
    model = tiny_bert()
    quantize_(model, 2, None)
    ternary = model(**bert_batch()).last_hidden_state
    record = tws.split_ternary_(model)
    assert isinstance(model.embeddings.word_embeddings, BinarySplitEmbedding)
    query = model.encoder.layer[0].attention.self.query
    assert isinstance(query, BinarySplitLinear) and query.out_features == 16
    assert "encoder.layer.1.output.dense" in record.split and "split" in str(record)
    torch.testing.assert_close(model(**bert_batch()).last_hidden_state, ternary, rtol=1e-5, atol=1e-5)


def test_both_halves_carry_the_activation_quantizer_state_and_half_the_bias():
    torch.manual_seed(0)
    layer = QuantLinear(5, 3, weight_bits=2, activation_bits=4)
    model = torch.nn.Sequential(layer)
    layer.act_quant(torch.randn(8, 5))  # LSQ initialised
    with torch.no_grad():
        layer.act_quant.step.mul_(1.7)
    tws.split_ternary_(model)
    split = model[0]
    for half in (split.first, split.second):
        assert half.act_quant is not layer.act_quant
        assert torch.equal(half.act_quant.step, layer.act_quant.step) and bool(half.act_quant.initialized)
        assert torch.equal(half.bias, layer.bias / 2) and half.weight_bits == 1


def test_split_names_choose_layers_and_bad_names_change_nothing():
    model = tiny_bert()
    quantize_(model, 2, None, embeddings=False)
    before = snapshot(model)
    with pytest.raises(ValueError, match="not ternary layers"):
        tws.split_ternary_(model, ["encoder.layer.0.attention.self.query", "encoder.layer.9.nothing"])
    with pytest.raises(ValueError, match="not ternary layers"):
        tws.split_ternary_(model, [])
    assert_unchanged(model, before)
    record = tws.split_ternary_(model, ["encoder.layer.0.attention.self.query"])
    assert record.split == ("encoder.layer.0.attention.self.query",) and len(record.kept_ternary) == 11
    assert len(tws.binarize_(model)) == 11
    assert not any(getattr(m, "weight_bits", 1) == 2 for m in model.modules())


def test_split_without_ternary_layers_raises():
    model = tiny_bert()
    with pytest.raises(ValueError, match="no ternary layer"):
        tws.split_ternary_(model)
    quantize_(model, 1, 8)
    with pytest.raises(ValueError, match="no ternary layer"):
        tws.split_ternary_(model)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_half_precision_layers_split_within_their_dtype_s_rounding(dtype, granularity, monkeypatch):
    # The halves are rounded to the weight's dtype: the check allows a few ulps of α there, and still catches a
    # split that is off by a part of α.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 33).to(dtype), torch.nn.ReLU(), torch.nn.Linear(33, 7).to(dtype))
    quantize_(model, 2, None, skip=[], linear_granularity=granularity)
    x = torch.randn(4, 48, dtype=dtype)
    ternary = model(x)
    broken = copy.deepcopy(model)
    tws.split_ternary_(model)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(model(x), ternary, rtol=8 * eps, atol=8 * eps * ternary.abs().max().item())
    tiny = copy.deepcopy(broken)
    with torch.no_grad():
        for layer in (tiny[0], tiny[2]):
            layer.weight.mul_(1e-5)  # scales below fp16's smallest normal number: absolute rounding steps
    tws.split_ternary_(tiny)
    split = tws.split_ternary_weight
    monkeypatch.setattr(tws, "split_ternary_weight", lambda w, g: tuple(h * 1.05 for h in split(w, g)))
    before = snapshot(broken)
    with pytest.raises(RuntimeError, match="broke its quantized weight"):
        tws.split_ternary_(broken)
    assert_unchanged(broken, before)


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(12, 8)
        self.out = torch.nn.Linear(8, 12)
        self.out.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(ids))


def test_tied_layers_split_together_and_stay_tied_or_are_refused():
    ids = torch.randint(0, 12, (3, 5), generator=torch.Generator().manual_seed(0))
    model = Tied()
    quantize_(model, 2, None, skip=[], linear_granularity="row")
    ternary = model(ids)
    record = tws.split_ternary_(model)
    assert record.split == ("embed", "out")
    assert model.out.first.weight is model.embed.first.weight and model.out.second.weight is model.embed.second.weight
    torch.testing.assert_close(model(ids), ternary, rtol=1e-5, atol=1e-5)
    for names, match in ((["out"], "tied to embed"), (None, "per row and per tensor")):
        model = Tied()
        quantize_(model, 2, None, skip=[])  # row embeddings, tensor Linear: their splits differ
        if names is not None:
            model.out.granularity = "row"
        before = snapshot(model)
        with pytest.raises(ValueError, match=match):
            tws.split_ternary_(model, names)
        assert_unchanged(model, before)


def test_a_layer_reachable_under_two_names_is_split_once_and_listed_once():
    shared = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(shared, torch.nn.ReLU(), shared, torch.nn.Linear(4, 2))
    quantize_(model, 2, None, skip=[])
    record = tws.split_ternary_(model)
    assert model[0] is model[2] and isinstance(model[0], BinarySplitLinear)
    assert record.split == ("0", "3") and record.aliases == {"2": "0"}
    assert str(record).startswith("split_ternary_: 2 ternary layers → binary pairs: 0 (also 2), 3")


def test_binarize_refuses_a_string_of_names():
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(11)])
    quantize_(model, 2, None, skip=[])
    before = snapshot(model)
    with pytest.raises(TypeError, match="names must be a list"):
        tws.binarize_(model, "10")  # not "1" and "0"
    assert_unchanged(model, before)
    assert all(layer.weight_bits == 2 for layer in model)
