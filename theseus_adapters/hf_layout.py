"""The layout of a transformers layer stack, for `theseus_adapters.hf`: which layers are of one kind, groups that
keep kinds apart, and the config fields finalize keeps in step with the layers.

A layer's *kind* is its class, its parameters' names and shapes, and its entries in the per-layer config lists
(``layer_types``). A group must hold layers of one kind: a site calls all of its layers as the model calls the
first (one mask, one MoE-or-dense shape), and a successor copied from one kind cannot stand for another. Where the
kinds change once or a few times (DeepSeek-V3's dense layers before its MoE layers, RWKV's and ModernBERT's first
layer with extra norms, Qwen2's full-attention layers below its sliding ones), `kind_group_sizes` plans groups
within the runs of one kind; where they alternate (Gemma2's sliding and full layers, Reformer's attention kinds)
no group of consecutive layers has one kind, and `plan` refuses, naming the difference.

On finalize, besides the layer count: per-stage lists (``depths``) when the stack is one stage of several
(Segformer's ``stages.0.blocks``, Swin's ``encoder.layers.0.blocks``), a backbone's ``stage_names`` /
``out_features`` / ``out_indices`` when it has one stage per layer (DINOv2, BEiT), and counts of leading layers of
one kind (``first_k_dense_replace``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from torch import nn

from theseus_core.checks import is_int

LEADING_COUNTS = ("first_k_dense_replace",)
"""Config fields counting the first layers of one kind: finalize counts the kept layers that came from them."""
WINDOW_FIELDS = (
    "sliding_window",
    "attention_window",
    "block_size",
    "local_attn_window",
    "window",
    "window_size",
    "local_attention",
    "local_radius",
    "chunk_size_feed_forward",
    "local_attn_chunk_length",
    "lsh_attn_chunk_length",
)
"""Config fields naming a window, chunk or bucket of tokens: `hf.plan` verifies on a batch longer than any of them,
and `uncovered_window` refuses example batches that no sequence of exceeds one (a window as long as the batches
hides a group that mixes windowed and full layers; a chunk as long hides a loop over chunks)."""
POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_source_positions", "context_length")
SEQUENCES = ("input_ids", "decoder_input_ids", "inputs_embeds")
"""Keyword arguments whose second dimension is a sequence `longer_batch` repeats."""

Kind = tuple[str, tuple[tuple[str, tuple[int, ...]], ...], tuple[tuple[str, Any], ...]]


def layer_kinds(layers: Sequence[nn.Module], config: Any, per_layer: Sequence[str]) -> list[Kind]:
    """Per layer: its class, its parameters' names and shapes, and its entries in the per-layer config lists."""
    kinds = []
    for index, layer in enumerate(layers):
        shapes = tuple((name, tuple(param.shape)) for name, param in layer.named_parameters())
        entries = tuple((name, getattr(config, name)[index]) for name in per_layer)
        kinds.append((type(layer).__name__, shapes, entries))
    return kinds


def kind_difference(first: Kind, other: Kind) -> str:
    """What tells two kinds apart, in words."""
    if first[0] != other[0]:
        return f"classes {first[0]} and {other[0]}"
    for (name, a), (_, b) in zip(first[2], other[2], strict=True):
        if a != b:
            return f"config.{name} entries {a!r} and {b!r}"
    a, b = dict(first[1]), dict(other[1])
    only = sorted(set(a) ^ set(b))
    if only:
        owner = "the first" if only[0] in a else "the second"
        return f"parameters: {only[0]} only in {owner}" + (f" (and {len(only) - 1} more)" if len(only) > 1 else "")
    name = next(name for name in a if a[name] != b[name])
    return f"parameter shapes: {name} is {a[name]} and {b[name]}"


def runs_of(kinds: Sequence[Kind]) -> list[tuple[int, int]]:
    """(start, stop) of each run of consecutive layers of one kind."""
    bounds = [0, *(i for i in range(1, len(kinds)) if kinds[i] != kinds[i - 1]), len(kinds)]
    return list(itertools.pairwise(bounds))


def describe_runs(kinds: Sequence[Kind], runs: Sequence[tuple[int, int]]) -> str:
    parts = [f"layers {start}..{stop - 1}" if stop - start > 1 else f"layer {start}" for start, stop in runs]
    changes = "; ".join(
        f"{parts[i]} and {parts[i + 1]} differ in {kind_difference(kinds[runs[i][0]], kinds[runs[i + 1][0]])}"
        for i in range(min(len(runs) - 1, 3))
    )
    return f"{', '.join(parts[:6])}{' ...' if len(parts) > 6 else ''} ({changes})"


