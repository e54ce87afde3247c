"""The causal_lm family: a tiny random Llama and a WordPiece tokenizer written to disk, a corpus of paragraphs in a
.txt file, and `theseus compress` end to end; the SmolLM2 asset when it is cached."""

import copy
import json
import random

import pytest
import torch
from transformers import AutoModelForCausalLM, BertTokenizerFast, LlamaConfig, LlamaForCausalLM

import theseus_core as th
from theseus_adapters import hf
from theseus_zoo import cli
from theseus_zoo.data.assets import MissingAssetError, asset_path
from theseus_zoo.recipes import causal_lm as causal_lm_recipes
from theseus_zoo.recipes import get_recipe
from theseus_zoo.tasks import build_task
from theseus_zoo.tasks.causal_lm import CausalLMOptions
from theseus_zoo.tasks.options import parse_options
from theseus_zoo.training.optimization import check_unfreeze

WORDS = ["the", "a", "film", "plot", "actor", "story", "market", "bank", "shares", "rose", "fell", "is", "was", "good"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A 4-layer random Llama with a WordPiece tokenizer whose end-of-sequence token is [SEP]."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertTokenizerFast(vocab_file=str(vocab), eos_token="[SEP]").save_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(WORDS) + 5,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=3,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """200 paragraphs of 5 to 30 words, separated by blank lines."""
    generator = random.Random(0)
    paragraphs = [" ".join(generator.choices(WORDS, k=generator.randrange(5, 31))) for _ in range(200)]
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n\n".join(paragraphs) + "\n")
    return path


def options(tiny_model, corpus, **changes):
    return {
        "model": str(tiny_model),
        "dataset": str(corpus),
        "sequence_length": 16,
        "num_layers": 2,
        "dev_sequences": 12,
        "test_sequences": 20,
        "calibration_sequences": 8,
        "streamline_steps": 5,
        "eval_batch_size": 4,
        **changes,
    }


def test_sequences_are_cut_from_each_split_of_documents_joined_by_eos(tiny_model, corpus):
    task = build_task("causal_lm", options(tiny_model, corpus, dev_sequences=None), 0)
    task.check()
    sequences, documents, tokenizer = task.sequences(), task.documents(), task.tokenizer()
    assert set(documents["train"]).isdisjoint(documents["validation"]) and len(documents["test"]) == 20
    for split, source in (("train", "train"), ("dev", "validation"), ("test", "test")):
        ids = [i for text in documents[source] for i in [*tokenizer(text, add_special_tokens=False)["input_ids"], 3]]
        count = len(ids) // 16
        if split == "test":  # thinned to 20 evenly spaced sequences
            assert sequences[split].shape == (20, 16)
            whole = torch.tensor(ids[: count * 16]).view(count, 16)
            assert torch.equal(sequences[split], whole[[i * count // 20 for i in range(20)]])
        else:
            assert torch.equal(sequences[split], torch.tensor(ids[: count * 16]).view(count, 16))


def test_the_loss_is_the_models_own_next_token_loss_and_perplexity_its_exponential(tiny_model, corpus):
    task = build_task("causal_lm", options(tiny_model, corpus), 0)
    model = task.build_predecessor()
    batch = task.collate(list(task.dataset("train")[:3]))
    own = model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss
    torch.testing.assert_close(task.criterion(task.logits(model, batch), batch), own)
    dev = task.dataset("dev")
    with torch.no_grad():
        nll = torch.stack([model(input_ids=s[None], labels=s[None]).loss for s in dev]).mean()
    metrics = task.evaluate(model, "dev")
    assert metrics["nll"] == pytest.approx(float(nll), rel=1e-5)
    assert metrics["perplexity"] == pytest.approx(float(nll.exp()), rel=1e-5)
    assert metrics["inverse_perplexity"] == pytest.approx(1 / metrics["perplexity"])
    predictions = task.predictions(model, "dev")
    chosen = torch.tensor([0, 0, 5])
    expected = float(predictions[chosen].mean())
    assert task.score(predictions, "dev", chosen)["nll"] == pytest.approx(expected)


@pytest.mark.parametrize("truncation", ["plan", "shortgpt", "streamline"])
def test_truncated_has_the_successors_depth_and_runs(tiny_model, corpus, truncation):
    task = build_task("causal_lm", options(tiny_model, corpus, truncation=truncation, num_layers=3), 0)
    predecessor = task.build_predecessor()
    model = task.truncated(predecessor)
    assert len(model.model.layers) == 3 == model.config.num_hidden_layers
    assert len(predecessor.model.layers) == 4
    assert set(task.evaluate(model, "dev")) == {"inverse_perplexity", "perplexity", "nll"}
    if truncation == "plan":  # init "first": the bottom layers
        for kept, original in zip(model.model.layers, predecessor.model.layers[:3], strict=True):
            assert torch.equal(kept.mlp.up_proj.weight, original.mlp.up_proj.weight)


def compress(tmp_path, overrides, out="run"):
    config = {
        "replacing": {"steps": 6, "eval_every": 3, "batch_size": 4, "lr": 1e-3},
        "steps_to_one": 3,
        **overrides,
    }
    path = tmp_path / f"{out}.json"
    path.write_text(json.dumps(config))
    args = ["compress", "--recipe", "smollm2-30to15", "--config", str(path), "--out", str(tmp_path / out)]
    return cli.main([*args, "--no-progress"])


def test_compress_exports_a_plain_transformers_decoder_that_scores_as_reported(tiny_model, corpus, tmp_path):
    # the recipe trains truncated alone (its CPU budget); KD, the -kd recipe's baseline, is asked for here too
    assert compress(tmp_path, {"options": options(tiny_model, corpus), "baselines": ["truncated", "kd"]}) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["metric"] == "inverse_perplexity"
    assert set(report["models"]) == {"predecessor", "theseus", "baseline:truncated", "baseline:kd"}
    assert "predecessor" not in report["phases"]  # the released model is the predecessor
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model")
    assert exported.config.num_hidden_layers == 2 == len(exported.model.layers)
    task = build_task("causal_lm", options(tiny_model, corpus), 0)
    theirs = report["models"]["theseus"]["test"]
    assert task.evaluate(exported, "test")["perplexity"] == pytest.approx(theirs["perplexity"], rel=1e-4)
    assert len(report["models"]["theseus"]["test_predictions"]) == 20
    prompt = task.dataset("test")[:1, :5]
    tokens = exported.generate(input_ids=prompt, do_sample=False, max_new_tokens=3, min_new_tokens=3, pad_token_id=0)
    assert tokens.shape == (1, 8)  # the KV cache works after finalize's layer_idx renumbering


def test_block_influence_groups_start_theseus_and_truncated_from_shortgpts_layers(tiny_model, corpus, tmp_path):
    influence = options(tiny_model, corpus, num_layers=2, groups="block_influence", init="first")
    task = build_task("causal_lm", influence, 0)
    predecessor = task.build_predecessor()
    shortgpt = build_task("causal_lm", options(tiny_model, corpus, num_layers=2, truncation="shortgpt"), 0)
    pruned = shortgpt.truncated(predecessor)
    inputs = task.dataset("dev")[:2]
    model = copy.deepcopy(predecessor)
    untrained = th.replace_(model, task.plan(model)).finalize()
    with torch.no_grad():
        for start in (untrained, task.truncated(predecessor)):
            torch.testing.assert_close(start(input_ids=inputs).logits, pruned(input_ids=inputs).logits)
    assert compress(tmp_path, {"options": influence, "baselines": []}) == 0
    with pytest.raises(ValueError, match="leave group_sizes unset and init at 'first'"):
        build_task("causal_lm", {**influence, "group_sizes": [3, 1]}, 0)


def test_the_unfreeze_check_leaves_influence_groups_to_the_fine_tuned_predecessor(tiny_model, corpus):
    influence = options(tiny_model, corpus, num_layers=2, groups="block_influence", init="first")
    task = build_task("causal_lm", influence, 0)
    predecessor = task.build_predecessor()
    check_unfreeze(predecessor, "all", task)  # embeddings, final norm and lm_head lie outside the groups
    assert task._influence_groups is None  # measured on the model the run replaces, not on a meta copy
    with pytest.raises(ValueError, match="needs a task that names its head, not CausalLMTask"):
        check_unfreeze(predecessor, "head", task)


def test_a_streamline_baseline_run_trains_only_that_baseline(tiny_model, corpus, tmp_path):
    overrides = {
        "options": options(tiny_model, corpus, truncation="streamline"),
        "theseus": False,
        "baselines": ["truncated"],
    }
    assert compress(tmp_path, overrides) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert set(report["models"]) == {"predecessor", "baseline:truncated"}
    predecessor, streamlined = report["models"]["predecessor"], report["models"]["baseline:truncated"]
    assert streamlined["parameters"] < predecessor["parameters"]


def test_bad_options_are_refused_with_what_to_do(tiny_model, corpus):
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        build_task("causal_lm", options(tiny_model, corpus, dataset="nope"), 0)
    with pytest.raises(ValueError, match="causal_lm option truncation must be one of 'plan', 'shortgpt'"):
        build_task("causal_lm", options(tiny_model, corpus, truncation="sleb"), 0)
    with pytest.raises(ValueError, match=r"num_layers must be in \[1, 4\)"):
        build_task("causal_lm", options(tiny_model, corpus, num_layers=4), 0).check()
    with pytest.raises(ValueError, match="no sequence of 100000 tokens"):
        build_task("causal_lm", options(tiny_model, corpus, sequence_length=100_000), 0).check()


def test_the_smollm2_recipes_are_valid_for_a_30_layer_model():
    assert {recipe.name for recipe in causal_lm_recipes.SMOLLM2_RECIPES.values()} == {
        f"smollm2-30to{layers}{suffix}" for layers in (15, 20) for suffix in ("", "-kd", "-shortgpt", "-streamline")
    }
    for recipe in causal_lm_recipes.SMOLLM2_RECIPES.values():
        parsed = parse_options(CausalLMOptions, recipe.options, "causal_lm")
        assert th.group_sizes_for(30, parsed.num_layers, parsed.group_sizes)
        assert recipe.predecessor is None and recipe.family == "causal_lm"
    main, shortgpt = get_recipe("smollm2-30to15"), get_recipe("smollm2-30to15-shortgpt")
    assert shortgpt.replacing == main.replacing and not shortgpt.theseus and shortgpt.baselines == ("truncated",)
    kd = get_recipe("smollm2-30to15-kd")  # the main recipe's layers and steps, its own process (the CPU budget)
    assert kd.options == main.options and kd.replacing == main.replacing and not kd.theseus and kd.baselines == ("kd",)
    assert main.baselines == ("truncated",)
    for recipe in causal_lm_recipes.SMOLLM2_INFLUENCE.values():
        assert parse_options(CausalLMOptions, recipe.options, "causal_lm").groups == "block_influence"
        assert recipe.replacing == main.replacing and recipe.theseus and not recipe.baselines
    gpu = get_recipe("smollm2-30to15-gpu")
    parsed = parse_options(CausalLMOptions, gpu.options, "causal_lm")
    assert parsed.num_layers == 15 and parsed.sequence_length == 512 and parsed.test_sequences is None
    tokens = {r.name: r.replacing.steps * r.replacing.batch_size * r.options["sequence_length"] for r in (main, gpu)}
    assert tokens == {"smollm2-30to15": 102_400, "smollm2-30to15-gpu": 4_096_000}


def test_the_smollm2_asset_generates_sensible_text():
    """Opt-in: runs when ``theseus fetch smollm2-135m-instruct`` has been done."""
    try:
        folder = asset_path("smollm2-135m-instruct")
    except MissingAssetError:
        pytest.skip("the smollm2-135m-instruct asset is not cached (theseus fetch smollm2-135m-instruct)")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    config = model.config
    assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("llama", 30, 576)
    assert sum(parameter.numel() for parameter in model.parameters()) == 134_515_008
    task = build_task("causal_lm", {"model": "smollm2-135m-instruct"}, 0)
    tokenizer = task.tokenizer()
    inputs = tokenizer("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        tokens = model.generate(**inputs, do_sample=False, max_new_tokens=3, pad_token_id=tokenizer.eos_token_id)
    assert tokenizer.decode(tokens[0, inputs["input_ids"].shape[1] :]).startswith(" Paris")


def test_a_searched_decoder_with_layers_of_several_forms_exports_and_generates_as_before(tiny_model, corpus, tmp_path):
    """A layer without attention first, one without FFN, and a quarter FFN: the export holds (`hold_export` reloads it
    with `hf.load_pretrained`, strictly), and the reload generates the tokens the finalized model does."""
    pytest.importorskip("scipy")
    task = build_task("causal_lm", options(tiny_model, corpus, num_layers=3), 0)
    model = task.build_predecessor().eval()
    offered, hook = task.candidates(model)
    inputs = task.example_inputs()[1]
    library = th.CandidateLibrary(model, offered, example_kwargs=inputs, on_finalize=hook)
    choice = dict(zip(library.paths, ["no_attention", "no_ffn", "ffn_quarter"], strict=True))
    finalized = th.replace_(model, library.plan(choice), example_kwargs=inputs).finalize().eval()
    task.export(finalized, tmp_path / "model")
    reloaded = hf.load_pretrained(tmp_path / "model").eval()
    ids = task.dataset("test")[:2, :6]
    with torch.no_grad():
        tokens = [m.generate(ids, do_sample=False, max_new_tokens=4, pad_token_id=0) for m in (finalized, reloaded)]
    assert torch.equal(*tokens)


@pytest.mark.parametrize(
    "budget", [{"params": 0.9}, pytest.param({"latency": 0.9}, marks=pytest.mark.slow)]
)  # latency: each choice assembled, measured
def test_a_budget_on_a_decoder_exports_the_layers_chosen_and_renumbers_them(tiny_model, corpus, tmp_path, budget):
    pytest.importorskip("scipy")
    overrides = {"options": options(tiny_model, corpus), "methods": ["theseus", "truncated"]}
    assert compress(tmp_path, {**overrides, "budget": {**budget, "steps": 3}}) == 0
    search = json.loads((tmp_path / "run" / "report.json").read_text())["search"]
    exported = hf.load_pretrained(tmp_path / "run" / "model")  # plain from_pretrained when the layers are alike
    layers = len(exported.model.layers)
    assert exported.config.num_hidden_layers == layers and layers >= 1
    assert [layer.self_attn.layer_idx for layer in exported.model.layers] == list(range(layers))  # or its stand-in
    if "params" in budget:
        assert search["params_ratio"] == pytest.approx(search["predicted_ratio"], rel=1e-9)
    else:
        assert search["measured_choices"] and all(p["measured_latency_ratio"] > 0 for p in search["frontier"])
