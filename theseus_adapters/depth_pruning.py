"""Depth-pruning baselines for any transformers layer stack: ShortGPT and LLM-Streamline.

Both read how much each layer changes the hidden state on calibration batches and return an ordinary
transformers model of the target depth (its config synced by `theseus_adapters.hf.sync_config`: layer count,
``layer_idx`` for the KV cache, per-layer lists), so ``save_pretrained`` → ``from_pretrained`` works without
theseus. The model given is only read.

- `shortgpt` (Men et al. 2024, "ShortGPT: Layers in Large Language Models are More Redundant Than You Expect",
  §3): the Block Influence of layer i is ``BI_i = 1 − E[cos(x_i, x_{i+1})]``, the cosine between a token's hidden
  state entering and leaving the layer, averaged over the calibration tokens; the layers with the lowest BI go.
- `influence_groups`: Theseus groups around ShortGPT's kept layers, so that replacing starts from ShortGPT's model.
- `streamline` (Chen et al., ICLR 2025, "Streamlining Redundant Layers to Compress Large Language Models", §3):
  the run of ``n − m + 1`` consecutive layers whose input and output hidden states have the highest mean cosine
  is replaced by one lightweight layer trained with the MSE between its output and the run's output on the run's
  input. The paper tries an FFN and a transformer layer as the lightweight network; here it is one copy of a
  layer of the run, so that the result stays a model of the same family that plain transformers reloads.

Calibration batches are dicts of keyword arguments of the model (``input_ids``, optionally ``attention_mask``,
whose zeros are left out of the averages). Decoders run with ``use_cache=False``.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from theseus_core.checks import is_int
from theseus_core.site import primary_output, primary_parameter_name, split_primary

from .hf import Stack, layer_stack, sync_config

Batch = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class DepthPruned:
    """What `shortgpt` and `streamline` return.

    Attributes:
        model: The pruned model, an ordinary transformers model of the target depth.
        sources: For each layer of the pruned stack, the index of the predecessor layer it was copied from.
        scores: ShortGPT: the Block Influence of every predecessor layer. Streamline: for every start ``i``, the
            mean cosine between the input of layer ``i`` and the output of the run that starts there.
        replaced: Streamline: ``(start, length)`` of the run replaced by one layer. (ShortGPT: ``None``)
        mse: Streamline: the replacement layer's mean squared error to the run's output on the calibration
            batches before and after its training. (ShortGPT: ``None``)
    """

    model: nn.Module
    sources: tuple[int, ...]
    scores: tuple[float, ...]
    replaced: tuple[int, int] | None = None
    mse: tuple[float, float] | None = None


def _model_kwargs(model: nn.Module, batch: Batch) -> dict[str, Any]:
    device = next(model.parameters()).device
    kwargs = {key: value.to(device) for key, value in batch.items()}
    if hasattr(model.config, "use_cache"):  # decoders: no KV cache while layers are being looked at
        kwargs["use_cache"] = False
    return kwargs


def _token_weights(batch: Batch, hidden: torch.Tensor) -> torch.Tensor:
    """1 per token that counts (``attention_mask``), shaped like ``hidden`` without its last dimension."""
    mask = batch.get("attention_mask")
    if mask is not None and mask.shape == hidden.shape[:-1]:
        return mask.to(hidden.device, torch.float32)
    return torch.ones(hidden.shape[:-1], device=hidden.device)


@torch.no_grad()
def layer_similarities(model: nn.Module, batches: Iterable[Batch], *, stack: str | None = None) -> torch.Tensor:
    """``S[i, j]``: the mean cosine, over the calibration tokens, between the hidden state entering layer ``i``
    and the one leaving layer ``j``, for ``j >= i`` (``NaN`` below the diagonal).

    ShortGPT's Block Influence is ``1 − S[i, i]``; LLM-Streamline's run of ``k`` layers starting at ``i`` has the
    similarity ``S[i, i + k − 1]``.

    Args:
        model: A transformers model (`theseus_adapters.hf.layer_stack` finds its layers). Run in eval mode, its
            mode restored after.
        batches: Calibration batches: dicts of the model's keyword arguments.
        stack: As in `theseus_adapters.hf.layer_stack`. (default: ``None``, the model's only stack)

    Raises:
        ValueError: no batch, or the stack's layers are not all called on every batch.
    """
    found = layer_stack(model, stack)
    layers = model.get_submodule(found.path)
    count = len(layers)
    inputs: list[torch.Tensor | None] = [None] * count
    outputs: list[torch.Tensor | None] = [None] * count

    def recorder(index: int, layer: nn.Module):
        name = primary_parameter_name(layer)

        def before(module: nn.Module, args: tuple, kwargs: dict) -> None:
            inputs[index] = split_primary(args, kwargs, name, f"layer {index} of {found.path!r}")[0]

        def after(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            outputs[index] = primary_output(output)

        return before, after

    sums = torch.zeros(count, count, dtype=torch.float64)
    tokens = 0.0
    handles = []
    for index, layer in enumerate(layers):
        before, after = recorder(index, layer)
        handles.append(layer.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(layer.register_forward_hook(after, with_kwargs=True))
    with _observing(model, handles):
        for batch in batches:
            inputs[:] = outputs[:] = [None] * count
            model(**_model_kwargs(model, batch))
            missing = [i for i in range(count) if inputs[i] is None or outputs[i] is None]
            if missing:
                raise ValueError(f"layers {missing} of {found.path!r} did not run on a calibration batch")
            weights = _token_weights(batch, inputs[0])
            tokens += float(weights.sum())
            for i in range(count):
                entering = inputs[i].float()
                for j in range(i, count):
                    cosine = F.cosine_similarity(entering, outputs[j].float(), dim=-1)
                    sums[i, j] += float((cosine * weights).sum())
    if not tokens:
        raise ValueError("layer_similarities needs at least one calibration batch with a token")
    similarity = sums / tokens
    similarity[torch.ones(count, count, dtype=torch.bool).tril(-1)] = math.nan
    return similarity


@contextlib.contextmanager
def _observing(model: nn.Module, handles: list[torch.utils.hooks.RemovableHandle]) -> Iterator[None]:
    """``model`` in eval mode while the hooks of ``handles`` watch it; its mode restored and the hooks removed
    after, also on an error."""
    mode = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(mode)
        for handle in handles:
            handle.remove()


def block_influence(model: nn.Module, batches: Iterable[Batch], *, stack: str | None = None) -> torch.Tensor:
    """ShortGPT's Block Influence of every layer of the stack: ``1 − E[cos(x_in, x_out)]`` (`layer_similarities`)."""
    return 1 - layer_similarities(model, batches, stack=stack).diagonal()


def keep_layers(
    model: nn.Module,
    sources: Sequence[int],
    *,
    stack: str | Stack | None = None,
    replacements: Mapping[int, nn.Module] | None = None,
) -> nn.Module:
    """A copy of ``model`` whose stack holds the layers ``sources`` in that order, its config synced.

    Args:
        model: A transformers model. Only read (deep-copied).
        sources: Indices of the layers to keep, increasing.
        stack: As in `theseus_adapters.hf.layer_stack`, or the `Stack` found on ``model``. (default: ``None``)
        replacements: ``{position: layer}``: the layer at that position of the new stack instead of a copy of
            layer ``sources[position]``; it counts as that layer for ``layer_idx`` and the per-layer lists.
            (default: none)

    Raises:
        ValueError: ``sources`` empty, out of range, not increasing, or keeping every layer.
    """
    found = stack if isinstance(stack, Stack) else layer_stack(model, stack)
    total = len(model.get_submodule(found.path))
    sources = list(sources)
    if not sources or any(not 0 <= i < total for i in sources) or sorted(set(sources)) != sources:
        raise ValueError(f"sources must be increasing layer indices in [0, {total}), got {sources}")
    if len(sources) == total:
        raise ValueError(f"keeping all {total} layers prunes nothing")
    pruned = copy.deepcopy(model)
    layers = pruned.get_submodule(found.path)
    chosen = [layers[i] for i in sources]
    for position, layer in (replacements or {}).items():
        chosen[position] = layer
    pruned.set_submodule(found.path, nn.ModuleList(chosen))
    sync_config(pruned, sources, stack=found)
    return pruned


def shortgpt(model: nn.Module, num_layers: int, batches: Iterable[Batch], *, stack: str | None = None) -> DepthPruned:
    """ShortGPT: keeps the ``num_layers`` layers of highest Block Influence on ``batches``, in their order.

    Raises:
        ValueError: ``num_layers`` not in ``[1, n)``, or as `layer_similarities`.
    """
    found = layer_stack(model, stack)
    total = len(model.get_submodule(found.path))
    _check_depth(num_layers, total)
    scores = block_influence(model, batches, stack=stack)
    kept = _most_influential(scores, num_layers)
    return DepthPruned(keep_layers(model, kept, stack=found), tuple(kept), tuple(float(s) for s in scores))


def _most_influential(scores: torch.Tensor, num_layers: int) -> list[int]:
    """The ``num_layers`` layers of highest Block Influence, in order; a tie removes the later layer (the stable
    sort keeps the earlier one first)."""
    order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
    return sorted(order[:num_layers])


def influence_groups(
    model: nn.Module, num_layers: int, batches: Iterable[Batch], *, stack: str | None = None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Groups for a Theseus plan that starts where ShortGPT ends: ``(group_sizes, sources)`` for
    ``theseus_adapters.hf.plan(model, num_layers, group_sizes=..., init=sources)``.

    Each layer ShortGPT keeps (`shortgpt` on the same batches) begins a group that also holds the removed layers
    after it, and its successor starts as a copy of it; the first group also holds the removed layers before the
    first kept one. A kept layer followed by another kept layer is a group of one, whose successor starts as
    itself. So the untrained successor model is ShortGPT's, and replacing trains each successor against the run of
    layers it stands for.

    Raises:
        ValueError: ``num_layers`` not in ``[1, n)``, or as `layer_similarities`.
    """
    total = len(model.get_submodule(layer_stack(model, stack).path))
    _check_depth(num_layers, total)
    kept = _most_influential(block_influence(model, batches, stack=stack), num_layers)
    bounds = [0, *kept[1:], total]
    return tuple(b - a for a, b in itertools.pairwise(bounds)), tuple(kept)


def most_similar_run(similarity: torch.Tensor, length: int) -> int:
    """The start of the run of ``length`` consecutive layers whose input and output are most alike (the earliest
    of equals), from a `layer_similarities` matrix."""
    total = similarity.shape[0]
    runs = torch.stack([similarity[i, i + length - 1] for i in range(total - length + 1)])
    return int(runs.argmax())


def streamline(
    model: nn.Module,
    num_layers: int,
    batches: Sequence[Batch],
    *,
    steps: int = 100,
    lr: float = 1e-4,
    source: int = 0,
    stack: str | None = None,
    seed: int = 0,
) -> DepthPruned:
    """LLM-Streamline: replaces the most similar run of ``n − num_layers + 1`` layers by one layer trained with the
    MSE to the run's output.

    The replacement starts as a copy of the run's layer ``source``. Its training data are the run's inputs (with
    every other argument the model passed the run's first layer: attention mask, rotary embeddings) and outputs on
    ``batches``, recorded once from the frozen model; AdamW (no weight decay) takes ``steps`` steps, one batch
    each, cycling through them in an order drawn from ``seed``.

    Args:
        model: A transformers model. Only read.
        num_layers: The depth after pruning, in ``[1, n)``.
        batches: Calibration batches (a sequence: they are read once and replayed from memory).
        steps: Optimizer steps of the MSE training. (default: ``100``)
        lr: AdamW learning rate. (default: ``1e-4``)
        source: Which layer of the run the replacement copies (0: its first). (default: ``0``)
        stack: As in `theseus_adapters.hf.layer_stack`. (default: ``None``)
        seed: Orders the training batches. (default: ``0``)

    Raises:
        ValueError: ``num_layers`` or ``source`` out of range, no batch, or a run whose layers differ in a
            per-layer config list (a sliding and a full attention layer).
    """
    found = layer_stack(model, stack)
    layers = model.get_submodule(found.path)
    total = len(layers)
    _check_depth(num_layers, total)
    length = total - num_layers + 1
    if not 0 <= source < length:
        raise ValueError(f"source must index a layer of the run of {length}, in [0, {length}), got {source}")
    if not steps >= 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    similarity = layer_similarities(model, batches, stack=stack)
    start = most_similar_run(similarity, length)
    scores = tuple(float(similarity[i, i + length - 1]) for i in range(total - length + 1))
    config = found.config(model)
    for name in found.per_layer:
        entries = {str(value) for value in getattr(config, name)[start : start + length]}
        if len(entries) > 1:
            raise ValueError(f"the run {start}..{start + length - 1} mixes config.{name} entries {sorted(entries)}")
    examples = _record_run(model, found, batches, start, length)
    replacement = copy.deepcopy(layers[start + source])
    before = _run_mse(replacement, examples)
    _train_mse(replacement, examples, steps, lr, seed)
    after = _run_mse(replacement, examples)
    sources = [*range(start), start + source, *range(start + length, total)]
    pruned = keep_layers(model, sources, stack=found, replacements={start: replacement})
    return DepthPruned(pruned, tuple(sources), scores, (start, length), (before, after))


def _check_depth(num_layers: int, total: int) -> None:
    if not (is_int(num_layers) and 1 <= num_layers < total):
        raise ValueError(f"num_layers must be an integer in [1, {total}) for a {total}-layer stack, got {num_layers}")


@dataclass
class _RunExample:
    primary: torch.Tensor
    args: tuple
    kwargs: dict[str, Any]
    target: torch.Tensor
    weights: torch.Tensor


@torch.no_grad()
def _record_run(model: nn.Module, found: Stack, batches: Sequence[Batch], start: int, length: int) -> list[_RunExample]:
    """The run's first layer's call (primary input and the other arguments) and the run's last layer's output,
    per batch."""
    layers = model.get_submodule(found.path)
    first, last = layers[start], layers[start + length - 1]
    name = primary_parameter_name(first)
    seen: dict[str, Any] = {}

    def before(module: nn.Module, args: tuple, kwargs: dict) -> None:
        seen["call"] = split_primary(args, kwargs, name, f"layer {start} of {found.path!r}")

    def after(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        seen["target"] = primary_output(output)

    handles = [first.register_forward_pre_hook(before, with_kwargs=True)]
    handles.append(last.register_forward_hook(after, with_kwargs=True))
    examples = []
    with _observing(model, handles):
        for batch in batches:
            seen.clear()
            model(**_model_kwargs(model, batch))
            primary, args, kwargs = seen["call"]
            examples.append(
                _RunExample(primary, args, dict(kwargs), seen["target"], _token_weights(batch, seen["target"]))
            )
    if not examples:
        raise ValueError("streamline needs at least one calibration batch")
    return examples


def _mse(layer: nn.Module, example: _RunExample) -> torch.Tensor:
    """Mean over the counted tokens of the squared error per hidden unit."""
    output = primary_output(layer(example.primary, *example.args, **example.kwargs))
    errors = (output.float() - example.target.float()).pow(2).mean(-1)
    return (errors * example.weights).sum() / example.weights.sum()


@torch.no_grad()
def _run_mse(layer: nn.Module, examples: list[_RunExample]) -> float:
    mode = layer.training
    layer.eval()
    try:
        total = sum(float(_mse(layer, example) * example.weights.sum()) for example in examples)
    finally:
        layer.train(mode)
    return total / sum(float(example.weights.sum()) for example in examples)


def _train_mse(layer: nn.Module, examples: list[_RunExample], steps: int, lr: float, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    layer.train()
    layer.requires_grad_(True)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=0.0)
    order: list[int] = []
    for _ in range(steps):
        if not order:
            order = torch.randperm(len(examples), generator=generator).tolist()
        loss = _mse(layer, examples[order.pop()])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    layer.eval()
