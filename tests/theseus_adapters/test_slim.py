"""Slim Transformer successors: fewer heads and a smaller FFN at the same hidden size, started by
structured pruning of the predecessor layer, exported as plain transformers models."""

import pytest
import torch
import transformers
from torch import nn

import theseus_core as th
from tests.theseus_adapters.test_hf import reload_without_theseus, tokens
from theseus_adapters import hf, slim

BERT = {"vocab_size": 64, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 48}
LLAMA = {**BERT, "num_key_value_heads": 2, "max_position_embeddings": 64, "num_hidden_layers": 4}


def tiny_bert() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.BertConfig(**BERT, num_hidden_layers=4, num_labels=3)
    return transformers.BertForSequenceClassification(config).eval()


def tiny_llama() -> nn.Module:
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval()


CASES = {  # model, reloading class, hf.plan options, inputs
    "bert": (tiny_bert, "AutoModelForSequenceClassification", {"intermediate_size": 20}, tokens()),
    "llama": (tiny_llama, "AutoModelForCausalLM", {"heads": 2, "intermediate_size": 20}, tokens(padded=False)),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Per case: the finalized slim model, its outputs, and what a process without theseus reloaded."""
    folder = tmp_path_factory.mktemp("slim")
    cases, results = [], {}
    for name, (make, auto, options, inputs) in CASES.items():
        model = make()
        plan = hf.plan(model, num_layers=2, **options)
        theseus = th.replace_(model, plan, example_kwargs={**inputs, "use_cache": False})
        theseus.rate = 0.5
        model.train()
        model(**inputs, use_cache=False)
        compact = theseus.finalize().eval()
        with torch.no_grad():
            results[name] = {"model": compact, "output": compact(**inputs)[0]}
        compact.save_pretrained(folder / name)
        torch.save(inputs, folder / f"{name}.inputs.pt")
        case = {"auto": auto, "folder": str(folder / name), "generates": False, "generate": {}}
        cases.append(case | {"inputs": str(folder / f"{name}.inputs.pt"), "result": str(folder / f"{name}.pt")})
    for name, reloaded in zip(CASES, reload_without_theseus(cases), strict=True):
        results[name]["reloaded"] = reloaded
    return results


@pytest.mark.parametrize("name", CASES)
def test_slim_successors_reload_in_plain_transformers_with_identical_outputs(exported, name):
    torch.testing.assert_close(exported[name]["reloaded"]["output"], exported[name]["output"], rtol=0, atol=0)


def test_finalize_writes_the_slim_sizes_into_the_config(exported):
    bert, llama = exported["bert"]["model"], exported["llama"]["model"]
    assert (bert.config.intermediate_size, bert.config.num_attention_heads, bert.config.num_hidden_layers) == (20, 4, 2)
    assert bert.bert.encoder.layer[1].intermediate.dense.out_features == 20
    config = llama.config
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (2, 2, 8)
    assert config.intermediate_size == 20
    attention = llama.model.layers[0].self_attn
    assert (attention.q_proj.out_features, attention.k_proj.out_features, attention.num_key_value_groups) == (16, 16, 1)


def zero_units(layer: nn.Module, neurons: list[int], heads: list[int], head_dim: int) -> None:
    """Silences FFN neurons and heads: their output weights become 0, so the layer computes as without them."""
    with torch.no_grad():
        layout = slim.slim_layout(layer)
        layer.get_submodule(layout.ffn_out).weight[:, neurons] = 0
        if layout.output is not None:
            for head in heads:
                layer.get_submodule(layout.output).weight[:, head * head_dim : (head + 1) * head_dim] = 0


@pytest.mark.parametrize(("make", "heads"), [(tiny_bert, None), (tiny_llama, 2)])
def test_pruning_drops_the_silent_units_first_so_the_layer_computes_the_same(make, heads):
    """Magnitude importance: units whose output weights are 0 score 0 and go first, and removing them changes
    nothing. A scoring bug (keeping the wrong neurons or heads, or misplacing a head's slice) breaks equality."""
    model = make()
    stack = hf.layer_stack(model)
    layer = model.get_submodule(stack.path)[1]
    silent_heads = [0, 3] if heads else []  # one per key/value group of the Llama layer (heads 0-1, 2-3)
    zero_units(layer, [0, 5, 6, 17, 30, 31, 40, 47], silent_heads, 8)
    hidden = torch.randn(2, 7, 32)
    kwargs = {}
    if heads:
        positions = torch.arange(7)[None]
        kwargs["position_embeddings"] = model.model.rotary_emb(hidden, positions)
    with torch.no_grad():
        expected = layer(hidden, **kwargs)
        pruned = slim.prune_layer_(layer, heads=heads, intermediate_size=40)
        actual = pruned(hidden, **kwargs)
    expected, actual = (value[0] if isinstance(value, tuple) else value for value in (expected, actual))
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
    assert pruned.get_submodule(slim.slim_layout(pruned).ffn_out).in_features == 40


@pytest.mark.parametrize(
    ("make", "options", "message"),
    [
        (tiny_bert, {"heads": 2}, "derives its head size"),
        (tiny_llama, {"heads": 3}, "multiple of num_key_value_heads=2"),
        (tiny_llama, {"intermediate_size": 49}, r"intermediate_size must be an integer in \[1, 48\]"),
        (tiny_llama, {"heads": 2, "hidden_size": 16}, "pick one"),
        (
            lambda: transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=4, n_head=2, vocab_size=64)),
            {"intermediate_size": 8},
            "none of theseus_adapters.slim.SLIM_LAYOUTS",
        ),
    ],
)
def test_slim_options_are_refused_where_the_export_could_not_describe_them(make, options, message):
    with pytest.raises(ValueError, match=message):
        hf.plan(make(), num_layers=2, **options)
