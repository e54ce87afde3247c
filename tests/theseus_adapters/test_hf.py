"""The transformers adapter on tiny configs of every supported family (no hub).

Each family is compressed with `hf.plan`, trained a step at rate 0.5, finalized and saved; one subprocess that
cannot import theseus reloads every saved model with ``AutoModel*.from_pretrained`` and runs it (one process,
because its start-up, importing transformers, is most of the time).
"""

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import transformers
from torch import nn

import theseus_core as th
from theseus_adapters import hf

TEXT = {"vocab_size": 64, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 48}
DECODER = {**TEXT, "num_key_value_heads": 2, "max_position_embeddings": 64, "num_hidden_layers": 4}
BART = {"vocab_size": 64, "d_model": 16, "encoder_attention_heads": 2, "decoder_attention_heads": 2}
BART.update(encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32)
NEW_TOKENS = 8


def build(config: str, model: str, **options: Any) -> nn.Module:
    torch.manual_seed(0)
    return getattr(transformers, model)(getattr(transformers, config)(**options)).eval()


def tokens(length: int = 10, padded: bool = True) -> dict[str, torch.Tensor]:
    input_ids = torch.randint(3, 64, (2, length), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    if padded:
        attention_mask[1, length - 3 :] = 0  # padding, so the mask matters
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@dataclass
class Family:
    make: Callable[[], nn.Module]
    auto: str  # the AutoModel* class that reloads it
    inputs: dict[str, torch.Tensor] = field(default_factory=tokens)
    options: dict[str, Any] = field(default_factory=dict)  # for hf.plan
    generates: bool = False  # a decoder: greedy generate() with the KV cache is compared too
    stack: str = ""  # the stack the plan must find


def decoder(config: str, model: str, stack: str = "model.layers", **options: Any) -> Family:
    return Family(
        lambda: build(config, model, **DECODER, **options),
        "AutoModelForCausalLM",
        tokens(padded=False),
        generates=True,
        stack=stack,
    )


FAMILIES = {
    "bert": Family(
        lambda: build("BertConfig", "BertForSequenceClassification", **TEXT, num_hidden_layers=4, num_labels=3),
        "AutoModelForSequenceClassification",
        stack="bert.encoder.layer",
    ),
    "roberta": Family(
        lambda: build("RobertaConfig", "RobertaModel", **TEXT, num_hidden_layers=4, pad_token_id=1),
        "AutoModel",
        options={"init": "last"},
        stack="encoder.layer",
    ),
    "mpnet": Family(
        lambda: build("MPNetConfig", "MPNetForMaskedLM", **TEXT, num_hidden_layers=5),
        "AutoModelForMaskedLM",
        options={"init": "group_last"},  # 5 → 2: groups of 3, 2
        stack="mpnet.encoder.layer",
    ),
    "distilbert": Family(
        lambda: build(
            "DistilBertConfig", "DistilBertForSequenceClassification", vocab_size=64, dim=32, n_heads=4, n_layers=4
        ),
        "AutoModelForSequenceClassification",
        options={"init": "every_other"},
        stack="distilbert.transformer.layer",
    ),
    "vit": Family(
        lambda: build("ViTConfig", "ViTModel", **TEXT, num_hidden_layers=4, image_size=16, patch_size=4),
        "AutoModel",
        {"pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))},
        stack="layers",
    ),
    "bart encoder": Family(
        lambda: build("BartConfig", "BartModel", **BART, encoder_layers=4, decoder_layers=2),
        "AutoModel",
        {**tokens(), "decoder_input_ids": tokens(4, padded=False)["input_ids"]},
        options={"stack": "encoder"},
        stack="encoder.layers",
    ),
    "bart decoder": Family(
        lambda: build("BartConfig", "BartForConditionalGeneration", **BART, encoder_layers=2, decoder_layers=4),
        "AutoModelForSeq2SeqLM",
        tokens(),
        options={"stack": "decoder", "init": "last"},
        generates=True,
        stack="model.decoder.layers",
    ),
    "whisper encoder": Family(
        lambda: build(
            "WhisperConfig",
            "WhisperModel",
            **BART | {"max_position_embeddings": None},
            encoder_layers=4,
            decoder_layers=1,
            num_mel_bins=8,
            max_source_positions=8,
            max_target_positions=16,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            decoder_start_token_id=3,
        ),
        "AutoModel",
        {
            "input_features": torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1)),
            "decoder_input_ids": tokens(4, padded=False)["input_ids"],
        },
        options={"stack": "encoder"},
        stack="encoder.layers",
    ),
    "gpt2": Family(
        lambda: build("GPT2Config", "GPT2LMHeadModel", vocab_size=64, n_positions=64, n_embd=32, n_layer=4, n_head=4),
        "AutoModelForCausalLM",
        tokens(padded=False),
        options={"init": "last"},
        generates=True,
        stack="transformer.h",
    ),
    "llama": decoder("LlamaConfig", "LlamaForCausalLM"),
    # 4 layers: full attention, then 3 with a sliding window of 4; the groups keep the kinds apart
    "qwen2": decoder("Qwen2Config", "Qwen2ForCausalLM", use_sliding_window=True, sliding_window=4, max_window_layers=1),
    "mistral": decoder("MistralConfig", "MistralForCausalLM", sliding_window=4),
    "phi": decoder("PhiConfig", "PhiForCausalLM"),
}
FAMILIES["qwen2"].options = {"group_sizes": [1, 3], "init": "every_other"}
FAMILIES["llama"].options = {"init": [3, 1]}

