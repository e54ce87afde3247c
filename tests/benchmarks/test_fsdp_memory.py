"""The per-rank memory model's arithmetic (`benchmarks.fsdp_memory`)."""

from __future__ import annotations

import pytest

from benchmarks.fsdp_memory import LLAMA_8B, PARTS, SMOLLM2, Decoder, per_rank

TINY = Decoder("tiny", hidden=8, intermediate=16, layers=4, heads=2, kv_heads=1, vocabulary=10, tied=True)


def test_a_layer_counts_its_parameters_and_the_values_autograd_keeps():
    assert TINY.kv_width == 4
    # q and o 8x8, k and v 8x4, gate, up and down 8x16, two norms of 8
    assert TINY.layer_parameters == 2 * 64 + 2 * 32 + 3 * 128 + 2 * 8
    assert TINY.outside_parameters == 10 * 8 + 8  # tied head: the embedding once, and the final norm
    assert TINY.trained_values() == 9 * 8 + 2 * 4 + 4 * 16
    assert TINY.frozen_values() == 4 * 8 + 2 * 4 + 3 * 16
    assert SMOLLM2.layer_parameters * 30 + SMOLLM2.outside_parameters == pytest.approx(134.5e6, rel=1e-3)


def test_fp32_on_cpus_parts_by_hand():
    """4 -> 2 layers (groups of 2) on 2 ranks, 3 tokens each: the first successor and 2 frozen layers keep tensors."""
    parts = per_rank(TINY, 2, 2, "fsdp", tokens=3, gpu=False)
    layer, outside = TINY.layer_parameters, TINY.outside_parameters
    assert parts["predecessor"] == (4 * layer + outside) * 4 / 2
    assert parts["successors"] == parts["gradients"] == 2 * layer * 4 / 2
    assert parts["optimizer"] == 2 * layer * 8 / 2
    assert parts["gathered"] == outside * 4 + 2 * layer * 4 + layer * 4
    assert parts["activations"] == 3 * (2 * TINY.frozen_values() + TINY.trained_values()) * 4
    assert parts["logits"] == 4 * 3 * 10 * 4
    held = parts["predecessor"] + parts["successors"] + parts["optimizer"]
    begins = parts["activations"] + parts["logits"] + outside * 4
    ends = parts["gradients"] + parts["gathered"]
    assert parts["total"] == held + max(begins, ends)
    assert list(parts) == list(PARTS)


def test_sharding_divides_the_state_and_gpus_halve_what_they_store_in_bf16():
    ddp = per_rank(LLAMA_8B, 16, 8, "ddp", tokens=512)
    fsdp = per_rank(LLAMA_8B, 16, 8, "fsdp", tokens=512)
    alone = per_rank(LLAMA_8B, 16, 1, "fsdp", tokens=512)
    for key in ("successors", "gradients", "optimizer"):
        assert fsdp[key] == ddp[key] / 8 == alone[key] / 8
    cpu = per_rank(LLAMA_8B, 16, 8, "fsdp", tokens=512, gpu=False)
    assert fsdp["activations"] == cpu["activations"] / 2 and fsdp["logits"] == cpu["logits"] / 2
    assert ddp["activations"] == cpu["activations"]  # DDP trains in fp32 on a GPU too
    checkpointed = per_rank(LLAMA_8B, 16, 8, "fsdp", tokens=512, checkpointing=True)
    assert checkpointed["activations"] < fsdp["activations"] and checkpointed["total"] <= fsdp["total"]