def kind_group_sizes(
    kinds: Sequence[Kind], num_layers: int, group_sizes: Sequence[int] | None, path: str, stages: str
) -> list[int] | None:
    """Group sizes that keep the kinds apart: ``group_sizes`` checked, or ``num_layers`` groups spread over the
    runs of one kind in proportion to their length (each run at least one). ``None`` when every layer is of one
    kind (the caller splits evenly). Raises `ValueError` naming the kinds when that is impossible."""
    runs = runs_of(kinds)
    if len(runs) == 1:
        return None
    described = describe_runs(kinds, runs)
    if group_sizes is None and num_layers >= len(kinds):  # one layer a group (a successor of another kind)
        return [1] * len(kinds)
    if group_sizes is None and all(stop - start == 1 for start, stop in runs):
        raise ValueError(
            f"the layers of {path!r} change kind from each layer to the next: {described}. A group of consecutive "
            f"layers would mix kinds (a site calls every layer of its group as the model calls the first), so "
            f"theseus_adapters.hf cannot compress this stack{stages}"
        )
    if group_sizes is not None:
        start = 0
        for position, size in enumerate(group_sizes):
            if len({kinds[i] for i in range(start, start + size)}) > 1:
                raise ValueError(
                    f"group {position} (layers {start}..{start + size - 1}) of {path!r} would mix layers of "
                    f"different kinds: {described}; choose group_sizes within those runs"
                )
            start += size
        return list(group_sizes)
    if num_layers < len(runs):
        raise ValueError(
            f"the layers of {path!r} come in {len(runs)} runs of one kind: {described}. Groups keep kinds apart, "
            f"so num_layers must be at least {len(runs)}"
        )
    counts = [1] * len(runs)
    for _ in range(num_layers - len(runs)):  # one more group for the run with the most layers per group
        candidates = [i for i, (start, stop) in enumerate(runs) if counts[i] < stop - start]
        best = max(candidates, key=lambda i: ((runs[i][1] - runs[i][0]) / counts[i], -i))
        counts[best] += 1
    sizes = []
    for (start, stop), count in zip(runs, counts, strict=True):
        size, extra = divmod(stop - start, count)
        sizes += [size + 1] * extra + [size] * (count - extra)
    return sizes


def check_sources(kinds: Sequence[Kind], sizes: Sequence[int], sources: Sequence[int], path: str) -> None:
    """Each successor must start from a layer of its group's kind."""
    start = 0
    for position, (size, source) in enumerate(zip(sizes, sources, strict=True)):
        if kinds[source] != kinds[start]:
            raise ValueError(
                f"group {position} (layers {start}..{start + size - 1}) of {path!r} would start its successor from "
                f"layer {source}, of another kind ({kind_difference(kinds[start], kinds[source])}); use "
                f"init='every_other' (each group's first layer) or list the layers to copy"
            )
        start += size


def find_stage(
    model: nn.Module, path: str, config: Any, length: int, shortened: bool = False
) -> tuple[str, int] | None:
    """(per-stage list, stage index) when the stack ``path`` is one stage of several (``stages.0.blocks``): a
    numbered step of the path whose container has as many entries as a config list of layer counts such as
    ``depths``, whose entry is the stack's length (any count, when the stack was ``shortened`` already)."""
    parts = path.split(".")
    for end in range(len(parts) - 1, 0, -1):
        if not parts[end].isdigit():
            continue
        container = model.get_submodule(".".join(parts[:end]))
        for name in ("depths", "num_layers_per_stage", "stage_depths"):
            values = getattr(config, name, None)
            stage = int(parts[end])
            if (
                isinstance(values, (list, tuple))
                and len(values) == len(container)
                and (values[stage] == length or (shortened and is_int(values[stage])))
            ):
                return name, stage
    return None


def backbone_stages(config: Any, length: int) -> bool:
    """Whether the config is a backbone's with one stage per layer (``stem``, ``stage1``, ... ``stage<n>``)."""
    names = getattr(config, "stage_names", None)
    return isinstance(names, (list, tuple)) and len(names) == length + 1 and getattr(config, "out_features", None)


def check_backbone(config: Any, sizes: Sequence[int], path: str) -> None:
    """Every stage a backbone outputs must end a group, so that the compressed model has that output."""
    ends = {sum(sizes[: i + 1]) for i in range(len(sizes))}  # stage k is the output of layer k - 1
    for name in config.out_features:
        stage = list(config.stage_names).index(name)
        if stage and stage not in ends:
            raise ValueError(
                f"config.out_features names {name!r}, the output of layer {stage - 1} of {path!r}, which would lie "
                f"inside a group; choose group_sizes so that each stage the backbone outputs ends a group"
            )


def sync_stages(config: Any, ends: Sequence[int]) -> None:
    """A backbone's ``stage_names``, ``out_features`` and ``out_indices`` after the stack kept ``len(ends)`` layers,
    new layer i standing for the old layers up to ``ends[i] - 1`` (its stage is old stage ``ends[i]``)."""
    old = list(config.stage_names)
    names = ["stem", *(f"stage{i}" for i in range(1, len(ends) + 1))]
    features = []
    for name in config.out_features:
        stage = old.index(name)
        features.append(names[0] if stage == 0 else names[list(ends).index(stage) + 1])
    config.stage_names = names
    config.set_output_features_output_indices(out_features=features, out_indices=None)


