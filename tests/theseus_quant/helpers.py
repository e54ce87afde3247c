"""Strategies and small models shared by the theseus_quant tests."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from torch import nn

KINDS = ("normal", "uniform", "sparse", "heavy", "skewed", "constant")


def _skewed(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    """Rows of one large weight and ``cols - 1`` small positive ones whose sum exceeds it: the
    groups where the reference TWS assignment gives a ∉ (0, 1) (see theseus_quant.tws)."""
    large = 1.0 + torch.rand(rows, 1, generator=generator)
    low, high = 1.0 / (cols - 1), 0.7 / (0.3 * cols + 0.7)  # Σ small > large, small ≤ Δ
    small = large * (low + (high - low) * (0.3 + 0.4 * torch.rand(rows, 1, generator=generator)))
    small = small * (1 + 1e-3 * torch.rand(rows, cols - 1, generator=generator))
    sign = torch.where(torch.rand(rows, 1, generator=generator) < 0.5, -1.0, 1.0)
    weight = torch.cat([sign * large, small], dim=1)
    return weight[:, torch.randperm(cols, generator=generator)]


@st.composite
def weights(draw: st.DrawFn, max_rows: int = 9, max_cols: int = 12) -> torch.Tensor:
    """Random weight matrices: several distributions (exact zeros, heavy tails, skewed groups,
    constant magnitudes) and magnitudes from 1e-3 to 50."""
    kind = draw(st.sampled_from(KINDS))
    rows = draw(st.integers(1, max_rows))
    cols = draw(st.integers(5 if kind == "skewed" else 1, max_cols))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    if kind == "normal":
        weight = torch.randn(rows, cols, generator=generator)
    elif kind == "uniform":
        weight = torch.rand(rows, cols, generator=generator) * 2 - 1
    elif kind == "sparse":
        weight = torch.randn(rows, cols, generator=generator) * (torch.rand(rows, cols, generator=generator) > 0.6)
    elif kind == "heavy":
        weight = torch.randn(rows, cols, generator=generator) ** 3
    elif kind == "skewed":
        weight = _skewed(rows, cols, generator)
    else:
        weight = torch.where(torch.rand(rows, cols, generator=generator) < 0.5, -1.0, 1.0)
    return weight * draw(st.sampled_from([1e-3, 1.0, 50.0]))


def tiny_bert_config(layers: int = 2, **overrides):
    from transformers import BertConfig

    settings = {
        "vocab_size": 60,
        "hidden_size": 16,
        "num_hidden_layers": layers,
        "num_attention_heads": 2,
        "intermediate_size": 24,
        "max_position_embeddings": 32,
        "num_labels": 3,
    }
    return BertConfig(**(settings | overrides))


def tiny_bert(
    layers: int = 2, seed: int = 0, classifier: bool = False, attention: str | None = None, **overrides
) -> nn.Module:
    """A tiny random BertModel (or BertForSequenceClassification) built from a config in code;
    ``attention`` sets the attention implementation ("eager", "sdpa"; default: transformers')."""
    from transformers import BertForSequenceClassification, BertModel

    torch.manual_seed(seed)
    config = tiny_bert_config(layers, **overrides)
    model = BertForSequenceClassification(config) if classifier else BertModel(config)
    if attention is not None:
        model.set_attn_implementation(attention)
    return model.eval()


def bert_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, 60, (3, 9), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def snapshot(model: nn.Module) -> dict:
    """Everything `quantize_`-style surgery could change: modules (identity and type), parameters,
    buffers, requires_grad and training flags."""
    return {
        "modules": [(name, id(m), type(m)) for name, m in model.named_modules(remove_duplicate=False)],
        "state": {key: value.detach().clone() for key, value in model.state_dict().items()},
        "params": [(name, id(p), p.requires_grad) for name, p in model.named_parameters()],
        "training": [m.training for m in model.modules()],
    }


def assert_refused(model: nn.Module, call) -> None:
    """``call(model)`` raises TypeError or ValueError and leaves ``model`` as it was."""
    import pytest

    before = snapshot(model)
    with pytest.raises((TypeError, ValueError)):
        call(model)
    assert_unchanged(model, before)


def assert_unchanged(model: nn.Module, before: dict, after: dict | None = None) -> None:
    after = snapshot(model) if after is None else after
    assert after["modules"] == before["modules"], "modules changed"
    assert after["params"] == before["params"], "parameters or requires_grad changed"
    assert after["training"] == before["training"], "training flags changed"
    assert list(after["state"]) == list(before["state"]), "state_dict keys changed"
    for key, value in before["state"].items():
        assert torch.equal(after["state"][key], value), f"{key} changed"
