"""BERT-family adapter on tiny random BERT, RoBERTa and MPNet configs (no hub)."""

import pytest
import torch
from torch import nn
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    MPNetConfig,
    MPNetForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
)

import theseus_core as th
from theseus_adapters import bert
from theseus_core.testing import assert_replacement_equivalence

TINY = {"vocab_size": 99, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 48, "num_labels": 3}


def tiny(family: str, layers: int = 6) -> nn.Module:
    torch.manual_seed(0)
    if family == "bert":
        return BertForSequenceClassification(BertConfig(num_hidden_layers=layers, **TINY))
    if family == "roberta":
        config = RobertaConfig(num_hidden_layers=layers, max_position_embeddings=40, pad_token_id=1, **TINY)
        return RobertaForSequenceClassification(config)
    return MPNetForSequenceClassification(MPNetConfig(num_hidden_layers=layers, **TINY))


def batch(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, 99, (3, 11), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 7:] = 0  # padding, so the mask matters
    return {"input_ids": input_ids, "attention_mask": attention_mask}


FAMILIES = ["bert", "roberta", "mpnet"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("num_layers", [3, 4])  # 6 → 3 even, 6 → 4 uneven (2, 2, 1, 1)
def test_replacement_equivalence(family, num_layers):
    model = tiny(family)
    assert_replacement_equivalence(model, bert.plan(model, num_layers), (), batch())


@pytest.mark.parametrize(
    ("init", "sources"),
    [
        ("first", [0, 1, 2]),
        ("last", [4, 5, 6]),
        ("every_other", [0, 3, 5]),
        ("group_last", [2, 4, 6]),
        ([6, 0, 3], [6, 0, 3]),
    ],
)
def test_successors_start_from_the_chosen_layers(init, sources):
    model = tiny("bert", layers=7)  # 7 → 3: groups of 3, 2, 2
    originals = [layer.output.dense.weight.clone() for layer in model.bert.encoder.layer]
    theseus = th.replace_(model, bert.plan(model, num_layers=3, init=init))
    assert [len(site.predecessor.layers) for site in theseus.sites] == [3, 2, 2]
    for site, source in zip(theseus.sites, sources, strict=True):
        assert torch.equal(site.successor.inner.output.dense.weight, originals[source])


def test_finalize_renumbers_layer_indices():
    model = tiny("bert")
    th.replace_(model, bert.plan(model, num_layers=3, init="last")).finalize()
    assert [layer.attention.self.layer_idx for layer in model.bert.encoder.layer] == [0, 1, 2]


def test_narrow_successors_run_behind_projections():
    model = tiny("mpnet")
    theseus = th.replace_(
        model, bert.plan(model, num_layers=2, hidden_size=16), example_inputs=(), example_kwargs=batch()
    )
    site = theseus.sites[0]
    assert site.successor.inner.attention.attn.q.out_features == 16
    assert (site.successor.in_proj.in_features, site.successor.in_proj.out_features) == (32, 16)
    compact = theseus.finalize().eval()
    assert isinstance(compact.mpnet.encoder.layer[0], th.Projected)
    assert compact(**batch()).logits.shape == (3, 3)


@pytest.mark.parametrize(
    ("make", "kwargs", "message"),
    [
        (lambda: tiny("bert"), {"num_layers": 6}, r"num_layers must be an integer in \[1, 6\)"),
        (lambda: tiny("bert"), {"num_layers": 0}, "num_layers"),
        (lambda: tiny("bert"), {"num_layers": 3, "init": "middle"}, "init must be one of"),
        (lambda: tiny("bert"), {"num_layers": 3, "init": [0, 1]}, "3 layer indices"),
        (lambda: tiny("bert"), {"num_layers": 3, "group_sizes": [3, 3]}, "must be 3 positive integers summing to 6"),
        (lambda: tiny("bert"), {"num_layers": 2, "group_sizes": [4, 1]}, "summing to"),
        (lambda: tiny("bert"), {"num_layers": 2, "hidden_size": 18}, "divisible"),
        (lambda: nn.Linear(2, 2), {"num_layers": 2}, "supports transformers models"),
    ],
)
def test_bad_input_raises_before_anything_changes(make, kwargs, message):
    model = make()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        th.replace_(model, bert.plan(model, **kwargs))
    assert not any(isinstance(m, th.ReplacementSite) for m in model.modules())
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