WITHOUT_THESEUS = textwrap.dedent(
    """
    import json
    import sys

    class NoTheseus:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0].startswith("theseus"):
                raise ImportError(name)

    sys.meta_path.insert(0, NoTheseus())
    import torch
    """
)
"""The start of a script run in a process that cannot import theseus (`run_without_theseus`)."""

RELOAD = WITHOUT_THESEUS + textwrap.dedent(
    """
    import transformers

    for case in json.loads(sys.argv[1]):
        model = getattr(transformers, case["auto"]).from_pretrained(case["folder"]).eval()
        inputs = torch.load(case["inputs"])
        result = {"class": type(model).__name__}
        with torch.no_grad():
            result["output"] = model(**inputs)[0]
            if case["generates"]:
                result["tokens"] = model.generate(**inputs, do_sample=False, **case["generate"])
        torch.save(result, case["result"])
    """
)


def generate_options(model: nn.Module) -> dict[str, int]:
    return {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "pad_token_id": 0}


def use_cache(family: Family, value: bool) -> dict[str, bool]:
    return {"use_cache": value} if family.generates else {}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Per family: the finalized model, its outputs, and what the reloading subprocess computed."""
    folder = tmp_path_factory.mktemp("hf")
    cases, results = [], {}
    for name, family in FAMILIES.items():
        model = family.make()
        predecessor_layers = len(model.get_submodule(family.stack))
        plan = hf.plan(model, num_layers=2, **family.options)
        # example_kwargs: replace_ checks the surgery by running the model at rate 0
        theseus = th.replace_(model, plan, example_kwargs={**family.inputs, **use_cache(family, False)})
        theseus.rate = 0.5
        model.train()
        model(**family.inputs, **use_cache(family, False))  # a training step's routing must not leak into the export
        model.eval()
        with torch.no_grad():
            replacing = model(**family.inputs, **use_cache(family, False))[0]
        compact = theseus.finalize()
        entry = {"model": compact, "predecessor_layers": predecessor_layers, "replacing": replacing}
        with torch.no_grad():
            entry["output"] = compact(**family.inputs)[0]
            entry["uncached"] = compact(**family.inputs, **use_cache(family, False))[0]
            if family.generates:
                entry["tokens"] = compact.generate(**family.inputs, do_sample=False, **generate_options(compact))
        compact.save_pretrained(folder / name)
        torch.save(family.inputs, folder / f"{name}.inputs.pt")
        cases.append(
            {
                "auto": family.auto,
                "folder": str(folder / name),
                "inputs": str(folder / f"{name}.inputs.pt"),
                "result": str(folder / f"{name}.result.pt"),
                "generates": family.generates,
                "generate": generate_options(compact),
            }
        )
        results[name] = entry
    for name, reloaded in zip(FAMILIES, reload_without_theseus(cases), strict=True):
        results[name]["reloaded"] = reloaded
    return results


def run_without_theseus(script: str, *arguments: str) -> None:
    """Runs ``script`` (starting with `WITHOUT_THESEUS`) in a fresh process, one thread; fails on an error."""
    command = [sys.executable, "-c", script, *arguments]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert run.returncode == 0, run.stderr


def reload_without_theseus(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What `RELOAD` computed for each case: ``AutoModel*.from_pretrained`` in a process without theseus."""
    run_without_theseus(RELOAD, json.dumps(cases))
    return [torch.load(case["result"]) for case in cases]


@pytest.mark.parametrize("name", FAMILIES)
def test_finalized_model_reloads_in_plain_transformers_with_identical_outputs(exported, name):
    family, entry = FAMILIES[name], exported[name]
    compact, reloaded = entry["model"], entry["reloaded"]
    assert reloaded["class"] == type(compact).__name__
    torch.testing.assert_close(reloaded["output"], entry["output"], rtol=0, atol=0)
    # the successors as they ran while replacing are the finalized model: renumbering changed no computation
    torch.testing.assert_close(entry["uncached"], entry["replacing"], rtol=0, atol=0)
    assert len(compact.get_submodule(family.stack)) == 2 < entry["predecessor_layers"]


