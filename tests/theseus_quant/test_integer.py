"""Integer inference (`to_integer_`, `IntegerLinear`) equals the simulated model; `save_quantized` / `load_quantized`
rebuild a quantized folder."""

from __future__ import annotations

import copy
import io
import itertools
import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import theseus_quant as tq
from theseus_quant.integer import KERNELS, IntegerLinear, _onednn_available

from .helpers import tiny_bert_config

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
AVAILABLE = [k for k in KERNELS if k != "onednn" or _onednn_available()]


def _bound(model: nn.Module, x: torch.Tensor) -> float:
    """The tolerance stated in theseus_quant.integer: fp32 rounding of the simulated sums, relative to the output's
    scale (K · qmax · s · α · 2⁻²³ per layer, a few ulps of the largest output after a few layers)."""
    return 1e-5 * (1.0 + model(x).abs().max().item())


@st.composite
def quantized_mlps(draw: st.DrawFn) -> tuple[nn.Module, torch.Tensor]:
    """A random 2-3 layer MLP quantized ternary or binary (4 or 8 bit inputs, tensor or row scales), optionally split
    (TWS) with the halves' clips moved apart, with a random input whose scale ranges over and beyond the clips."""
    seed = draw(st.integers(0, 2**16))
    torch.manual_seed(seed)
    widths = draw(st.lists(st.integers(1, 40), min_size=3, max_size=4))
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(a, b, bias=draw(st.booleans())))
        if i < len(widths) - 2:
            layers.append(nn.GELU())
    model = nn.Sequential(*layers)
    bits, act = draw(st.sampled_from([2, 1])), draw(st.sampled_from([8, 4]))
    tq.quantize_(model, bits, act, skip=[])
    granularity = draw(st.sampled_from(["tensor", "row"]))
    for module in model.modules():
        if isinstance(module, tq.QuantLinear):
            module.granularity = granularity
    x = torch.randn(draw(st.integers(1, 3)), draw(st.integers(1, 5)), widths[0]) * draw(st.sampled_from([0.1, 1, 8]))
    model.train()
    model(x)  # LSQ initialises its step on the first batch
    if bits == 2 and draw(st.booleans()):
        tq.split_ternary_(model)
        if draw(st.booleans()):  # fine-tuning moves the halves' clips apart: two quantizations of x
            for module in model.modules():
                if isinstance(module, tq.BinarySplitLinear) and isinstance(
                    module.second.act_quant, tq.UniformQuantizer
                ):
                    module.second.act_quant.clip.data.mul_(0.7)
    return model.eval(), x


@pytest.mark.parametrize("kernel", AVAILABLE)
@given(case=quantized_mlps())
def test_integer_layers_equal_the_simulated_ones_on_random_inputs(kernel, case):
    model, x = case
    integer = copy.deepcopy(model)
    record = tq.to_integer_(integer, kernel)
    assert len(record.integer) == sum(not isinstance(m, nn.GELU) for m in model) and not record.linear
    assert all(isinstance(m, IntegerLinear) for m in integer if not isinstance(m, nn.GELU))
    with torch.no_grad():
        expected, got = model(x), integer(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=_bound(model, x))


def test_one_integer_layer_is_exact_where_fp32_sums_are():
    """Inputs already on the quantization grid and codes with small sums: both paths are exact, so equal bit for bit."""
    torch.manual_seed(0)
    layer = tq.QuantLinear(64, 16, weight_bits=2, activation_bits=8)
    step = layer.act_quant.step().item()
    x = torch.randint(-127, 128, (5, 64)).float() * step
    integer = IntegerLinear.from_quantized(layer, "reference")
    with torch.no_grad():
        levels = torch.round(x / step)
        codes, scales = layer.codes()
        exact = (levels.double() @ codes.double().T) * (step * scales.double().item()) + layer.bias.double()
        assert torch.allclose(integer(x).double(), exact, rtol=1e-6, atol=1e-6)


def test_to_integer_freezes_embeddings_and_float_input_linears_to_their_quantized_weights():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 8), nn.Linear(8, 3))
    tq.quantize_(model, 2, None, skip=[])  # float inputs: no activation quantizer
    tq.split_ternary_(model, ["0"])
    ids = torch.randint(0, 20, (4, 6))
    expected = model.eval()(ids)
    record = tq.to_integer_(model)
    assert record.embedding == ("0",) and record.linear == ("1", "2") and not record.integer
    assert type(model[0]) is nn.Embedding and type(model[1]) is nn.Linear
    assert torch.equal(model(ids), expected)  # ŵ₁ + ŵ₂ summed once, as the pair's forward sums its two lookups


