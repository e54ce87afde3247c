"""Depth-pruning baselines for any transformers layer stack: ShortGPT and LLM-Streamline, what Theseus is compared
with on LLMs.

Both read how much each layer changes the hidden state on calibration batches (`theseus_adapters.layer_selection`)
and return an ordinary transformers model of the target depth (its config synced by
`theseus_adapters.hf.sync_config`: layer count, ``layer_idx`` for the KV cache, per-layer lists), so
``save_pretrained`` → ``from_pretrained`` works without theseus. The model given is only read.

- `shortgpt` (Men et al. 2024, "ShortGPT: Layers in Large Language Models are More Redundant Than You Expect",
  §3): the layers with the lowest Block Influence go.
- `streamline` (Chen et al., ICLR 2025, "Streamlining Redundant Layers to Compress Large Language Models", §3):
  the run of ``n − m + 1`` consecutive layers whose input and output hidden states have the highest mean cosine
  is replaced by one lightweight layer trained with the MSE between its output and the run's output on the run's
  input. The paper tries an FFN and a transformer layer as the lightweight network; here it is one copy of a
  layer of the run, so that the result stays a model of the same family that plain transformers reloads.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from theseus_core import primary_output, split_primary
from theseus_core.site import primary_parameter_name

from .hf_stack import Stack, layer_stack, sync_config
from .layer_selection import (
    Batch,
    _check_depth,
    _model_kwargs,
    _most_influential,
    _observing,
    _token_weights,
    block_influence,
    layer_similarities,
    most_similar_run,
)


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
