"""Slim transformers layers: fewer attention heads, a smaller FFN, or none of either, at the same hidden size.

`prune_layer_` cuts a layer in place, keeping the units with the largest weight-magnitude bound on what they add
to the output; `remove_sublayer_` takes a layer's attention or FFN out altogether, so that its residual branch adds
exactly 0. `sync_slim` then describes the layers in the config: the new sizes when every layer has the same, so
that the export reloads in plain transformers; else one *form* per layer (`layer_form`) in
``config.theseus_layers``, which `hf.load_pretrained` reads back. `theseus_adapters.hf.plan(..., heads=,
intermediate_size=)` prunes each successor copy; a budget search (`theseus_adapters.hf_candidates`) offers layers
without attention, without FFN, or with a narrower FFN. The layouts it knows are `SLIM_LAYOUTS`.

Per-layer forms: transformers 5 has a config-side ``per_layer_config`` (with a ``skip`` list), but BERT and Llama
do not build their layers from it (a Llama config with a per-layer ``intermediate_size`` does not build), so the
forms go under a key of their own. Plain ``from_pretrained`` ignores it and builds every layer whole: a narrower
FFN's weights then fail to load (a size mismatch), and a removed sublayer's are reported missing and initialised at
random, with a warning only. Load such an export with `hf.load_pretrained`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
        without_attention, without_ffn: How `remove_sublayer_` takes the attention / the FFN out: ``(path, stand-in)``
            pairs, the modules only that sublayer uses, each replaced by a parameter-free `RemovedSublayer`
            (``"zero"``: outputs zeros shaped as its input; ``"zero_attention"``: the same with ``None`` attention
            weights, for a module the layer unpacks) or ``nn.Identity`` (``"identity"``: a norm or a projection
            whose output only the removed sublayer read). The first pair is the one that outputs the residual
            branch, and tells a layer without the sublayer. Empty: the layout cannot remove it.
        removal_refused_by: Modules whose presence says the layer puts its norms elsewhere than the layout assumes
            (a post-norm decoder layer: OLMo2's, Gemma2's), where taking a sublayer out by ``without_attention`` /
            ``without_ffn`` would not leave the branch adding exactly 0: `remove_sublayer_` refuses such a layer.
    """

    ffn_in: tuple[str, ...]
    ffn_out: str
    ffn_config: str
    query: str | None = None
    value: str | None = None
    output: str | None = None
    attention: str | None = None
    without_attention: tuple[tuple[str, str], ...] = ()
    without_ffn: tuple[tuple[str, str], ...] = ()
    removal_refused_by: tuple[str, ...] = ()


SLIM_LAYOUTS = (
    SlimLayout(  # BERT, RoBERTa, MPNet, ViT; post-LN (BERT, RoBERTa): each sublayer's norm stays, its input + 0
        ("intermediate.dense",),
        "output.dense",
        "intermediate_size",
        without_attention=(("attention.output.dense", "zero"), ("attention.self", "zero_attention")),
        without_ffn=(("output.dense", "zero"), ("intermediate", "identity")),
    ),
    SlimLayout(("ffn.lin1",), "ffn.lin2", "hidden_dim"),  # DistilBERT
    SlimLayout(  # Llama, Qwen2, Mistral; pre-LN: a sublayer goes with the norm in front of it
        ("mlp.gate_proj", "mlp.up_proj"),
        "mlp.down_proj",
        "intermediate_size",
        "self_attn.q_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "self_attn",
        without_attention=(("self_attn", "zero_attention"), ("input_layernorm", "identity")),
        without_ffn=(("mlp", "zero"), ("post_attention_layernorm", "identity")),
        removal_refused_by=("pre_feedforward_layernorm", "post_feedforward_layernorm"),
    ),
)
"""The layer layouts whose FFN (and, for the last, attention heads) `prune_layer_` can cut, and whose attention and
FFN `remove_sublayer_` can take out (BERT-like and Llama-like)."""
SUBLAYERS = ("attention", "ffn")
"""What `remove_sublayer_` can take out of a layer."""


