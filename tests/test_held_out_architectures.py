"""Architectures the tests never saw, tried as a user would. Each is either exact (replaced, finalized,
saved and reloaded with the same outputs) or refused with its true cause, the model bit-identical. Tiny configs
built in code, no weights."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers
from torch import nn

import theseus_core as th
from theseus_adapters import hf
from theseus_core.testing import assert_replacement_equivalence


def build(config: str, model: str, **options: Any) -> nn.Module:
    torch.manual_seed(0)
    return getattr(transformers, model)(getattr(transformers, config)(**options))


def tokens(length: int) -> torch.Tensor:
    return torch.randint(3, 64, (2, length), generator=torch.Generator().manual_seed(0))


def pixels(size: int) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))


def snapshot(model: nn.Module) -> tuple:
    return (
        repr(model),
        {name: tensor.clone() for name, tensor in model.state_dict().items()},
        [p.requires_grad for p in model.parameters()],
        [m.training for m in model.modules()],
    )


def assert_untouched(model: nn.Module, before: tuple) -> None:
    after = snapshot(model)
    assert after[0] == before[0] and after[2:] == before[2:]
    assert list(after[1]) == list(before[1])
    assert all(torch.equal(after[1][name], tensor) for name, tensor in before[1].items())


def refused(model: nn.Module, make_plan, error: type[Exception], message: str, **examples: Any) -> None:
    """The plan or replace_ refuses with ``message`` and leaves the model bit-identical."""
    before = snapshot(model)
    with pytest.raises(error, match=message):
        th.replace_(model, make_plan(model), **examples)
    assert_untouched(model, before)


def exact_after_reload(model: nn.Module, plan: th.Plan, inputs: dict[str, Any], tmp_path) -> nn.Module:
    """Replaces, finalizes, saves and reloads in plain transformers; the reload computes what the finalized did."""
    theseus = th.replace_(model, plan, example_kwargs=inputs)
    compact = theseus.finalize().eval()
    compact.save_pretrained(tmp_path)
    reloaded = type(compact).from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs)[0], compact(**inputs)[0])
    return compact


# ---------------------------------------------------------------- accepted, then wrong: now exact or refused

DINOV2 = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=32, image_size=32)


def test_a_backbone_config_keeps_stage_names_and_out_features_in_step(tmp_path):
    model = build("Dinov2Config", "Dinov2Model", **DINOV2, patch_size=8)
    compact = exact_after_reload(model, hf.plan(model, 2), {"pixel_values": pixels(32)}, tmp_path)
    assert compact.config.stage_names == ["stem", "stage1", "stage2"]
    assert compact.config.out_features == ["stage2"] and compact.config.out_indices == [2]


def test_a_backbone_output_inside_a_group_is_refused_before_any_change():
    model = build("Dinov2Config", "Dinov2Model", **DINOV2, patch_size=8, out_features=["stage1", "stage4"])
    refused(model, lambda m: hf.plan(m, 2), ValueError, r"out_features names 'stage1', the output of layer 0")


def test_one_stage_of_several_updates_its_entry_of_depths(tmp_path):
    options = dict(num_encoder_blocks=2, depths=[2, 2], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3])
    options |= dict(strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2])
    model = build("SegformerConfig", "SegformerModel", **options)
    compact = exact_after_reload(
        model, hf.plan(model, 1, stack="stages.0.blocks"), {"pixel_values": pixels(32)}, tmp_path
    )
    assert (compact.config.num_encoder_blocks, compact.config.depths) == (2, [1, 2])


def test_a_stage_whose_length_no_config_list_holds_is_refused_before_any_change():
    options = dict(num_encoder_blocks=2, depths=[2, 2], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3])
    model = build("SegformerConfig", "SegformerModel", **options, strides=[4, 2], num_attention_heads=[1, 2])
    model.config.depths = [3, 3]  # no entry says 2: the count that finalize would write is unknown
    refused(model, lambda m: hf.plan(m, 1, stack="stages.0.blocks"), ValueError, r"one stage of several .* \(depths\)")


GEMMA2 = dict(vocab_size=64, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1)
GEMMA2 |= dict(head_dim=8, intermediate_size=32, sliding_window=4, max_position_embeddings=64)


def test_a_batch_longer_than_the_window_shows_a_group_mixing_sliding_and_full_attention():
    model = build("Gemma2Config", "Gemma2Model", **GEMMA2)
    refused(
        model,
        lambda m: th.plan(m, "layers", num_groups=2, successor=th.copy_module(0)),
        th.VerificationError,
        r"example batch 1 in training mode\) the output of group 'layers\[0:2\]'.*calls layer 1 of the group with "
        r"another 'attention_mask' than layer 0",
        example_inputs=[{"input_ids": tokens(4)}, {"input_ids": tokens(16)}],
        example_kwargs={"use_cache": False},
    )


def test_hf_plans_verify_on_a_batch_longer_than_any_window():
    model = build("MistralConfig", "MistralModel", **GEMMA2)
    plan = hf.plan(model, 2)
    batch = {"input_ids": tokens(4), "attention_mask": torch.ones(2, 4), "labels": tokens(4), "use_cache": False}
    [(args, longer)] = plan.more_examples((), batch)
    assert args == () and longer["input_ids"].shape == longer["attention_mask"].shape == longer["labels"].shape
    assert longer["input_ids"].shape == (2, 9) and longer["use_cache"] is False
    assert torch.equal(longer["input_ids"][:, 4:8], tokens(4))
    assert plan.more_examples((), {"input_ids": tokens(12)}) == []


RWKV = dict(vocab_size=64, hidden_size=16, num_hidden_layers=4, attention_hidden_size=16, intermediate_size=32)
RWKV |= dict(context_length=32)


def test_a_model_that_rewrites_its_weights_in_eval_mode_is_refused():
    model = build("RwkvConfig", "RwkvModel", **RWKV, rescale_every=2)
    halves = lambda m: th.plan(m, "blocks", num_groups=2, successor=th.copy_module(0))  # noqa: E731
    examples = {"example_kwargs": {"input_ids": tokens(6), "use_cache": False}}
    refused(model, halves, th.VerificationError, r"in eval mode wrote into its own weights \(blocks\.", **examples)
    refused(model, lambda m: hf.plan(m, 2), ValueError, "set config.rescale_every=0")


def test_rwkv_without_rescaling_keeps_its_first_layer_apart(tmp_path):
    model = build("RwkvConfig", "RwkvModel", **RWKV, rescale_every=0)
    plan = hf.plan(model, 2)  # block 0 has the extra pre-norm: groups [1, 3]
    assert [spec.path for spec in plan] == ["blocks[0:1]", "blocks[1:4]"]
    exact_after_reload(model, plan, {"input_ids": tokens(6), "use_cache": False}, tmp_path)


def test_a_model_that_rebuilds_itself_for_the_input_is_refused_not_crashed():
    options = dict(vocab_size=64, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32)
    model = build("BigBirdConfig", "BigBirdModel", **options, block_size=2, num_random_blocks=1)
    refused(
        model,
        lambda m: hf.plan(m, 2),
        th.VerificationError,
        r"replaced its own submodule 'self' of encoder\.layer\.0\.attention.*rebuilds itself for this input",
        example_kwargs={"input_ids": tokens(8)},
    )


def test_boundary_widths_follow_the_weight_layout_not_attribute_names():
    from timm.layers import ConvNormAct

    torch.manual_seed(0)
    model = nn.Sequential(*(ConvNormAct(8, 8, 3) for _ in range(4)))
    spec = th.ModuleSpec("[0:2]", lambda group: ConvNormAct(8, 4, 3), out_proj="linear")
    inputs = {"example_inputs": (torch.randn(2, 8, 6, 6),)}
    assert_replacement_equivalence(model, [spec], inputs["example_inputs"])
    theseus = th.replace_(model, [spec])
    assert isinstance(theseus.sites[0].successor.out_proj, nn.Conv2d)
    theseus.restore()
    narrower = th.ModuleSpec("[0:2]", lambda group: ConvNormAct(8, 4, 3))  # a channel mismatch, not a spatial one
    refused(model, lambda m: [narrower], ValueError, r"fix the successor or add out_proj='linear'", **inputs)


# ---------------------------------------------------------------- refused for the true reason, or planned


def test_dense_then_moe_layers_are_planned_apart(tmp_path):
    options = dict(vocab_size=64, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=2)
    options |= dict(intermediate_size=32, moe_intermediate_size=8, n_routed_experts=4, num_experts_per_tok=2)
    options |= dict(n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1, q_lora_rank=None)
    options |= dict(kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, max_position_embeddings=64)
    model = build("DeepseekV3Config", "DeepseekV3ForCausalLM", **options)
    plan = hf.plan(model, 2)
    assert [spec.path for spec in plan] == ["model.layers[0:1]", "model.layers[1:4]"]
    compact = exact_after_reload(model, plan, {"input_ids": tokens(6), "use_cache": False}, tmp_path)
    assert compact.config.first_k_dense_replace == 1


def test_t5_first_layer_with_the_relative_attention_table_is_its_own_group(tmp_path):
    options = dict(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=4, num_heads=2)
    model = build("T5Config", "T5EncoderModel", **options)
    plan = hf.plan(model, 2)
    assert [spec.path for spec in plan] == ["encoder.block[0:1]", "encoder.block[1:4]"]
    exact_after_reload(model, plan, {"input_ids": tokens(6)}, tmp_path)


def test_layers_that_alternate_kinds_may_still_keep_one_layer_a_group():
    model = build("Gemma2Config", "Gemma2Model", **GEMMA2)  # a successor of another kind (quantized) keeps the depth
    plan = hf.plan(model, 4, successor=th.copy_module(0))
    assert [spec.path for spec in plan] == [f"layers[{i}:{i + 1}]" for i in range(4)]


@pytest.mark.parametrize(
    ("make", "kwargs", "message"),
    [
        (
            lambda: build("Gemma2Config", "Gemma2Model", **GEMMA2),
            {},
            r"change kind from each layer to the next.*config.layer_types entries 'sliding_attention' and 'full_",
        ),
        (
            lambda: build(
                "ReformerConfig",
                "ReformerModel",
                vocab_size=64,
                hidden_size=16,
                num_attention_heads=2,
                attention_head_size=8,
                attn_layers=["local", "lsh", "local", "lsh"],
                feed_forward_size=32,
                axial_pos_embds=False,
                max_position_embeddings=64,
            ),
            {},
            r"config.attn_layers entries 'local' and 'lsh'",
        ),
        (
            lambda: build(
                "JambaConfig",
                "JambaModel",
                vocab_size=64,
                hidden_size=16,
                num_hidden_layers=4,
                num_attention_heads=2,
                num_key_value_heads=1,
                intermediate_size=32,
                attn_layer_period=2,
                attn_layer_offset=1,
                expert_layer_period=2,
                expert_layer_offset=1,
                num_experts=2,
                mamba_d_state=4,
                mamba_dt_rank=4,
            ),
            {},
            r"'layers' change kind .*classes JambaMambaDecoderLayer and JambaAttentionDecoderLayer",
        ),
        (
            lambda: build(
                "ModernBertConfig",
                "ModernBertModel",
                vocab_size=64,
                hidden_size=16,
                num_hidden_layers=4,
                num_attention_heads=2,
                intermediate_size=32,
                global_attn_every_n_layers=3,
                local_attention=4,
                pad_token_id=0,
                bos_token_id=1,
                eos_token_id=2,
                cls_token_id=1,
                sep_token_id=2,
            ),
            {},
            r"come in 3 runs of one kind: layer 0, layers 1..2, layer 3 .*num_layers must be at least 3",
        ),
        (
            lambda: build(
                "SwinConfig", "SwinModel", image_size=16, patch_size=2, embed_dim=8, depths=[2, 2], num_heads=[1, 2]
            ),
            {"num_layers": 1},
            r"differ in parameters: downsample.* pass stack='encoder.layers.0.blocks'",
        ),
        (
            lambda: build(
                "M2M100Config",
                "M2M100Model",
                vocab_size=64,
                d_model=16,
                encoder_layers=4,
                decoder_layers=1,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=32,
                decoder_ffn_dim=32,
            ),
            {"stack": "encoder"},
            r"config.encoder_layerdrop = 0.05 makes M2M100Model skip layers .*set config.encoder_layerdrop = 0",
        ),
        (
            lambda: build(
                "LlamaConfig", "LlamaModel", vocab_size=64, hidden_size=16, num_hidden_layers=4, num_attention_heads=2
            ),
            {"group_sizes": [2, 2]},
            None,  # one kind: any grouping is fine
        ),
    ],
    ids=["gemma2", "reformer", "jamba", "modernbert", "swin", "m2m100", "llama"],
)
def test_hf_plan_names_the_actual_mismatch(make, kwargs, message):
    model = make()
    if message is None:
        hf.plan(model, **{"num_layers": 2, **kwargs})
        return
    before = snapshot(model)
    with pytest.raises(ValueError, match=message):
        hf.plan(model, **{"num_layers": 2, **kwargs})
    assert_untouched(model, before)


M2M100 = dict(vocab_size=64, d_model=16, encoder_layers=4, decoder_layers=1, encoder_attention_heads=2)
M2M100 |= dict(decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, decoder_layerdrop=0.0)


@pytest.mark.parametrize(
    ("layerdrop", "message"),
    [
        (0.01, r"draws random numbers per layer \(LayerDrop"),  # no layer skipped: the draws give it away
        (0.3, r"skipped layer 0 of group 'encoder.layers\[2:4\]'.*LayerDrop"),
    ],
)
def test_layerdrop_is_named_not_blamed_on_the_loop(layerdrop, message):
    model = build("M2M100Config", "M2M100Model", **M2M100, encoder_layerdrop=layerdrop)
    examples = {"input_ids": tokens(6), "decoder_input_ids": tokens(3)}
    halves = lambda m: th.plan(m, "encoder.layers", num_groups=2, successor=th.copy_module(0))  # noqa: E731
    refused(model, halves, th.VerificationError, message, example_kwargs=examples)


def test_randomness_outside_torch_is_named_not_blamed_on_the_loop():
    options = dict(vocab_size=16, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32)
    options |= dict(conv_dim=(8, 8), conv_stride=(4, 4), conv_kernel=(8, 4), num_conv_pos_embeddings=4)
    options |= dict(num_conv_pos_embedding_groups=2, layerdrop=0.0, mask_time_prob=0.5, mask_time_length=2)
    model = build("Wav2Vec2Config", "Wav2Vec2Model", **options)
    refused(
        model,
        lambda m: th.plan(m, "encoder.layers", num_groups=2, successor=th.copy_module(0)),
        th.VerificationError,
        r"two training-mode runs of the original .* differ.*outside torch's RNG",
        example_kwargs={"input_values": torch.randn(2, 400, generator=torch.Generator().manual_seed(0))},
    )


def test_a_resnet_of_unknown_blocks_is_not_told_to_use_the_width_it_has():
    import timm

    from theseus_adapters import resnet

    torch.manual_seed(0)
    model = timm.create_model("skresnet18", num_classes=4)  # SelectiveKernel convolutions, not nn.Conv2d
    before = snapshot(model)
    with pytest.raises(ValueError, match=r"SelectiveKernelBasic\) has no conv1 .*whatever the width") as raised:
        resnet.plan(model, (1, 1, 1, 1))
    assert "use width=1" not in str(raised.value)
    assert_untouched(model, before)


# ---------------------------------------------------------------- containers that read their layers' attributes


def encoder_layer(width: int, ffn: int) -> nn.Module:
    return nn.TransformerEncoderLayer(width, 4, ffn, dropout=0.0, batch_first=True)


def decoder_layer(width: int, ffn: int) -> nn.Module:
    return nn.TransformerDecoderLayer(width, 4, ffn, dropout=0.0, batch_first=True)


def sequence(length: int, width: int = 64) -> torch.Tensor:
    return torch.randn(2, length, width, generator=torch.Generator().manual_seed(1))


PADDED = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])


@pytest.mark.parametrize(
    ("make", "path", "successor", "projected", "inputs"),
    [  # each container reads layers[0].self_attn (batch_first, and the fast path's weights and flags)
        (
            lambda: nn.TransformerEncoder(encoder_layer(64, 128), 6, enable_nested_tensor=False),
            "layers",
            lambda: encoder_layer(32, 64),
            True,
            ((sequence(5),), {}),
        ),
        (  # eval mode with a padding mask: the nested-tensor fast path hands its layers nested tensors
            lambda: nn.TransformerEncoder(encoder_layer(64, 128), 6),
            "layers",
            lambda: encoder_layer(32, 64),
            True,
            ((sequence(5),), {"src_key_padding_mask": PADDED}),
        ),
        (  # the memory goes to every layer unprojected: a narrower FFN at the same width
            lambda: nn.TransformerDecoder(decoder_layer(64, 128), 6),
            "layers",
            lambda: decoder_layer(64, 32),
            False,
            ((sequence(5), sequence(3)), {}),
        ),
        (
            lambda: nn.Transformer(64, 4, 4, 4, 128, dropout=0.0, batch_first=True),
            "encoder.layers",
            lambda: encoder_layer(32, 64),
            True,
            ((sequence(3), sequence(5)), {}),
        ),
    ],
    ids=["encoder", "encoder-nested-mask", "decoder", "transformer"],
)
def test_a_container_that_reads_its_layers_gets_a_finalized_model_equal_to_rate_one(
    make, path, successor, projected, inputs
):
    torch.manual_seed(0)
    model = make()
    projection = "linear" if projected else None
    specs = th.plan(
        model, path, num_groups=2, successor=lambda group: successor(), in_proj=projection, out_proj=projection
    )
    args, kwargs = inputs
    assert_replacement_equivalence(model, specs, args, kwargs)  # rate 1 and eval mode equal the finalized model
    th.replace_(model, specs, example_inputs=args, example_kwargs=kwargs).finalize()  # checked against rate 1
    assert isinstance(model.get_submodule(path)[0], th.Projected if projected else nn.Module)


# ---------------------------------------------------------------- windows a short example would hide

MISTRAL = dict(GEMMA2, sliding_window=4)
GPT_NEO = dict(vocab_size=64, hidden_size=16, num_layers=4, num_heads=2, window_size=4, max_position_embeddings=64)
GPT_NEO |= dict(attention_types=[[["global", "local"], 2]], bos_token_id=1, eos_token_id=2)
LONGFORMER = dict(vocab_size=64, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32)
LONGFORMER |= dict(attention_window=4, max_position_embeddings=64)
BERT = dict(vocab_size=64, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32)
MODERNBERT = dict(BERT, global_attn_every_n_layers=2, local_attention=4, pad_token_id=0, bos_token_id=1)
MODERNBERT |= dict(eos_token_id=2, cls_token_id=1, sep_token_id=2)


@pytest.mark.parametrize(
    ("config", "model", "options", "stack", "field"),
    [
        ("Gemma2Config", "Gemma2Model", GEMMA2, "layers", "sliding_window"),
        ("MistralConfig", "MistralModel", MISTRAL, "layers", "sliding_window"),
        ("GPTNeoConfig", "GPTNeoModel", GPT_NEO, "h", "window_size"),
        ("LongformerConfig", "LongformerModel", LONGFORMER, "encoder.layer", "attention_window"),
        ("BertConfig", "BertModel", dict(BERT, chunk_size_feed_forward=2), "encoder.layer", "chunk_size_feed_forward"),
        ("ModernBertConfig", "ModernBertModel", MODERNBERT, "layers", "local_attention"),
    ],
    ids=["gemma2", "mistral", "gpt-neo", "longformer", "bert-chunked-ffn", "modernbert"],
)
def test_a_window_no_example_batch_exceeds_is_refused_naming_the_config_field(config, model, options, stack, field):
    model = build(config, model, **options)
    size = getattr(model.config, field)
    size = max(size) if isinstance(size, list) else size  # Longformer lists one per layer
    message = rf"^config\.{field} = {size} of .*no example batch is longer than that \(the longest has {size} tokens"
    halves = lambda m: th.plan(m, stack, num_groups=2, successor=th.copy_module(0))  # noqa: E731
    refused(model, halves, th.VerificationError, message, example_inputs=(tokens(size),))
    refused(model, halves, th.VerificationError, message, example_kwargs={"input_ids": tokens(size)})


def test_hf_plans_add_the_longer_batch_and_refuse_one_they_cannot_lengthen():
    model = build("MistralConfig", "MistralModel", **MISTRAL)
    theseus = th.replace_(model, hf.plan(model, 2), example_kwargs={"input_ids": tokens(4), "use_cache": False})
    theseus.restore()
    positional = {"example_inputs": (tokens(4),)}  # positions unknown: the plan adds no batch
    refused(model, lambda m: hf.plan(m, 2), th.VerificationError, r"^config\.sliding_window = 4 ", **positional)


@pytest.mark.parametrize(
    ("config", "model", "options", "stack"),
    [("MistralConfig", "MistralModel", MISTRAL, "layers"), ("GPTNeoConfig", "GPTNeoModel", GPT_NEO, "h")],
    ids=["mistral", "gpt-neo"],  # GPT-Neo's local layers mask their own window: a group of global and local is exact
)
def test_a_window_a_batch_exceeds_is_verified(config, model, options, stack):
    model = build(config, model, **options)
    batches = [{"input_ids": tokens(4)}, {"input_ids": tokens(12)}]
    halves = th.plan(model, stack, num_groups=2, successor=th.copy_module(0))
    th.replace_(model, halves, example_inputs=batches, example_kwargs={"use_cache": False}).finalize()


# ---------------------------------------------------------------- encoder-decoders: both stacks export every key

T5 = dict(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=4, num_decoder_layers=4, num_heads=2)
BART = dict(vocab_size=64, d_model=16, encoder_layers=4, decoder_layers=4, encoder_attention_heads=2)
BART |= dict(decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)
MARIAN = dict(BART, decoder_start_token_id=0, pad_token_id=0)


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
@pytest.mark.parametrize(
    ("config", "model", "options"),
    [
        ("T5Config", "T5ForConditionalGeneration", T5),
        ("MT5Config", "MT5ForConditionalGeneration", T5),
        ("UMT5Config", "UMT5ForConditionalGeneration", T5),
        ("BartConfig", "BartForConditionalGeneration", BART),
        ("MarianConfig", "MarianMTModel", MARIAN),
    ],
    ids=["t5", "mt5", "umt5", "bart", "marian"],
)
def test_an_encoder_decoder_exports_every_key_of_either_stack(config, model, options, stack, tmp_path):
    model = build(config, model, **options)
    inputs = {"input_ids": tokens(6), "decoder_input_ids": tokens(4), "use_cache": False}
    compact = th.replace_(model, hf.plan(model, 2, stack=stack), example_kwargs=inputs).finalize().eval()
    compact.save_pretrained(tmp_path)
    reloaded, info = type(compact).from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched key
    assert list(reloaded.state_dict()) == list(compact.state_dict())
    with torch.no_grad():
        assert torch.equal(reloaded.eval()(**inputs).logits, compact(**inputs).logits)