def sync_leading_counts(config: Any, sources: Sequence[int]) -> None:
    for name in LEADING_COUNTS:
        value = getattr(config, name, None)
        if is_int(value):
            setattr(config, name, sum(1 for source in sources if source < value))


def windows(config: Any) -> list[tuple[str, int]]:
    """``(field, size)`` of every `WINDOW_FIELDS` entry of ``config`` and of the configs inside it
    (``"text_config.sliding_window"``), the largest where a field lists one per layer, when positive and shorter
    than the config's position limit (a window that covers every position changes nothing)."""
    found = []
    inner = [(f"{name}.", value) for name, value in vars(config).items() if hasattr(value, "model_type")]
    for prefix, described in [("", config), *inner]:
        limits = [getattr(described, name) for name in POSITION_FIELDS if is_int(getattr(described, name, None))]
        for name in WINDOW_FIELDS:
            value = getattr(described, name, None)
            sizes = [v for v in (value if isinstance(value, (list, tuple)) else [value]) if is_int(v) and v > 0]
            if sizes and all(max(sizes) < limit for limit in limits):
                found.append((prefix + name, max(sizes)))
    return found


def sequence_length(args: tuple, kwargs: dict[str, Any]) -> int | None:
    """The longest token sequence of a batch: dimension 1 of its `SEQUENCES` keyword tensors, or of its first
    positional argument (``model(input_ids)``); ``None`` when it has none (pixels, audio)."""
    import torch

    tensors = [kwargs.get(name) for name in SEQUENCES] + list(args[:1])
    lengths = [t.shape[1] for t in tensors if isinstance(t, torch.Tensor) and t.dim() >= 2]
    return max(lengths, default=None)


def uncovered_window(model: nn.Module, batches: Sequence[tuple[tuple, dict[str, Any]]]) -> str | None:
    """Why the example batches cannot verify a transformers model: a window, chunk or bucket size its config names
    (`windows`) that no batch's token sequence exceeds; ``None`` when one does, or for a model without a config or
    batches without token sequences. `theseus_core.replace_` runs it for every plan (registered by
    `theseus_adapters.hf` as an example check)."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) is None:
        return None
    lengths = [length for args, kwargs in batches if (length := sequence_length(args, kwargs)) is not None]
    if not lengths:
        return None
    longest = max(lengths)
    for name, size in windows(config):
        if longest <= size:
            return (
                f"config.{name} = {size} of {type(model).__name__}, but no example batch is longer than that (the "
                f"longest has {longest} tokens), so verifying on them cannot show what the window or chunk changes; "
                f"add a batch of more than {size} tokens (example_inputs takes a list of batches)"
            )
    return None


def window_length(config: Any) -> int | None:
    """A sequence length longer than any window the config names (at least twice the largest, plus one, in whole
    blocks where it names a block size), within its position limit; ``None`` when it names none."""
    sizes = [size for _, size in windows(config)]
    if not sizes:
        return None
    length = 2 * max(sizes) + 1
    block = getattr(config, "block_size", None)
    if is_int(block) and block > 0:  # BigBird attends in blocks: its sparse path needs (5 + 2r) blocks and more
        length = max(length, (6 + 2 * getattr(config, "num_random_blocks", 0)) * block)
        length = -(-length // block) * block
    limits = [getattr(config, name) for name in POSITION_FIELDS if is_int(getattr(config, name, None))]
    return min([length, *limits])


def longer_batch(args: tuple, kwargs: dict[str, Any], *, length: int) -> list[tuple[tuple, dict[str, Any]]]:
    """The batch again with its token sequences repeated to ``length``, when they are shorter; ``[]`` when it has
    none to repeat, they are long enough, or it gives positions (`hf.plan`'s `theseus_core.Plan.more_examples`).
    Every keyword tensor laid out as ``[batch, sequence, ...]`` along a sequence of `SEQUENCES` (masks, token
    types, labels) is repeated alike."""
    import torch

    if "position_ids" in kwargs or args:
        return []
    lengths = {kwargs[name].shape[1] for name in SEQUENCES if isinstance(kwargs.get(name), torch.Tensor)}
    lengths = {size for size in lengths if 0 < size < length}
    if not lengths:
        return []
    longer = dict(kwargs)
    for name, tensor in kwargs.items():
        if isinstance(tensor, torch.Tensor) and tensor.dim() >= 2 and tensor.shape[1] in lengths:
            repeats = [1, -(-length // tensor.shape[1]), *[1] * (tensor.dim() - 2)]
            longer[name] = tensor.repeat(*repeats)[:, :length]
    return [((), longer)]
