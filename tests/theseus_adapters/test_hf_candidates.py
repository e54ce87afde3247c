"""theseus_adapters.hf_candidates: a budget search's candidates for transformers layers, and any choice reloads."""

import copy
import functools
import tempfile

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    BertConfig,
    BertForSequenceClassification,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
)

import theseus_core as th
from tests.hypothesis_profiles import examples
from theseus_adapters import hf, hf_candidates, slim

pytest.importorskip("scipy")

FORMS = tuple(hf_candidates.LAYER_FORMS)
UNIFORM = ("keep", "skip", "one")
"""The candidates whose every choice keeps the layers of one shape: plain transformers reloads it."""


def tiny_decoder(config_class=LlamaConfig, model_class=LlamaForCausalLM, layers=6, **extra):
    config = config_class(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        **extra,
    )
    return model_class(config).eval()


def tiny_llama():
    return tiny_decoder(tie_word_embeddings=True)


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


CASES = {  # builder, the AutoModel class that reloads a uniform choice, the stack
    "bert": (tiny_bert, AutoModelForSequenceClassification, "bert.encoder.layer"),
    "llama": (tiny_llama, AutoModelForCausalLM, "model.layers"),
}


def batch(name: str) -> dict:
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "use_cache": False} if name == "llama" else {"input_ids": ids}


@functools.cache
def library_of(name: str):
    """The model of ``name`` (6 layers), and its library over groups of 2, 2, 1 and 1 layers."""
    torch.manual_seed(0)
    model = CASES[name][0]()
    found, hook = hf_candidates.candidates(model, hf.plan(model, 4))
    return model, th.CandidateLibrary(model, found, example_kwargs=batch(name), on_finalize=hook)


def parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", CASES)
def test_every_group_offers_each_layer_form_with_strictly_fewer_parameters_than_its_first_layer(name):
    model, library = library_of(name)
    layers = model.get_submodule(CASES[name][2])
    assert library.refused == {}
    assert all(library.names(path) == ["keep", *UNIFORM[1:], *FORMS] for path in library.paths)
    for path in library.paths:
        first = layers[int(path.rsplit("[", 1)[1].split(":")[0])]
        for form in FORMS:
            assert parameters(library.successors[(path, form)]) < parameters(first), (path, form)


def silence_branch_(layer: torch.nn.Module, sublayer: str) -> None:
    """The reference: the sublayer's residual branch outputs 0 (its output projection's weight and bias zeroed)."""
    output = {
        ("BertLayer", "attention"): "attention.output.dense",
        ("BertLayer", "ffn"): "output.dense",
        ("LlamaDecoderLayer", "attention"): "self_attn.o_proj",
        ("LlamaDecoderLayer", "ffn"): "mlp.down_proj",
    }[(type(layer).__name__, sublayer)]
    with torch.no_grad():
        for tensor in layer.get_submodule(output).parameters():
            tensor.zero_()


