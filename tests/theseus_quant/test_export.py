"""Packed export: 2 / 1 bits a weight, and a loader that rebuilds the same model bit for bit."""

import copy
import zipfile

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from theseus_core.testing import ToyStack
from theseus_quant import export
from theseus_quant.convert import quantize_
from theseus_quant.tws import binarize_, split_ternary_

from .helpers import bert_batch, tiny_bert

STAGES = ["ternary", "binary", "split", "half split"]


def build(stage: str, width: int, blocks: int, activation_bits, seed: int) -> ToyStack:
    torch.manual_seed(seed)
    model = ToyStack(width=width, num_blocks=blocks, dropout=0.0)
    quantize_(model, 1 if stage == "binary" else 2, activation_bits, skip=["head"])
    model(*model.example_inputs())  # initialise LSQ steps
    if stage == "split":
        split_ternary_(model)
    elif stage == "half split":
        split_ternary_(model, ["blocks.0.fc1"])
        binarize_(model)
    return model


@given(
    st.sampled_from(STAGES),
    st.sampled_from([4, 8, 12]),
    st.integers(1, 3),
    st.sampled_from([8, 4, None]),
    st.integers(0, 2**16),
)
def test_export_then_load_round_trips_bit_for_bit(tmp_path_factory, stage, width, blocks, activation_bits, seed):
    model = build(stage, width, blocks, activation_bits, seed)
    with torch.no_grad():  # train the model a little so nothing is at its initial value
        for param in model.parameters():
            param.add_(0.01 * torch.randn_like(param))
    path = tmp_path_factory.mktemp("packed") / "model.safetensors"
    export.save_packed(model, path)
    loaded = export.load_packed(lambda: build(stage, width, blocks, activation_bits, seed + 1), path)
    for training in (False, True):
        model.train(training), loaded.train(training)
        inputs = model.example_inputs(seed=seed)
        assert torch.equal(loaded(*inputs), model(*inputs)), "outputs differ after the round trip"


@given(st.sampled_from([1, 2]), st.lists(st.integers(1, 7), min_size=1, max_size=3), st.integers(0, 2**16))
def test_pack_unpack_round_trips_codes(bits, shape, seed):
    generator = torch.Generator().manual_seed(seed)
    symbols = torch.randint(0, 3 if bits == 2 else 2, shape, generator=generator)
    codes = (symbols - 1 if bits == 2 else symbols * 2 - 1).to(torch.int8)
    packed = export.pack_codes(codes, bits)
    assert packed.dtype == torch.uint8 and packed.numel() == -(-codes.numel() * bits // 8)
    assert torch.equal(export.unpack_codes(packed, bits, codes.shape), codes)


def test_torch_save_fallback_is_weights_only_and_round_trips(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "save_file", None)
    model = build("split", 8, 2, 8, 0)
    path = tmp_path / "model.pt"
    export.save_packed(model, path)
    assert zipfile.is_zipfile(path)
    torch.load(path, weights_only=True)  # nothing but tensors and a string
    loaded = export.load_packed(build("split", 8, 2, 8, 1), path)
    inputs = model.example_inputs()
    assert torch.equal(loaded(*inputs), model(*inputs))


def test_loading_into_a_different_structure_raises(tmp_path):
    path = tmp_path / "model.safetensors"
    export.save_packed(build("split", 8, 2, 8, 0), path)
    with pytest.raises(ValueError, match="differ"):
        export.load_packed(build("ternary", 8, 2, 8, 0), path)
    ternary = tmp_path / "ternary.safetensors"
    export.save_packed(build("ternary", 8, 2, 8, 0), ternary)
    with pytest.raises(ValueError, match="bits"):
        export.load_packed(build("binary", 8, 2, 8, 0), ternary)
    with pytest.raises(ValueError, match="no quantized layer"):
        export.save_packed(ToyStack(), path)


def test_bert_round_trip_and_size(tmp_path):
    model = tiny_bert(layers=2)
    quantize_(model, 2, 8)
    split = copy.deepcopy(model)
    split_ternary_(split)
    for candidate, name in ((model, "ternary"), (split, "split")):
        path = tmp_path / f"{name}.safetensors"
        report = export.save_packed(candidate, path)
        skeleton = tiny_bert(layers=2, seed=1)
        quantize_(skeleton, 2, 8)
        if name == "split":
            split_ternary_(skeleton)
        loaded = export.load_packed(skeleton, path)
        expected = candidate(**bert_batch()).last_hidden_state
        assert torch.equal(loaded(**bert_batch()).last_hidden_state, expected)
        assert report.ratio > 1 and "smaller" in str(report)


class Tied(nn.Module):
    """A masked LM's shape: word embeddings and an output projection holding one Parameter."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(12, 8)
        self.hidden = nn.Linear(8, 8)
        self.out = nn.Linear(8, 12, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(self.embed(ids))))


def tied(**quantize) -> Tied:
    model = Tied()
    quantize_(model, 2, 8, **quantize)
    return model


def test_tied_weights_round_trip_when_quantized_alike_and_are_refused_otherwise(tmp_path):
    ids = torch.randint(0, 12, (3, 5), generator=torch.Generator().manual_seed(0))
    alike = tied(linear_granularity="row")  # both per row: one ŵ serves both
    with torch.no_grad():
        alike.embed.weight.add_(0.1 * torch.randn_like(alike.embed.weight))
    export.save_packed(alike, tmp_path / "alike.safetensors")
    loaded = export.load_packed(lambda: tied(linear_granularity="row"), tmp_path / "alike.safetensors")
    assert loaded.out.weight is loaded.embed.weight
    assert torch.equal(loaded(ids), alike(ids))
    for name, model in (("two ways", tied()), ("one plain", tied(skip=["out"]))):  # row/tensor; ŵ read unquantized
        path = tmp_path / f"{name}.safetensors"
        with pytest.raises(ValueError, match="embed"):
            export.save_packed(model, path)
        assert not path.exists(), f"{name}: a refused export wrote its file"