@pytest.mark.parametrize("name", [name for name, family in FAMILIES.items() if family.generates])
def test_greedy_generation_with_kv_cache_matches_after_reload(exported, name):
    entry = exported[name]
    tokens = entry["tokens"]
    assert tokens.shape[-1] >= NEW_TOKENS
    assert torch.equal(entry["reloaded"]["tokens"], tokens)


@pytest.mark.parametrize("name", FAMILIES)
def test_finalize_makes_config_and_layers_agree(exported, name):
    family, compact = FAMILIES[name], exported[name]["model"]
    found = hf.layer_stack(compact, family.options.get("stack"))
    assert found.path == family.stack
    config = found.config(compact)
    assert getattr(config, found.count_name) == 2
    layers = compact.get_submodule(family.stack)
    indices = [{m.layer_idx for m in layer.modules() if isinstance(vars(m).get("layer_idx"), int)} for layer in layers]
    assert indices in ([set(), set()], [{0}, {1}])  # DistilBERT, ViT and Whisper's encoder layers have no index
    if family.generates and name != "bart decoder":
        assert indices == [{0}, {1}]


def test_finalize_leaves_a_config_the_model_shares_with_another_as_it_was():
    """A teacher and a student built from one config object: the student's finalize must not shorten the teacher's
    (which would then save as a 2-layer config over 4 layers); a finalize that fails gives the original back."""
    teacher = FAMILIES["llama"].make()
    student = type(teacher)(teacher.config)
    shared, inputs = teacher.config, {**tokens(padded=False), "use_cache": False}
    compact = th.replace_(student, hf.plan(student, num_layers=2), example_kwargs=inputs).finalize()
    assert teacher.config is shared and shared.num_hidden_layers == 4
    assert compact.config.num_hidden_layers == 2 and compact.model.config is compact.config
    assert not any(getattr(module, "config", None) is shared for module in compact.modules())

    student = type(teacher)(teacher.config)
    plan = hf.plan(student, num_layers=2)
    failing = th.Plan(plan, on_finalize=lambda model: [plan.on_finalize(model), 1 / 0])
    theseus = th.replace_(student, failing, example_kwargs=inputs)
    holders = [module for module in student.modules() if getattr(module, "config", None) is shared]
    with pytest.raises(ZeroDivisionError):
        theseus.finalize()
    assert len(holders) > 2 and all(module.config is shared for module in holders)
    assert shared.num_hidden_layers == 4


def test_finalize_leaves_a_stacks_own_config_as_it_was():
    """T5's decoder holds a copy of the model's config, out of the model config's reach: synced on a copy too."""
    config = transformers.T5Config(vocab_size=50, d_model=16, d_kv=4, d_ff=32, num_layers=4, num_decoder_layers=4)
    model = transformers.T5ForConditionalGeneration(config)
    decoder_config = model.decoder.config
    found = hf.layer_stack(model, "decoder")
    del model.decoder.block[2:]
    undo = hf._sync_undoably(model, stack=found, sources=[0, 1])
    assert model.decoder.config.num_decoder_layers == 2 and decoder_config.num_decoder_layers == 4
    undo()
    assert model.decoder.config is decoder_config and model.config.num_decoder_layers == 4


def test_sliding_window_layer_types_follow_the_kept_layers(exported):
    compact = exported["qwen2"]["model"]
    assert compact.config.layer_types == ["full_attention", "sliding_attention"]
    assert [layer.self_attn.sliding_window for layer in compact.model.layers] == [None, 4]


def test_groups_stay_within_runs_of_one_layer_type():
    model = qwen2_sliding()  # full attention, then 3 sliding layers
    assert [spec.path for spec in hf.plan(model, num_layers=2)] == ["model.layers[0:1]", "model.layers[1:4]"]
    assert [spec.path for spec in hf.plan(model, num_layers=3)] == [
        "model.layers[0:1]",
        "model.layers[1:3]",
        "model.layers[3:4]",
    ]


def test_sync_config_reads_sources_from_layer_indices():
    model = FAMILIES["qwen2"].make()
    del model.model.layers[0]  # by hand, without a plan: layers 1, 2, 3 (sliding) remain
    hf.sync_config(model)
    assert model.config.num_hidden_layers == 3
    assert model.config.layer_types == ["sliding_attention"] * 3
    assert [layer.self_attn.layer_idx for layer in model.model.layers] == [0, 1, 2]


