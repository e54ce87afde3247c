"""Slim transformers layers: fewer attention heads and a smaller FFN at the same hidden size.

`prune_layer_` cuts a layer in place, keeping the units with the largest weight-magnitude bound on what they add
to the output; `sync_slim` then writes the new sizes into the config so that the export reloads in plain
transformers. `theseus_adapters.hf.plan(..., heads=, intermediate_size=)` uses both: each successor is a pruned
copy of its source layer. Torch only; the layouts it knows are `SLIM_LAYOUTS`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

import theseus_core as th
from theseus_core.checks import is_int


@dataclass(frozen=True)
class SlimLayout:
    """Where a layer keeps the weights that `prune_layer_` cuts, as paths of ``nn.Linear`` inside the layer.

    Attributes:
        ffn_in: The layers whose output features are the FFN's neurons (two for a gated MLP).
        ffn_out: The layer whose input features are the FFN's neurons.
        ffn_config: The config attribute of the FFN's width.
        query, value, output: The attention's query, value and output layers (``None``: the heads cannot
            be pruned); ``attention`` is the module holding ``num_key_value_groups``.
    """

    ffn_in: tuple[str, ...]
    ffn_out: str
    ffn_config: str
    query: str | None = None
    value: str | None = None
    output: str | None = None
    attention: str | None = None


SLIM_LAYOUTS = (
    SlimLayout(("intermediate.dense",), "output.dense", "intermediate_size"),  # BERT, RoBERTa, MPNet, ViT
    SlimLayout(("ffn.lin1",), "ffn.lin2", "hidden_dim"),  # DistilBERT
    SlimLayout(  # Llama, Qwen2, Mistral
        ("mlp.gate_proj", "mlp.up_proj"),
        "mlp.down_proj",
        "intermediate_size",
        "self_attn.q_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "self_attn",
    ),
)
"""The layer layouts whose FFN (and, for the last, attention heads) `prune_layer_` can cut."""


def slim_layout(layer: nn.Module) -> SlimLayout:
    """The `SLIM_LAYOUTS` entry whose linear layers ``layer`` has.

    Raises:
        ValueError: none matches (GPT-2's ``Conv1D`` layers, say).
    """
    for layout in SLIM_LAYOUTS:
        paths = (*layout.ffn_in, layout.ffn_out, layout.query, layout.value, layout.output)
        if all(isinstance(_find(layer, path), nn.Linear) for path in paths if path is not None):
            return layout
    raise ValueError(
        f"{type(layer).__name__} is laid out as none of theseus_adapters.slim.SLIM_LAYOUTS (BERT's intermediate / "
        f"output, DistilBERT's ffn, Llama's mlp and self_attn), so heads / intermediate_size cannot prune it"
    )


def _find(layer: nn.Module, path: str) -> nn.Module | None:
    try:
        return layer.get_submodule(path)
    except AttributeError:
        return None


def check_slim(layer: nn.Module, config, heads: int | None, intermediate_size: int | None) -> None:
    """Raises `ValueError` unless ``layer`` (a layer of a model with ``config``) can be pruned to ``heads`` /
    ``intermediate_size``: `hf.plan` asks before it plans anything."""
    layout = slim_layout(layer)
    width = getattr(config, layout.ffn_config)
    if intermediate_size is not None and not (is_int(intermediate_size) and 1 <= intermediate_size <= width):
        raise ValueError(
            f"intermediate_size must be an integer in [1, {width}] (the config's), got {intermediate_size!r}"
        )
    if heads is None:
        return
    if layout.query is None or not isinstance(getattr(config, "head_dim", None), int):
        raise ValueError(
            f"heads= needs a config that sets head_dim (Llama, Qwen2, Mistral); {type(config).__name__} derives its "
            f"head size from hidden_size / num_attention_heads, so the saved config could not describe fewer heads "
            f"of the same size and the export would not reload. Use intermediate_size= alone"
        )
    total, groups = config.num_attention_heads, getattr(config, "num_key_value_heads", None) or 1
    if not (is_int(heads) and 1 <= heads <= total and heads % groups == 0):
        raise ValueError(
            f"heads must be a multiple of num_key_value_heads={groups} in [1, {total}] (the config's), got {heads!r}"
        )


@torch.no_grad()
def prune_layer_(layer: nn.Module, *, heads: int | None = None, intermediate_size: int | None = None) -> nn.Module:
    """Structured pruning of a transformers layer in place: keeps the ``intermediate_size`` FFN neurons and the
    ``heads`` attention heads that matter most, at the same hidden size. Returns the layer.

    What matters is read from the weights alone (magnitude), not from gradients on batches (first-order
    importance): a successor is built inside `theseus_core.replace_` from its group and the model, where no
    batch and no loss exist, and the same plan must build the same successor on every copy of the model. The
    score bounds what a unit can add to the layer's output:

    - FFN neuron ``j``: ``‖W_in[j]‖ · ‖W_out[:, j]‖`` (times ``‖W_gate[j]‖`` for a gated MLP). Its output is
      ``act(W_in[j]·x) · W_out[:, j]``, whose size the product bounds for a given ``‖x‖``.
    - Head ``h``: ``‖W_v[h]‖_F · ‖W_o[:, h]‖_F``. The head outputs a convex combination of its value vectors
      (softmax weights sum to 1), mapped by ``W_o[:, h]``; queries and keys only choose the weights. With
      grouped-query attention the key / value heads all stay and each group keeps ``heads / num_key_value_heads``
      query heads, so the cache layout is unchanged.

    The replacing phase then trains the slim layer with the task loss, which is what the paper's successors do
    from any initialisation.

    Raises:
        ValueError: the layer matches no `SLIM_LAYOUTS` entry, or the sizes are out of range.
    """
    layout = slim_layout(layer)
    if intermediate_size is not None:
        ffn_in = [layer.get_submodule(path) for path in layout.ffn_in]
        ffn_out = layer.get_submodule(layout.ffn_out)
        if not 1 <= intermediate_size <= ffn_out.in_features:
            raise ValueError(f"intermediate_size must be in [1, {ffn_out.in_features}], got {intermediate_size}")
        score = ffn_out.weight.norm(dim=0)
        for linear in ffn_in:
            score = score * linear.weight.norm(dim=1)
        kept = score.topk(intermediate_size).indices.sort().values
        for linear in ffn_in:
            _keep_outputs(linear, kept)
        _keep_inputs(ffn_out, kept)
    if heads is not None:
        if layout.query is None:
            raise ValueError(f"{type(layer).__name__}: heads cannot be pruned in this layout ({layout})")
        attention = layer.get_submodule(layout.attention)
        query, value, output = (layer.get_submodule(p) for p in (layout.query, layout.value, layout.output))
        head_dim = attention.head_dim
        total, kv_heads = query.out_features // head_dim, value.out_features // head_dim
        per_group = total // kv_heads
        if not 1 <= heads <= total or heads % kv_heads:
            raise ValueError(f"heads must be a multiple of {kv_heads} key/value heads in [1, {total}], got {heads}")
        value_norm = value.weight.view(kv_heads, head_dim, -1).flatten(1).norm(dim=1)
        output_norm = output.weight.view(output.out_features, total, head_dim).transpose(0, 1).flatten(1).norm(dim=1)
        score = (output_norm * value_norm.repeat_interleave(per_group)).view(kv_heads, per_group)
        within = score.topk(heads // kv_heads, dim=1).indices.sort(dim=1).values
        kept_heads = (within + torch.arange(kv_heads, device=within.device)[:, None] * per_group).flatten()
        kept = (kept_heads[:, None] * head_dim + torch.arange(head_dim, device=within.device)).flatten()
        _keep_outputs(query, kept)
        _keep_inputs(output, kept)
        attention.num_key_value_groups = heads // kv_heads
    return layer


def _keep_outputs(linear: nn.Linear, index: torch.Tensor) -> None:
    linear.weight = nn.Parameter(linear.weight[index].clone())
    if linear.bias is not None:
        linear.bias = nn.Parameter(linear.bias[index].clone())
    linear.out_features = len(index)


def _keep_inputs(linear: nn.Linear, index: torch.Tensor) -> None:
    linear.weight = nn.Parameter(linear.weight[:, index].clone())
    linear.in_features = len(index)


def sync_slim(stack: Sequence[nn.Module], config, path: str = "the stack") -> None:
    """Writes the FFN width and head count of the layers of ``stack`` into ``config`` when every layer has the same
    (after `prune_layer_`), so that ``save_pretrained`` -> ``from_pretrained`` rebuilds them; warns when they
    differ (``path`` names the stack in the warning). Does nothing for layouts it does not know or a stack with
    projected (narrower) layers."""
    layers = [layer for layer in stack if not isinstance(layer, th.Projected)]
    try:
        layouts = {slim_layout(layer) for layer in layers}
    except ValueError:
        return  # a family prune_layer_ does not know: nothing was pruned
    if len(layouts) != 1 or len(layers) != len(stack):
        return
    layout = layouts.pop()
    widths = {layer.get_submodule(layout.ffn_out).in_features for layer in layers}
    head_counts = {
        layer.get_submodule(layout.query).out_features // layer.get_submodule(layout.attention).head_dim
        for layer in layers
        if layout.query is not None
    }
    changes = {}
    if len(widths) == 1:
        changes[layout.ffn_config] = widths.pop()
    if len(head_counts) == 1:
        changes["num_attention_heads"] = head_counts.pop()
    if len(widths) > 1 or len(head_counts) > 1:
        warnings.warn(
            f"the layers of {path!r} differ in FFN width or head count, which one config cannot describe: "
            f"the finalized model runs, but save_pretrained -> from_pretrained would not rebuild it",
            stacklevel=3,
        )
    for name, value in changes.items():
        setattr(config, name, value)