class RemovedSublayer(nn.Module):
    """Stands where `remove_sublayer_` took a module out: zeros shaped as its input (its first positional argument,
    or ``hidden_states``), whatever else it is called with; no parameters.

    Args:
        attention: Return ``(zeros, None)``, as an attention module the layer unpacks into output and weights.
            (default: ``False``)
        layer_idx: The ``layer_idx`` of the module it stands for, kept so that finalize still finds the layer's
            position (the KV-cache slot of the layer's other modules, its per-layer config entries).
            (default: ``None``)

    Limits: a layer without attention gives no attention map, so ``output_attentions=True`` returns one map fewer
    than there are layers (the maps are then not aligned with the layers by index); a BERT run as a decoder with a
    cross-attention cache (``EncoderDecoderCache``) is not supported (its slot is updated as a decoder-only cache).
    """

    def __init__(self, attention: bool = False, layer_idx: int | None = None) -> None:
        super().__init__()
        self.attention = attention
        if layer_idx is not None:
            self.layer_idx = layer_idx

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        hidden = args[0] if args else kwargs["hidden_states"]
        zeros = torch.zeros_like(hidden)
        if not self.attention:
            return zeros
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if cache is not None and getattr(self, "layer_idx", None) is not None:
            # transformers reads the cached length and the attention masks' sizes from a layer's slot (layer 0's by
            # default): a slot that grows by a placeholder key and value per token (2 numbers) keeps them right
            placeholder = hidden.new_zeros(hidden.shape[0], 1, hidden.shape[1], 1)
            rest = {key: value for key, value in kwargs.items() if key not in _ATTENTION_ARGUMENTS}
            try:
                cache.update(placeholder, placeholder, self.layer_idx, kwargs=rest)
            except RuntimeError as error:  # the slot holds a real layer's keys: two layers share it
                raise ValueError(
                    f"the KV-cache slot {self.layer_idx} of a layer without attention holds another layer's keys; "
                    f"while replacing, run a decoder with use_cache=False (theseus_adapters.hf)"
                ) from error
        return zeros, None


_ATTENTION_ARGUMENTS = ("hidden_states", "position_embeddings", "attention_mask", "cache", "past_key_values")
"""What a transformers attention module takes besides the keyword arguments it hands to its cache's ``update``."""


def slim_layout(layer: nn.Module) -> SlimLayout:
    """The `SLIM_LAYOUTS` entry whose linear layers ``layer`` has.

    Raises:
        ValueError: none matches (GPT-2's ``Conv1D`` layers, say).
    """
    for layout in SLIM_LAYOUTS:
        ffn = () if _removed(layer, layout.without_ffn) else (*layout.ffn_in, layout.ffn_out)
        attention = () if _removed(layer, layout.without_attention) else (layout.query, layout.value, layout.output)
        if all(isinstance(_find(layer, path), nn.Linear) for path in (*ffn, *attention) if path is not None):
            return layout
    raise ValueError(
        f"{type(layer).__name__} is laid out as none of theseus_adapters.slim.SLIM_LAYOUTS (BERT's intermediate / "
        f"output, DistilBERT's ffn, Llama's mlp and self_attn), so it cannot be pruned (heads / intermediate_size) "
        "nor lose a sublayer"
    )


def _removed(layer: nn.Module, removal: Sequence[tuple[str, str]]) -> bool:
    """Whether `remove_sublayer_` took out the sublayer that ``removal`` describes (its first module is a stand-in)."""
    return bool(removal) and isinstance(_find(layer, removal[0][0]), RemovedSublayer)


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
    for size, part, removal in (
        (intermediate_size, "FFN", layout.without_ffn),
        (heads, "attention", layout.without_attention),
    ):
        if size is not None and _removed(layer, removal):
            raise ValueError(f"{type(layer).__name__} has no {part} left to prune (remove_sublayer_ took it out)")
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