def run_layer(model: torch.nn.Module, layer: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    kwargs = {}
    if isinstance(model, LlamaForCausalLM):
        kwargs["position_embeddings"] = model.model.rotary_emb(hidden, torch.arange(hidden.shape[1])[None])
    with torch.no_grad():
        out = layer(hidden, **kwargs)
    return out[0] if isinstance(out, tuple) else out


@settings(max_examples=examples(10), deadline=None)
@given(name=st.sampled_from(list(CASES)), sublayer=st.sampled_from(slim.SUBLAYERS), seed=st.integers(0, 2**16))
def test_a_layer_without_a_sublayer_computes_exactly_the_original_with_that_branch_set_to_zero(name, sublayer, seed):
    """Post-LN (BERT): the sublayer's norm stays and sees its input + 0; pre-LN (Llama): the sublayer and the norm
    before it go, the residual stream passes on. Either way the original with the branch's output zeroed."""
    model, _ = library_of(name)
    original = model.get_submodule(CASES[name][2])[1]
    reference, removed = copy.deepcopy(original), slim.remove_sublayer_(copy.deepcopy(original), sublayer)
    silence_branch_(reference, sublayer)
    hidden = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(run_layer(model, removed, hidden), run_layer(model, reference, hidden), rtol=0, atol=0)
    kept = dict(removed.named_parameters())
    assert set(kept) < set(dict(original.named_parameters()))  # what only the sublayer used went, nothing else
    assert slim.layer_form(removed, model.config)["heads" if sublayer == "attention" else "intermediate_size"] == 0


@settings(max_examples=examples(15), deadline=None)
@given(name=st.sampled_from(list(CASES)), fraction=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_a_narrower_ffn_computes_the_original_with_the_dropped_neurons_silenced(name, fraction, seed):
    """``ffn_half`` / ``ffn_quarter`` are `slim.prune_layer_` at a half / a quarter of the width: at any width the
    layer computes what the original does with the neurons it dropped silenced; at full width, exactly that."""
    model, _ = library_of(name)
    original = model.get_submodule(CASES[name][2])[1]
    layout = slim.slim_layout(original)
    full = original.get_submodule(layout.ffn_out).in_features
    width = max(1, round(fraction * full))
    narrow = slim.prune_layer_(copy.deepcopy(original), intermediate_size=width)
    rows = original.get_submodule(layout.ffn_in[0]).weight
    kept = [int((rows == row).all(1).nonzero()[0]) for row in narrow.get_submodule(layout.ffn_in[0]).weight]
    reference = copy.deepcopy(original)
    with torch.no_grad():
        reference.get_submodule(layout.ffn_out).weight[:, sorted(set(range(full)) - set(kept))] = 0
    hidden = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(seed))
    exact = {"rtol": 0, "atol": 0} if width == full else {}
    torch.testing.assert_close(run_layer(model, narrow, hidden), run_layer(model, reference, hidden), **exact)
    forms = {form: hf_candidates.LAYER_FORMS[form](copy.deepcopy(original)) for form in ("ffn_half", "ffn_quarter")}
    assert [slim.layer_form(layer, model.config)["intermediate_size"] for layer in forms.values()] == [
        full // 2,
        full // 4,
    ]


@settings(max_examples=examples(25), deadline=None)
@given(name=st.sampled_from(list(CASES)), names=st.lists(st.sampled_from(UNIFORM + FORMS), min_size=4, max_size=4))
@example(name="bert", names=["skip", "skip", "no_attention", "skip"])  # one layer left: no stack finder sees it
@example(name="llama", names=["skip"] * 4)
def test_any_choice_finalizes_into_a_model_that_load_pretrained_rebuilds_strictly_with_equal_outputs(name, names):
    """The stack is spliced (``keep``: the group's layers, ``skip``: none, any other: one layer), each layer
    renumbered; the config describes the layers (one shape: in its own fields, which plain transformers reads;
    several: `slim.LAYER_FORMS_KEY`), and `hf.load_pretrained` rebuilds the model as its plain class, every key
    matched."""
    model, library = library_of(name)
    _, auto, stack = CASES[name]
    choice = dict(zip(library.paths, names, strict=True))  # every group offers every candidate (test above)
    inputs = batch(name)
    finalized = th.replace_(copy.deepcopy(model), library.plan(choice), example_kwargs=inputs).finalize().eval()
    layers = finalized.get_submodule(stack)
    sizes = {path: int(path.split(":")[1][:-1]) - int(path.rsplit("[", 1)[1].split(":")[0]) for path in choice}
    assert (
        len(layers)
        == finalized.config.num_hidden_layers
        == sum(sizes[path] if chosen == "keep" else 0 if chosen == "skip" else 1 for path, chosen in choice.items())
    )
    positions = [vars(m)["layer_idx"] for layer in layers for m in layer.modules() if "layer_idx" in vars(m)]
    assert positions == list(range(len(layers)))  # one per layer (its attention or what stands for it): renumbered
    forms = [slim.layer_form(layer, finalized.config) for layer in layers]
    uniform = all(form == forms[0] for form in forms) and all(all(form.values()) for form in forms)
    assert getattr(finalized.config, slim.LAYER_FORMS_KEY, None) == (None if uniform else forms)
    if set(choice.values()) <= set(UNIFORM):
        assert uniform
    with tempfile.TemporaryDirectory() as directory:
        finalized.save_pretrained(directory)
        reloaded, info = hf.load_pretrained(directory, output_loading_info=True)
        plain = auto.from_pretrained(directory, output_loading_info=True) if uniform else None
    assert type(reloaded) is type(finalized)
    assert not any(info[kind] for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    if len(layers) >= 2:
        hf.layer_stack(reloaded)  # a searched model can be planned again (a stack is two layers or more)
    with torch.no_grad():
        expected = finalized(**inputs).logits
        torch.testing.assert_close(reloaded.eval()(**inputs).logits, expected)
        if plain is not None:
            assert not any(plain[1][kind] for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"))
            torch.testing.assert_close(plain[0].eval()(**inputs).logits, expected)


def test_a_decoder_whose_first_layer_has_no_attention_generates_with_its_cache_as_without():
    """Transformers reads the cached length and the masks' sizes from layer 0's cache slot: the layer without
    attention keeps it counting, so a padded batch generates the same tokens with the cache and without."""
    model, library = library_of("llama")
    choice = dict.fromkeys(library.paths, "one") | {library.paths[0]: "no_attention"}
    finalized = th.replace_(copy.deepcopy(model), library.plan(choice), example_kwargs=batch("llama")).finalize()
    ids = torch.randint(3, 64, (2, 6), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    ids[0, :3], mask[0, :3] = 0, 0  # left padding
    options = {"attention_mask": mask, "do_sample": False, "max_new_tokens": 6, "pad_token_id": 0}
    with torch.no_grad():
        cached = finalized.eval().generate(ids, use_cache=True, **options)
        uncached = finalized.generate(ids, use_cache=False, **options)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize(
    ("make", "refused", "message"),
    [
        (
            lambda: GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=4, n_head=2, vocab_size=64)),
            FORMS,
            "is laid out as none of theseus_adapters.slim.SLIM_LAYOUTS",
        ),
        (
            lambda: DistilBertForSequenceClassification(
                DistilBertConfig(vocab_size=64, dim=32, n_layers=4, n_heads=2, hidden_dim=48)
            ),
            ("no_attention", "no_ffn"),
            "cannot remove its",
        ),
        (  # post-norm decoder layers: the norm after the attention is no norm in front of the FFN
            lambda: Olmo2ForCausalLM(
                Olmo2Config(
                    vocab_size=64,
                    hidden_size=32,
                    intermediate_size=64,
                    num_hidden_layers=4,
                    num_attention_heads=4,
                    num_key_value_heads=2,
                    eos_token_id=1,
                    pad_token_id=0,
                )
            ),
            ("no_attention", "no_ffn"),
            "post_feedforward_layernorm: its norms are not where",
        ),
    ],
)
def test_a_layout_that_cannot_take_a_form_leaves_it_out_of_every_group_in_one_line(make, refused, message):
    model = make().eval()
    found, hook = hf_candidates.candidates(model, hf.plan(model, 2))
    library = th.CandidateLibrary(model, found, example_inputs=[(torch.randint(0, 64, (2, 7)),)], on_finalize=hook)
    assert {name for _, name in library.refused} == set(refused)
    assert all(message in reason and "\n" not in reason for reason in library.refused.values())
    assert all(set(library.names(path)) == {"keep", "skip", "one", *FORMS} - set(refused) for path in library.paths)


def test_a_windowed_decoder_is_searched_and_finalized_on_its_plans_longer_batches():
    """Mistral with a 4-token window and a 3-token example: `replace_` refuses batches that no window is exceeded by,
    so every candidate is verified, and the chosen model finalized, on the plan's `Plan.more_examples` too."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    model = tiny_decoder(MistralConfig, MistralForCausalLM, layers=4, sliding_window=4)
    base = hf.plan(model, 2)
    inputs = {"input_ids": torch.randint(0, 64, (1, 3)), "use_cache": False}
    with pytest.raises(ValueError, match="window"):
        th.replace_(copy.deepcopy(model), list(base), example_kwargs=inputs)  # the plan's longer batches left out
    found, hook = hf_candidates.candidates(model, base)
    library = th.CandidateLibrary(model, found, example_kwargs=inputs, on_finalize=hook)
    assert library.more_examples is base.more_examples and library.refused == {}
    choice = dict(zip(library.paths, ["keep", "ffn_half"], strict=True))
    finalized = th.replace_(copy.deepcopy(model), library.plan(choice), example_kwargs=inputs).finalize()
    assert finalized.config.num_hidden_layers == 3


def tiny_distilbert():
    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=64, dim=32, n_layers=6, n_heads=2, hidden_dim=48)
    return DistilBertForSequenceClassification(config).eval()


@functools.cache
def distilbert_library():
    model = tiny_distilbert()
    found, hook = hf_candidates.candidates(model, hf.plan(model, 4))
    return model, th.CandidateLibrary(model, found, example_kwargs=batch("bert"), on_finalize=hook)


@settings(max_examples=examples(10), deadline=None)
@given(picks=st.lists(st.integers(0, 10), min_size=4, max_size=4))
@example(picks=[1, 1, 1, 2])  # skip, skip, skip and one layer
def test_any_choice_of_a_model_whose_layers_carry_no_index_finalizes_and_reloads(picks):
    """DistilBERT's layers have no ``layer_idx``: the hook takes each layer's source from the choice itself."""
    model, library = distilbert_library()
    choice = {
        path: (names := library.names(path))[pick % len(names)] for path, pick in zip(library.paths, picks, strict=True)
    }
    inputs = batch("bert")
    finalized = th.replace_(copy.deepcopy(model), library.plan(choice), example_kwargs=inputs).finalize().eval()
    layers = finalized.distilbert.transformer.layer
    assert len(layers) == finalized.config.n_layers
    with tempfile.TemporaryDirectory() as directory:
        finalized.save_pretrained(directory)
        reloaded, info = hf.load_pretrained(directory, output_loading_info=True)
    assert not any(info[kind] for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    with torch.no_grad():
        torch.testing.assert_close(reloaded.eval()(**inputs).logits, finalized(**inputs).logits)