def test_a_successor_copied_from_another_layer_takes_its_groups_kv_cache_slot_while_replacing():
    """With a cache in use (a decoder's default), the successor of layers 2-3 copied from layer 1 (``init="first"``)
    would write into layer 1's slot, in the same forward as layer 1: its attention would see both layers' keys."""
    model = FAMILIES["llama"].make()
    inputs = tokens(padded=False)
    theseus = th.replace_(
        model, hf.plan(model, num_layers=2, init="first"), example_kwargs={**inputs, "use_cache": False}
    )
    first, second = theseus.sites
    assert [layer.self_attn.layer_idx for layer in (first.successor, second.successor)] == [0, 2]
    theseus.eval_route = "predecessor"
    with torch.no_grad(), second.running(second.successor):  # layers 0-1, then the second group's successor
        cached = model.eval()(**inputs, use_cache=True).logits
        uncached = model(**inputs, use_cache=False).logits
    torch.testing.assert_close(cached, uncached)
    compact = theseus.finalize()
    assert [layer.self_attn.layer_idx for layer in compact.model.layers] == [0, 1]


def test_narrow_llama_successors_keep_head_dim():
    model = FAMILIES["llama"].make()
    inputs = {**tokens(padded=False), "use_cache": False}
    theseus = th.replace_(model, hf.plan(model, num_layers=2, hidden_size=16), example_kwargs=inputs)
    inner = theseus.sites[1].successor.inner
    assert (inner.self_attn.q_proj.in_features, inner.self_attn.head_dim, inner.self_attn.layer_idx) == (16, 8, 2)
    compact = theseus.finalize().eval()
    assert compact.model.layers[1].inner.self_attn.layer_idx == 1
    assert compact(**tokens(padded=False)).logits.shape == (2, 10, 64)


def qwen2_sliding() -> nn.Module:
    return FAMILIES["qwen2"].make()


def with_config(make: Callable[[], nn.Module], **changes: Any) -> Callable[[], nn.Module]:
    def changed() -> nn.Module:
        model = make()
        for key, value in changes.items():
            setattr(model.config, key, value)
        return model

    return changed


@pytest.mark.parametrize(
    ("make", "kwargs", "message"),
    [
        (lambda: nn.Linear(2, 2), {}, "supports transformers models"),
        (
            lambda: build(
                "GPT2Config", "GPT2Model", n_embd=16, n_layer=4, n_head=2, scale_attn_by_inverse_layer_idx=True
            ),
            {},
            "scale_attn_by_inverse_layer_idx",
        ),
        (
            lambda: build("DebertaV2Config", "DebertaV2Model", **TEXT, num_hidden_layers=4, conv_kernel_size=3),
            {},
            "convolution between layer 0 and layer 1",
        ),
        (
            lambda: build("AlbertConfig", "AlbertModel", **TEXT, num_hidden_layers=4, num_hidden_groups=2),
            {},
            "found 0 layer stacks",
        ),
        (FAMILIES["bart encoder"].make, {}, r"found 2 layer stacks .*pass stack='encoder', 'decoder'"),
        (FAMILIES["bart encoder"].make, {"stack": "encoder.embed_tokens"}, "is not an nn.ModuleList"),
        (qwen2_sliding, {"group_sizes": [2, 2]}, r"group 0 \(layers 0..1\).*would mix layers of different kinds"),
        (qwen2_sliding, {"group_sizes": [1, 3], "init": "last"}, "group 0 .* from layer 2, of another kind"),
        (with_config(FAMILIES["llama"].make, mlp_only_layers=[1]), {}, "lists layer indices"),
        (with_config(FAMILIES["llama"].make, expert_layers=["a", "b", "a", "b"]), {}, "does not know it"),
        (with_config(FAMILIES["llama"].make, num_hidden_layers=6), {}, "holds the length of 'model.layers' \\(4\\)"),
        (FAMILIES["llama"].make, {"num_layers": 4}, r"num_layers must be an integer in \[1, 4\)"),
        (FAMILIES["llama"].make, {"init": "middle"}, "init must be one of"),
    ],
)
def test_unsupported_models_are_refused_before_anything_changes(make, kwargs, message):
    model = make()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        th.replace_(model, hf.plan(model, **{"num_layers": 2, **kwargs}))
    assert not any(isinstance(m, th.ReplacementSite) for m in model.modules())
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


def test_a_successor_of_another_kind_may_keep_every_layer():
    # Quantized copies (theseus_quant) keep the depth: one layer a group; a plain copy of every layer is refused.
    from theseus_quant import QuantLinear, quantized_copy

    family = FAMILIES["bert"]
    model = family.make()
    with pytest.raises(ValueError, match=r"\[1, 4\) \(or 4 with a successor of another kind\)"):
        hf.plan(model, num_layers=4)
    plan = hf.plan(model, num_layers=4, successor=quantized_copy(2, 8))
    assert [spec.path for spec in plan] == [f"bert.encoder.layer[{i}:{i + 1}]" for i in range(4)]
    compact = th.replace_(model, plan, example_kwargs=family.inputs).finalize()
    assert compact.config.num_hidden_layers == 4
    assert all(isinstance(layer.intermediate.dense, QuantLinear) for layer in compact.bert.encoder.layer)