def remove_sublayer_(layer: nn.Module, sublayer: str) -> nn.Module:
    """Takes a transformers layer's attention or FFN (``sublayer``: ``"attention"`` or ``"ffn"``) out, in place, with
    what only it uses: its modules become parameter-free stand-ins (`SlimLayout.without_attention`,
    `SlimLayout.without_ffn`). Returns the layer.

    The layer then computes what it computed with that sublayer's residual branch set to zero (its output bias
    included), exactly:

    - post-LN (BERT, RoBERTa: ``a = LN_1(x + Attention(x))``, ``y = LN_2(a + FFN(a))``): without attention
      ``a = LN_1(x)``; without FFN ``y = LN_2(a)``. The norm stays: it acts on the residual stream.
    - pre-LN (Llama, Qwen2, Mistral: ``h = x + Attention(N_1(x))``, ``y = h + FFN(N_2(h))``): without attention
      ``h = x``; without FFN ``y = h``. The norm in front of the sublayer goes with it.

    A decoder layer without attention keeps its KV-cache slot counting tokens with a placeholder key and value (one
    number each per token, `RemovedSublayer`), so that ``generate`` with the cache gives the tokens it gives without.

    Raises:
        ValueError: an unknown ``sublayer``, a layout that cannot remove it (`SLIM_LAYOUTS`), a layer whose modules
            are not where its layout says, or a sublayer already removed; nothing is changed.
    """
    if sublayer not in SUBLAYERS:
        raise ValueError(f"sublayer must be one of {SUBLAYERS}, got {sublayer!r}")
    layout = slim_layout(layer)
    removal = layout.without_attention if sublayer == "attention" else layout.without_ffn
    if not removal:
        raise ValueError(
            f"{type(layer).__name__} is laid out as {layout.ffn_out!r}'s layout, which cannot remove its {sublayer} "
            f"(theseus_adapters.slim.SLIM_LAYOUTS knows BERT-like and Llama-like layers)"
        )
    elsewhere = [path for path in layout.removal_refused_by if _find(layer, path) is not None]
    if elsewhere:
        raise ValueError(
            f"{type(layer).__name__} has {', '.join(elsewhere)}: its norms are not where theseus_adapters.slim's "
            f"Llama-like layout puts them, so taking its {sublayer} out would not leave the branch adding exactly 0"
        )
    if _removed(layer, removal):
        raise ValueError(f"{type(layer).__name__} has no {sublayer} left to remove")
    missing = [path for path, _ in removal if _find(layer, path) is None]
    if missing:
        raise ValueError(
            f"{type(layer).__name__} has no {', '.join(missing)}: its {sublayer} is not laid out as BERT's or "
            f"Llama's, so theseus_adapters.slim cannot remove it"
        )
    for path, kind in removal:  # checked above: nothing changes before every module is found
        parent_path, _, name = path.rpartition(".")
        parent = layer.get_submodule(parent_path)
        old = getattr(parent, name)
        position = next((value for _, value in _layer_indices(old)), None)
        stand_in = nn.Identity() if kind == "identity" else RemovedSublayer(kind == "zero_attention", position)
        setattr(parent, name, stand_in)
    return layer


def _layer_indices(module: nn.Module) -> list[tuple[nn.Module, int]]:
    return [
        (inner, value)
        for inner in module.modules()
        for name, value in vars(inner).items()
        if name == "layer_idx" and is_int(value)
    ]


LAYER_FORMS_KEY = "theseus_layers"
"""The config key of the per-layer forms (`layer_form`) that `sync_slim` writes when the layers differ."""