def test_to_integer_refuses_in_one_line_and_leaves_the_model_unchanged():
    plain = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="no quantized layer"):
        tq.to_integer_(plain)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    tq.quantize_(model, 2, 4, skip=[])  # LSQ never initialised
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=r"^0: this LSQQuantizer has not been initialised"):
        tq.to_integer_(model)
    assert isinstance(model[0], tq.QuantLinear) and all(
        torch.equal(before[k], v) for k, v in model.state_dict().items()
    )


def test_integer_linear_exports_as_one_custom_op():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4))
    tq.quantize_(model, 2, 8, skip=[])
    tq.to_integer_(model)
    program = torch.export.export(model, (torch.randn(2, 8),))
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert "theseus_quant.integer_linear.default" in targets


@pytest.fixture
def tiny_bert():
    transformers = pytest.importorskip("transformers")
    from theseus_quant.bert import quantize_attention_

    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(tiny_bert_config(attn_implementation="eager")).eval()
    tq.quantize_(model, 2, 8)
    quantize_attention_(model, 8)
    tq.split_ternary_(model, ["bert.encoder.layer.0.attention.self.query", "bert.embeddings.word_embeddings"])
    tq.binarize_(model, ["bert.encoder.layer.1.output.dense"])
    return model


def _bert_inputs() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 60, (3, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def test_a_quantized_folder_reloads_with_the_same_logits_and_runs_as_integers(tiny_bert, tmp_path):
    from transformers import BertForSequenceClassification

    from theseus_zoo.tasks.text import load_exported

    report = tq.save_quantized(tiny_bert, tmp_path, activation_bits=8)
    tiny_bert.config.save_pretrained(tmp_path)
    layout = json.loads((tmp_path / tq.export.LAYOUT_FILE).read_text())
    assert layout["version"] == tq.export.LAYOUT_VERSION and layout["activation_bits"] == 8
    assert layout["layers"]["bert.encoder.layer.0.attention.self.query"] == "split"
    assert layout["layers"]["bert.encoder.layer.1.output.dense"] == "binary"
    assert report.packed_layers > 0
    loaded = tq.load_quantized(tmp_path, lambda: BertForSequenceClassification(tiny_bert.config))
    batch = _bert_inputs()
    with torch.no_grad():
        expected = tiny_bert(**batch).logits
        assert torch.equal(loaded(**batch).logits, expected)
        assert torch.equal(load_exported(tmp_path)(**batch).logits, expected)  # the zoo's loader is this one
        record = tq.to_integer_(loaded)
        assert len(record.integer) == 2 * 6 and record.embedding == ("bert.embeddings.word_embeddings",)
        torch.testing.assert_close(loaded(**batch).logits, expected, rtol=0, atol=1e-5)


def test_an_unversioned_layout_from_before_version_1_still_loads(tiny_bert, tmp_path):
    from transformers import BertForSequenceClassification

    tq.save_quantized(tiny_bert, tmp_path, activation_bits=8)
    path = tmp_path / tq.export.LAYOUT_FILE
    old = {k: v for k, v in json.loads(path.read_text()).items() if k in ("layers", "activation_bits", "attention")}
    path.write_text(json.dumps(old))
    loaded = tq.load_quantized(tmp_path, lambda: BertForSequenceClassification(tiny_bert.config))
    with torch.no_grad():
        assert torch.equal(loaded(**_bert_inputs()).logits, tiny_bert(**_bert_inputs()).logits)
    path.write_text(json.dumps({**old, "version": 99}))
    with pytest.raises(ValueError, match="version 99"):
        tq.load_quantized(tmp_path, lambda: BertForSequenceClassification(tiny_bert.config))
    layer = next(iter(old["layers"]))  # granularity came with version 2: a version 1 layout naming one is refused
    path.write_text(json.dumps({**old, "version": 1, "granularity": {layer: "row"}}))
    with pytest.raises(ValueError, match="from quantized layout version 2 on"):
        tq.load_quantized(tmp_path, lambda: BertForSequenceClassification(tiny_bert.config))


def _integer_mlp(seed: int, clip: float) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    tq.quantize_(model, 2, 8, skip=[])
    with torch.no_grad():
        model[0].act_quant.clip.fill_(clip)
    tq.to_integer_(model)
    return model


@pytest.mark.parametrize("kernel", AVAILABLE)
def test_integer_layers_load_copy_and_pickle_with_what_they_compute(kernel):
    # onednn's prepacked weights are a cache: stale after a load, and without storage to copy or pickle.
    first, second = _integer_mlp(0, 2.5), _integer_mlp(1, 1.7)
    for model in (first, second):
        for module in model.modules():
            if isinstance(module, IntegerLinear):
                module.kernel = kernel
    x = torch.randn(3, 16)
    first(x)
    expected = second(x)  # both caches filled
    first.load_state_dict(second.state_dict())  # codes, scales, bias and the activation steps
    assert first[0].steps == second[0].steps
    assert torch.equal(first(x), expected)
    assert torch.equal(copy.deepcopy(second)(x), expected)
    buffer = io.BytesIO()
    torch.save(second, buffer)
    buffer.seek(0)
    assert torch.equal(torch.load(buffer, weights_only=False)(x), expected)


def test_a_layer_reachable_under_two_names_is_converted_once_and_stays_shared():
    torch.manual_seed(0)
    shared = nn.Linear(8, 8)
    model = nn.Sequential(shared, nn.ReLU(), shared, nn.Linear(8, 2))
    tq.quantize_(model, 2, 8, skip=[])
    model.eval()
    x = torch.randn(3, 8)
    expected = model(x)
    record = tq.to_integer_(model)
    assert isinstance(model[0], IntegerLinear) and model[0] is model[2]
    assert record.integer == ("0", "3")
    torch.testing.assert_close(model(x), expected, rtol=0, atol=_bound(model, x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_integer_layers_quantize_inputs_with_the_step_in_the_input_dtype(dtype):
    # Identity codes and scale 1: the integer layer returns its input levels times the step, which is exactly what
    # the simulated layer's activation quantizer gives when both use the step rounded to the input's dtype.
    layer = tq.QuantLinear(64, 64, bias=False, weight_bits=2, activation_bits=8, dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(64))
        layer.act_quant.clip.fill_(2.3)  # a step that bf16 and fp16 round
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(0)).to(dtype)
    integer = IntegerLinear.from_quantized(layer, "reference")
    with torch.no_grad():
        assert torch.equal(integer(x), layer(x))


def test_to_integer_refuses_a_layer_its_parent_reads_directly():
    torch.manual_seed(0)
    model = nn.Sequential(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), nn.Linear(8, 3))
    model[0].linear1 = tq.QuantLinear.from_linear(model[0].linear1)  # built by hand: quantize_ refuses to
    model.eval()
    before = [type(m) for m in model.modules()]
    with pytest.raises(
        ValueError, match=r"to_integer_ cannot swap 0\.linear1: its parent 0 is an nn\.TransformerEncoderLayer"
    ):
        tq.to_integer_(model)
    with pytest.raises(ValueError, match=r"split_ternary_ cannot swap 0\.linear1"):
        tq.split_ternary_(model)
    assert [type(m) for m in model.modules()] == before


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def test_a_quantized_folder_records_granularity_and_the_model_s_activation_bits(tmp_path):
    x = torch.randn(3, 8)
    row = _mlp()
    tq.quantize_(row, 2, 8, skip=[], linear_granularity="row")
    row[2].granularity = "tensor"  # mixed, as a layout may be
    tq.save_quantized(row, tmp_path / "row")
    layout = tq.read_layout(tmp_path / "row")
    assert layout.granularity == {"0": "row", "2": "tensor"} and layout.activation_bits == 8
    assert torch.equal(tq.load_quantized(tmp_path / "row", _mlp)(x), row.eval()(x))

    float_inputs = _mlp()
    tq.quantize_(float_inputs, 2, None, skip=[])
    with pytest.raises(ValueError, match="activation_bits=8, but this model does not quantize activations"):
        tq.save_quantized(float_inputs, tmp_path / "wrong", 8)
    with pytest.raises(ValueError, match="no quantized layer"):
        tq.save_quantized(_mlp(), tmp_path / "float")
    assert not (tmp_path / "wrong").exists() and not (tmp_path / "float").exists(), "a refused save wrote files"
    tq.save_quantized(float_inputs, tmp_path / "none")  # read from the model
    assert tq.read_layout(tmp_path / "none").activation_bits is None
    assert torch.equal(tq.load_quantized(tmp_path / "none", _mlp)(x), float_inputs.eval()(x))


def test_a_layer_kept_in_full_precision_keeps_no_namesake_deeper_in_the_model(tmp_path):
    """The layers a layout keeps were skipped by name, and a skip name matches at any dot: a kept "0" kept
    "inner.0" too, and the load failed."""

    def build():
        torch.manual_seed(0)
        return nn.ModuleDict({"0": nn.Linear(8, 8), "inner": nn.Sequential(nn.Linear(8, 4))})

    def forward(model, x):
        return model["inner"](model["0"](x))

    model = build()
    tq.quantize_(model, 2, 8, skip=["/0"])
    assert [name for name, module in model.named_modules() if type(module) is nn.Linear] == ["0"]
    tq.save_quantized(model, tmp_path / "kept")
    x = torch.randn(3, 8)
    assert torch.equal(forward(tq.load_quantized(tmp_path / "kept", build), x), forward(model.eval(), x))
