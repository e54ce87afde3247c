"""ShortGPT and LLM-Streamline on tiny Llama models built in code: what they measure, what they remove, what the
MSE training does, and that the pruned models reload in plain transformers (a process without theseus) with the
same outputs and greedy tokens."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import theseus_core as th
from tests.theseus_adapters.test_hf import reload_without_theseus
from theseus_adapters import depth_baselines, hf, layer_selection

NEW_TOKENS = 4


def tiny_llama(layers: int = 6, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def make_identity_(layer: torch.nn.Module) -> None:
    """A Llama layer adds its attention and MLP outputs to the residual stream: zero output projections make it
    return its input exactly."""
    with torch.no_grad():
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()


def batches(count: int = 3, seed: int = 1) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(3, 64, (2, 12), generator=generator)} for _ in range(count)]


def test_block_influence_is_zero_for_an_identity_layer_and_shortgpt_removes_it():
    model = tiny_llama()
    make_identity_(model.model.layers[3])
    influence = layer_selection.block_influence(model, batches())
    assert influence.shape == (6,)
    assert influence[3].abs() < 1e-6
    assert (torch.cat([influence[:3], influence[4:]]) > 1e-3).all()
    pruned = depth_baselines.shortgpt(model, 5, batches())
    assert pruned.sources == (0, 1, 2, 4, 5)
    assert pruned.scores == pytest.approx(influence.tolist())
    # Removing a layer that returns its input changes nothing.
    inputs = batches(1, seed=7)[0]
    with torch.no_grad():
        torch.testing.assert_close(pruned.model(**inputs).logits, model(**inputs).logits)


def test_shortgpt_removes_the_layers_of_lowest_influence_and_leaves_the_model_alone():
    model = tiny_llama()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    influence = layer_selection.block_influence(model, batches())
    pruned = depth_baselines.shortgpt(model, 3, batches())
    removed = sorted(set(range(6)) - set(pruned.sources))
    assert max(influence[removed]) <= min(influence[list(pruned.sources)])
    assert pruned.model.config.num_hidden_layers == 3 and len(pruned.model.model.layers) == 3
    assert [layer.self_attn.layer_idx for layer in pruned.model.model.layers] == [0, 1, 2]
    assert model.config.num_hidden_layers == 6 and len(model.model.layers) == 6
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize("num_layers", [1, 2, 3, 5])
def test_influence_groups_start_theseus_from_shortgpts_model(num_layers):
    """Each kept layer begins its group (the first group also takes the layers before it), and the finalized
    untrained plan is ShortGPT's model: the same layers, the same logits."""
    model = tiny_llama()
    sizes, sources = layer_selection.influence_groups(model, num_layers, batches())
    pruned = depth_baselines.shortgpt(model, num_layers, batches())
    assert sources == pruned.sources and sum(sizes) == 6 and len(sizes) == num_layers
    starts = [sum(sizes[:i]) for i in range(num_layers)]
    assert starts[1:] == list(sources[1:])
    assert all(start <= source < start + size for start, source, size in zip(starts, sources, sizes, strict=True))
    copy = tiny_llama()
    finalized = th.replace_(copy, hf.plan(copy, num_layers, group_sizes=sizes, init=sources)).finalize()
    inputs = batches(1, seed=7)[0]
    with torch.no_grad():
        torch.testing.assert_close(finalized(**inputs).logits, pruned.model(**inputs).logits)


def test_layer_similarities_of_a_run_of_identity_layers_is_one_and_streamline_finds_it():
    model = tiny_llama()
    for index in (2, 3, 4):
        make_identity_(model.model.layers[index])
    similarity = layer_selection.layer_similarities(model, batches())
    assert torch.isnan(similarity[1, 0]) and not torch.isnan(similarity[0, 5])
    assert similarity[2, 4] == pytest.approx(1.0, abs=1e-6)
    assert layer_selection.most_similar_run(similarity, 3) == 2
    # The run 2..4 is the identity; its replacement, a copy of layer 2, is too: nothing to learn.
    pruned = depth_baselines.streamline(model, 4, batches(), steps=2)
    assert pruned.replaced == (2, 3) and pruned.sources == (0, 1, 2, 5)
    assert pruned.mse[0] == pytest.approx(0.0, abs=1e-10)


def test_streamline_mse_training_brings_the_layer_closer_to_the_run():
    model = tiny_llama()
    pruned = depth_baselines.streamline(model, 3, batches(4), steps=60, lr=3e-3)
    start, length = pruned.replaced
    assert length == 4 and pruned.scores[start] == max(pruned.scores)
    before, after = pruned.mse
    assert after < 0.7 * before
    assert len(pruned.model.model.layers) == 3 and pruned.model.config.num_hidden_layers == 3
    # The MSE the function reports is the one the pruned model's layer has on the recorded run.
    recorded = depth_baselines._record_run(model, hf.layer_stack(model), batches(4), start, length)
    replacement = pruned.model.model.layers[start]
    assert depth_baselines._run_mse(replacement, recorded) == pytest.approx(after, rel=1e-5)


def test_the_pruned_models_reload_without_theseus_with_identical_outputs_and_tokens(tmp_path):
    model = tiny_llama()
    inputs = {"input_ids": torch.randint(3, 64, (2, 7), generator=torch.Generator().manual_seed(3))}
    generate = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "pad_token_id": 0}
    pruned = {
        "shortgpt": depth_baselines.shortgpt(model, 4, batches()).model,
        "streamline": depth_baselines.streamline(model, 3, batches(), steps=5, lr=1e-3).model,
    }
    cases, expected = [], {}
    for name, compact in pruned.items():
        compact.save_pretrained(tmp_path / name)
        torch.save(inputs, tmp_path / f"{name}.inputs.pt")
        with torch.no_grad():
            expected[name] = (
                compact(**inputs).logits,
                compact.generate(**inputs, do_sample=False, **generate),  # with its KV cache
            )
        cases.append(
            {
                "auto": "AutoModelForCausalLM",
                "folder": str(tmp_path / name),
                "inputs": str(tmp_path / f"{name}.inputs.pt"),
                "result": str(tmp_path / f"{name}.result.pt"),
                "generates": True,
                "generate": generate,
            }
        )
    for name, reloaded in zip(pruned, reload_without_theseus(cases), strict=True):
        assert reloaded["class"] == "LlamaForCausalLM"
        torch.testing.assert_close(reloaded["output"], expected[name][0])
        assert torch.equal(reloaded["tokens"], expected[name][1])
        assert expected[name][1].shape[1] == 7 + NEW_TOKENS


def test_bad_requests_are_refused_before_anything_runs():
    model = tiny_llama(4)
    with pytest.raises(ValueError, match=r"num_layers must be an integer in \[1, 4\)"):
        depth_baselines.shortgpt(model, 4, batches())
    with pytest.raises(ValueError, match=r"source must index a layer of the run of 3"):
        depth_baselines.streamline(model, 2, batches(), source=3)
    with pytest.raises(ValueError, match="increasing layer indices"):
        depth_baselines.keep_layers(model, [2, 1])
    with pytest.raises(ValueError, match="prunes nothing"):
        depth_baselines.keep_layers(model, [0, 1, 2, 3])
    with pytest.raises(ValueError, match="at least one calibration batch"):
        layer_selection.block_influence(model, [])
