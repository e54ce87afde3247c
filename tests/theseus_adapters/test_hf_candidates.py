"""theseus_adapters.hf_candidates: any choice of a budget search reloads in plain transformers."""

import copy

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    BertConfig,
    BertForSequenceClassification,
    LlamaConfig,
    LlamaForCausalLM,
)

import theseus_core as th
from theseus_adapters import hf, hf_candidates

pytest.importorskip("scipy")


def tiny_llama():
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return LlamaForCausalLM(config).eval()


def tiny_bert():
    config = BertConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=6,
        num_attention_heads=2,
        num_labels=3,
        attn_implementation="eager",
    )
    return BertForSequenceClassification(config).eval()


@pytest.mark.parametrize(
    ("build", "auto", "layers"),
    [
        (tiny_llama, AutoModelForCausalLM, "model.layers"),
        (tiny_bert, AutoModelForSequenceClassification, "bert.encoder.layer"),
    ],
)
def test_a_chosen_mix_of_kept_skipped_and_copied_groups_reloads_with_equal_outputs(build, auto, layers, tmp_path):
    torch.manual_seed(0)
    model = build()
    ids = torch.randint(0, 64, (2, 7))
    found, hook = hf_candidates.candidates(model, hf.plan(model, 3))
    library = th.CandidateLibrary(model, found, example_inputs=[(ids,)], on_finalize=hook)
    paths = library.paths
    assert all(set(library.names(path)) == {"keep", "skip", "one"} for path in paths)
    choice = dict(zip(paths, ["keep", "skip", "one"], strict=True))  # 2 kept layers, none, one copied
    compressed = copy.deepcopy(model)
    theseus = th.replace_(compressed, library.plan(choice), example_inputs=[(ids,)])
    finalized = theseus.finalize().eval()
    stack = finalized.get_submodule(layers)
    assert len(stack) == 3 and finalized.config.num_hidden_layers == 3
    indices = [module.layer_idx for layer in stack for module in layer.modules() if hasattr(module, "layer_idx")]
    assert sorted(set(indices)) == [0, 1, 2]  # renumbered for the KV cache
    finalized.save_pretrained(tmp_path)
    reloaded = auto.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, finalized(ids).logits)