def layer_form(layer: nn.Module, config) -> dict[str, int]:
    """What a layer of a model with ``config`` is: ``{"heads": h, "intermediate_size": w}``, its attention heads and
    FFN width, 0 for a sublayer `remove_sublayer_` took out. A layout that cannot prune heads (BERT's) has the
    config's ``num_attention_heads`` or 0."""
    layout = slim_layout(layer)
    if _removed(layer, layout.without_attention):
        heads = 0
    elif layout.query is not None:
        heads = layer.get_submodule(layout.query).out_features // layer.get_submodule(layout.attention).head_dim
    else:
        heads = config.num_attention_heads
    width = 0 if _removed(layer, layout.without_ffn) else layer.get_submodule(layout.ffn_out).in_features
    return {"heads": heads, "intermediate_size": width}


def shape_layer_(layer: nn.Module, form: dict[str, int], config) -> nn.Module:
    """Makes a layer built from ``config`` (at the config's sizes) take the shape ``form`` describes (`layer_form`),
    in place: fewer heads or FFN neurons (`prune_layer_`), or a sublayer removed (`remove_sublayer_`). Only the
    shapes are meant: its weights are to be loaded next. Returns the layer.

    Raises:
        ValueError: a form that is not ``{"heads": int, "intermediate_size": int}``, or sizes above the layer's.
    """
    full = layer_form(layer, config)
    if not isinstance(form, dict) or set(form) != set(full) or not all(is_int(value) for value in form.values()):
        raise ValueError(f"a layer form is {{'heads': int, 'intermediate_size': int}}, got {form!r}")
    if not all(0 <= form[key] <= full[key] for key in full):
        raise ValueError(f"the form {form} is larger than the layer the config builds ({full})")
    heads, width = form["heads"], form["intermediate_size"]
    prune_layer_(
        layer,
        heads=heads if 0 < heads < full["heads"] else None,
        intermediate_size=width if 0 < width < full["intermediate_size"] else None,
    )
    for size, sublayer in ((heads, "attention"), (width, "ffn")):
        if size == 0:
            remove_sublayer_(layer, sublayer)
    return layer


def sync_slim(stack: Sequence[nn.Module], config, path: str = "the stack") -> None:
    """Describes the layers of ``stack`` (after `prune_layer_` or `remove_sublayer_`) in ``config``, so that the
    export reloads: when every layer has its attention and its FFN, with one head count and one FFN width, those
    go into the config (``num_attention_heads`` where the layout prunes heads, its `SlimLayout.ffn_config`), and
    ``save_pretrained`` -> plain ``from_pretrained`` rebuilds them; otherwise each layer's `layer_form` goes into
    ``config.theseus_layers`` (`LAYER_FORMS_KEY`), the config's sizes kept (at least each layer's), and
    `hf.load_pretrained` rebuilds them. For layouts it does not know or a stack with projected (narrower) layers it
    writes nothing, and removes forms the config held (they described other layers). ``path`` names the stack in
    errors."""
    vars(config).pop(LAYER_FORMS_KEY, None)  # whatever it held described the layers before this stack's
    layers = [layer for layer in stack if not isinstance(layer, th.Projected)]
    try:
        layouts = {slim_layout(layer) for layer in layers}
    except ValueError:
        return  # a family prune_layer_ does not know: nothing was pruned
    if len(layouts) != 1 or len(layers) != len(stack):
        return
    layout = layouts.pop()
    forms = [layer_form(layer, config) for layer in layers]
    uniform = all(form == forms[0] for form in forms) and all(forms[0].values())
    if not uniform:
        widest = {"heads": config.num_attention_heads, "intermediate_size": getattr(config, layout.ffn_config)}
        too_wide = [index for index, form in enumerate(forms) if any(form[k] > widest[k] for k in widest)]
        if too_wide:
            raise ValueError(
                f"layers {too_wide} of {path!r} are wider than the config ({widest}), so no form can describe them"
            )
        setattr(config, LAYER_FORMS_KEY, forms)
        return
    setattr(config, layout.ffn_config, forms[0]["intermediate_size"])
    if layout.query is not None:
        config.num_attention_heads = forms[0]["heads"]
