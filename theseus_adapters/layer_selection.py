"""Which layers of a transformers layer stack to keep, drop or group, from how much each changes the hidden state
on calibration batches: the measures behind the depth-pruning baselines (`theseus_adapters.depth_baselines`) and the
Theseus groups that start where ShortGPT ends.

- `layer_similarities`: the mean cosine between the hidden state entering layer ``i`` and the one leaving layer ``j``;
- `block_influence` (ShortGPT, Men et al. 2024, §3): ``BI_i = 1 − E[cos(x_i, x_{i+1})]``;
- `most_similar_run` (LLM-Streamline, Chen et al., ICLR 2025, §3): the run of consecutive layers whose input and
  output are most alike;
- `influence_groups`: Theseus groups around ShortGPT's kept layers, so that replacing starts from ShortGPT's model.

Calibration batches are dicts of keyword arguments of the model (``input_ids``, optionally ``attention_mask``,
whose zeros are left out of the averages). Decoders run with ``use_cache=False``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from theseus_core import primary_output, split_primary
from theseus_core.checks import is_int
from theseus_core.site import primary_parameter_name

from .hf_stack import layer_stack

Batch = Mapping[str, torch.Tensor]


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


def _check_depth(num_layers: int, total: int) -> None:
    if not (is_int(num_layers) and 1 <= num_layers < total):
        raise ValueError(f"num_layers must be an integer in [1, {total}) for a {total}-layer stack, got {num_layers}")
