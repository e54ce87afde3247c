"""Any Hugging Face transformers model: encoders, decoder LLMs, and either stack of an encoder-decoder.

`plan` finds the model's layer stack (BERT family ``*.encoder.layer``, DistilBERT ``transformer.layer``,
GPT-2 ``transformer.h``, Llama / Qwen2 / Mistral / Phi ``model.layers``, ViT ``*.encoder.layer``, the
``encoder.layers`` or ``decoder.layers`` of BART and Whisper), cuts its ``n`` layers into ``num_layers``
consecutive groups (uneven allowed: 12 → 5 is 3, 3, 2, 2, 2) and gives each group one successor layer.

After `theseus_core.Theseus.finalize` the model is an ordinary transformers model of ``num_layers`` layers
(`sync_config`, the plan's finalize hook): the config's layer count under the name that config uses
(``num_hidden_layers``, ``n_layer``, ``n_layers``, ``encoder_layers``, ``decoder_layers``, ...), every
layer's ``layer_idx`` / ``layer_id`` (the KV cache's slot), and the per-layer config lists (``layer_types``
with its sliding windows, ...) taken from the layers kept. ``save_pretrained`` → ``AutoModel*.from_pretrained``
then works without theseus, and a decoder's ``generate()`` with its KV cache gives the same tokens.

Slim successors (issue 15): ``plan(model, heads=..., intermediate_size=...)`` prunes each successor copy to fewer
heads and a smaller FFN at the same hidden size (`theseus_adapters.slim.prune_layer_`, by weight magnitude), and
finalize writes the new sizes into the config. The successors come from the registry: `layer_successor` is
registered for transformers' ``GradientCheckpointingLayer`` (the base of most layers) and ``MPNetLayer``; a user's
registration for a layer type (``BertLayer``) wins.

Refused, with the reason, before anything changes (`ValueError`): models whose stack hands state from one layer
to the next (T5's ``position_bias``: layer 0 holds the relative-attention table the others use), whose
layers' computation depends on their index (GPT-2 with ``scale_attn_by_inverse_layer_idx``), whose encoder
works between layers (DeBERTa-v2's convolution), heterogeneous configs, config lists of layer indices
(``mlp_only_layers``), and groupings that would mix the entries of a per-layer list (a sliding and a full
attention layer in one group: the model gives a group one mask, the one of the group's position).

While replacing, run decoders with ``use_cache=False``: a successor keeps the layer index of the layer it was
copied from until finalize renumbers it, so two layers could share a cache slot.

Example::

    from transformers import AutoModelForCausalLM
    import theseus_core as th
    from theseus_adapters import hf

    model = AutoModelForCausalLM.from_pretrained(path)  # 30 layers
    batch = tokenizer(["some text"], return_tensors="pt")  # replace_ verifies the surgery on it
    theseus = th.replace_(model, hf.plan(model, num_layers=15), example_kwargs=dict(batch, use_cache=False))
    ...  # train with a schedule (README quick start)
    theseus.finalize().save_pretrained("out")  # a plain 15-layer model
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

import theseus_core as th
from theseus_core.checks import is_int

from .slim import check_slim, prune_layer_, sync_slim

INITS = ("first", "every_other", "group_last", "last")
STACK_NAMES = ("layer", "layers", "h", "block", "blocks")
"""Last path component of the ``nn.ModuleList`` that holds a transformers model's layers."""
PER_LAYER_LISTS = ("layer_types", "mlp_layer_types", "no_rope_layers", "attention_window")
"""Config lists with one entry per layer: finalize keeps the entries of the layers kept."""
LAYER_INDEX_NAMES = ("layer_idx", "layer_id")
"""Attributes of a layer's modules that hold the layer's position (the KV cache slot)."""
_COUNT_NAMES = {
    "encoder": ("encoder_layers", "num_layers", "num_hidden_layers"),
    "decoder": ("decoder_layers", "num_decoder_layers", "num_hidden_layers", "num_layers"),
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
}
# Families whose layers or encoder depend on something the layer list does not show (issue 13).
_REFUSED = {
    "gpt2": (
        lambda config: config.scale_attn_by_inverse_layer_idx,
        "GPT-2 with scale_attn_by_inverse_layer_idx=True scales each layer's attention by 1/(layer_idx + 1), "
        "fixed when the layer is built, so a layer that moves computes differently after a reload",
    ),
    "deberta-v2": (
        lambda config: getattr(config, "conv_kernel_size", 0),
        "DeBERTa-v2 with conv_kernel_size > 0 applies its convolution between layer 0 and layer 1, outside "
        "the layers; use theseus_core.plan with a group of 1 at the start",
    ),
}


@dataclass(frozen=True)
class Stack:
    """A transformers model's layer stack and the config fields that describe it.

    Attributes:
        path: Path of the ``nn.ModuleList`` of layers (``"model.layers"``, ``"bert.encoder.layer"``).
        role: ``"encoder"`` or ``"decoder"`` (one stack of an encoder-decoder), or ``"layers"``.
        owner: Path of the nearest module above the stack with a ``config`` ('' for the model): the
            config that describes the stack (a vision-language model's text config, say).
        count_name: The config attribute that holds the layer count.
        per_layer: The `PER_LAYER_LISTS` this config has, one entry per layer.
    """

    path: str
    role: str
    owner: str
    count_name: str
    per_layer: tuple[str, ...]

    def config(self, model: nn.Module):
        """The config of this stack in ``model`` (or in a copy of the model the stack was found in)."""
        return model.get_submodule(self.owner).config


def find_stacks(model: nn.Module) -> list[str]:
    """Paths of every ``nn.ModuleList`` that looks like a layer stack: named as in `STACK_NAMES`, two or more
    layers of one class, not inside another stack. Only reads the model."""
    found: list[str] = []
    for name, module in model.named_modules():
        if (
            isinstance(module, nn.ModuleList)
            and name.rsplit(".", 1)[-1] in STACK_NAMES
            and len(module) >= 2
            and len({type(layer) for layer in module}) == 1
            and not any(name.startswith(f"{outer}.") for outer in found)
        ):
            found.append(name)
    return found


def layer_stack(model: nn.Module, stack: str | None = None, *, shortened: bool = False) -> Stack:
    """Finds the layer stack `plan` compresses and checks that `sync_config` can keep its config in step.

    Args:
        model: A transformers model (``PreTrainedModel``, any head). Only read.
        stack: ``"encoder"`` or ``"decoder"`` to pick one stack of an encoder-decoder (BART, Whisper), or
            the path of the ``nn.ModuleList``. (default: ``None``, the model's only stack)
        shortened: The stack already lost layers the config still counts: take the first of the
            config's layer-count attributes that is set instead of the one equal to the stack's length.
            (default: ``False``)

    Raises:
        ValueError: Not a transformers model, no stack or several, a family this adapter refuses (the
            reason is in the message), or no config attribute holding the stack's length.
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type is None:
        raise ValueError(
            f"theseus_adapters.hf supports transformers models (a PreTrainedModel with a config), got "
            f"{type(model).__name__}; for other models write ModuleSpecs over their layer list with theseus_core.plan"
        )
    paths = find_stacks(model)
    if stack in ("encoder", "decoder"):
        paths = [path for path in paths if stack in path.split(".")]
    elif stack is not None:
        if not isinstance(model.get_submodule(stack) if _has(model, stack) else None, nn.ModuleList):
            raise ValueError(f"stack={stack!r} is not an nn.ModuleList of {type(model).__name__}; found {paths}")
        paths = [stack]
    if len(paths) != 1:
        hint = "pass stack='encoder', 'decoder' or one of these paths" if paths else "write ModuleSpecs with th.plan"
        raise ValueError(
            f"theseus_adapters.hf found {len(paths)} layer stacks in {type(model).__name__}"
            f"{f' for stack={stack!r}' if stack else ''}: {paths or 'none named ' + '/'.join(STACK_NAMES)}; {hint}"
        )
    path = paths[0]
    layers = model.get_submodule(path)
    _refuse_unsupported(model, path, layers)

    parts = path.split(".")
    owner = next(
        ".".join(parts[:end]) for end in range(len(parts) - 1, -1, -1) if _has_config(model, ".".join(parts[:end]))
    )
    owner_module = model.get_submodule(owner)
    described = f"{path}.{type(owner_module).__name__}".lower()  # BartEncoder's "layers" is an encoder's
    role = next((side for side in ("decoder", "encoder") if side in described), "layers")
    stack_config = owner_module.config
    if getattr(stack_config, "is_heterogeneous", False):
        raise ValueError(
            f"{type(model).__name__} has a heterogeneous config (per_layer_config: layers of several shapes); "
            f"theseus_adapters.hf does not support it"
        )
    count_name = next(
        (
            name
            for name in _COUNT_NAMES[role]
            if getattr(stack_config, name, None) == len(layers) or (shortened and getattr(stack_config, name, None))
        ),
        None,
    )
    if count_name is None:
        raise ValueError(
            f"none of the config attributes {_COUNT_NAMES[role]} of {type(model).__name__} holds the length "
            f"of {path!r} ({len(layers)}), so the finalized config could not say how many layers it has"
        )
    per_layer = []
    for name, value in vars(stack_config).items():
        if not (isinstance(value, (list, tuple)) and value and ("layer" in name or name in PER_LAYER_LISTS)):
            continue
        if name in PER_LAYER_LISTS and (shortened or len(value) == len(layers)):
            per_layer.append(name)
        elif name.endswith("_layers") and all(is_int(v) for v in value):
            raise ValueError(
                f"config.{name} = {value} lists layer indices of {type(model).__name__}; "
                f"theseus_adapters.hf does not renumber those"
            )
        elif len(value) == len(layers):
            raise ValueError(
                f"config.{name} of {type(model).__name__} has one entry per layer and theseus_adapters.hf does "
                f"not know it; add it to theseus_adapters.hf.PER_LAYER_LISTS if finalize should slice it"
            )
    return Stack(path, role, owner, count_name, tuple(per_layer))


def _has(model: nn.Module, path: str) -> bool:
    try:
        model.get_submodule(path)
    except AttributeError:
        return False
    return True


def _has_config(model: nn.Module, path: str) -> bool:
    return getattr(getattr(model.get_submodule(path), "config", None), "model_type", None) is not None


def _refuse_unsupported(model: nn.Module, path: str, layers: nn.ModuleList) -> None:
    model_type = model.config.model_type
    if model_type in _REFUSED:
        applies, reason = _REFUSED[model_type]
        if applies(model.config):
            raise ValueError(reason)
    names = [{name for name, _ in layer.named_parameters()} for layer in layers]
    for index, own in enumerate(names):
        if own != names[0]:
            extra = sorted(own ^ names[0])[0]
            raise ValueError(
                f"layers 0 and {index} of {path!r} in {type(model).__name__} differ ({extra}): the stack computes "
                f"state in one layer and hands it to the others (T5's position_bias), which a group of layers "
                f"cannot carry; use theseus_core.plan with groups of 1"
            )


def _initial_layers(init: str | Sequence[int], group_sizes: list[int], num_layers: int) -> list[int]:
    """Index of the predecessor layer each successor starts from."""
    total = sum(group_sizes)
    starts = [sum(group_sizes[:i]) for i in range(num_layers)]
    if isinstance(init, str):
        if init == "first":  # the paper: the bottom m layers, successor i from layer i
            return list(range(num_layers))
        if init == "last":
            return list(range(total - num_layers, total))
        if init == "every_other":  # each group's own first layer: 0, 2, 4, ... for 12 → 6
            return starts
        if init == "group_last":  # each group's own last layer, whose output the next group expects: 1, 3, 5, ...
            return [start + size - 1 for start, size in zip(starts, group_sizes, strict=True)]
        raise ValueError(f"init must be one of {INITS} or a list of {num_layers} layer indices, got {init!r}")
    indices = list(init)
    if len(indices) != num_layers or not all(isinstance(i, int) and 0 <= i < total for i in indices):
        raise ValueError(f"init as a list needs {num_layers} layer indices in [0, {total}), got {indices}")
    return indices


def _check_per_layer(found: Stack, config, sizes: list[int], sources: list[int]) -> None:
    """While replacing, the model treats group i as layer i (its mask is ``config.layer_types[i]``'s), so each
    group's layers, its successor's source and position i must have the same entry in every per-layer list."""
    start = 0
    for position, (size, source) in enumerate(zip(sizes, sources, strict=True)):
        for name in found.per_layer:
            values = getattr(config, name)
            seen = {values[i] for i in range(start, start + size)} | {values[source], values[position]}
            if len(seen) > 1:
                raise ValueError(
                    f"group {position} (layers {start}..{start + size - 1}) of {found.path!r} would mix "
                    f"config.{name} entries {sorted(map(str, seen))} (its layers, the layer its successor starts "
                    f"from, and position {position}, whose entry the model uses for the group); choose group_sizes "
                    f"and init so that each group's entries agree"
                )
        start += size


def sync_config(model: nn.Module, sources: Sequence[int] | None = None, *, stack: Stack | str | None = None) -> None:
    """Makes a transformers model's config and layers agree after its stack lost layers: `plan`'s finalize hook.

    Sets the config's layer count (`Stack.count_name`) to the stack's length, moves every `LAYER_INDEX_NAMES`
    attribute of layer i by ``i - sources[i]`` (``layer_idx`` 0, 1, ... for the KV cache) and replaces each
    per-layer config list by its entries at ``sources``.

    Args:
        model: The model, its stack already shortened.
        sources: For each layer now in the stack, the index of the layer it was copied from.
            (default: each layer's own ``layer_idx`` / ``layer_id``, which every layer must then have)
        stack: The `Stack` found before the layers were removed (`plan` passes it), or as in `layer_stack`.
            (default: ``None``, the only stack)
    """
    found = stack if isinstance(stack, Stack) else layer_stack(model, stack, shortened=True)
    layers = model.get_submodule(found.path)
    if sources is None:
        sources = [_layer_index(layer, found.path, index) for index, layer in enumerate(layers)]
    if len(sources) != len(layers):
        raise ValueError(f"{found.path!r} holds {len(layers)} layers, sources names {len(sources)}")
    config = found.config(model)
    for name in found.per_layer:
        values = getattr(config, name)
        setattr(config, name, type(values)(values[source] for source in sources))
    setattr(config, found.count_name, len(layers))
    for index, (layer, source) in enumerate(zip(layers, sources, strict=True)):
        for module, name, value in _index_attributes(layer):
            setattr(module, name, value + index - source)
    sync_slim(layers, config, found.path)


def _index_attributes(layer: nn.Module) -> list[tuple[nn.Module, str, int]]:
    """(module, attribute, value) of every integer `LAYER_INDEX_NAMES` attribute in a layer."""
    return [
        (module, name, value)
        for module in layer.modules()
        for name, value in vars(module).items()
        if name in LAYER_INDEX_NAMES and is_int(value)
    ]


def _layer_index(layer: nn.Module, path: str, position: int) -> int:
    found = _index_attributes(layer)
    if not found:
        raise ValueError(f"layer {position} of {path!r} has no {'/'.join(LAYER_INDEX_NAMES)}; pass sources=")
    return found[0][2]


def plan(
    model: nn.Module,
    num_layers: int = 6,
    *,
    init: str | Sequence[int] = "first",
    group_sizes: Sequence[int] | None = None,
    hidden_size: int | None = None,
    stack: str | None = None,
    heads: int | None = None,
    intermediate_size: int | None = None,
    successor: str | th.spec.SuccessorFactory | None = None,
    registry: th.SuccessorRegistry | None = None,
) -> th.Plan:
    """Specs compressing a transformers model's layer stack to ``num_layers`` layers.

    Args:
        model: A transformers model (``PreTrainedModel``, any head). Only read.
        num_layers: Successor layers, one per group, ``1 <= num_layers < n``; ``n`` too (one layer a group, the
            same depth) with an explicit ``successor`` of another kind, such as quantized copies
            (`theseus_quant.quantized_copy`). (default: ``6``)
        init: Which predecessor layer each successor starts from: ``"first"`` (the
            bottom ``num_layers`` layers, the paper's choice), ``"every_other"``
            (each group's first layer), ``"group_last"`` (each group's last layer),
            ``"last"`` (the top layers), or a list of ``num_layers`` indices.
            Ignored with ``hidden_size``. (default: ``"first"``)
        group_sizes: Layers per group, summing to ``n``. (default: as even as
            possible, larger groups first)
        hidden_size: Make the successors narrower: fresh layers of this width
            (same head count and ``head_dim`` where the config sets one, intermediate
            size scaled alike) behind learned ``Linear`` projections at each group
            boundary; each counts as a copy of its group's first layer for
            ``layer_idx`` and the per-layer lists. The finalized model then keeps
            those projections (as `theseus_core.Projected`) and is no longer
            loadable by plain transformers. (default: ``None``, the predecessor's width)
        stack: ``"encoder"`` or ``"decoder"`` for a model with both (BART, Whisper),
            or the path of the layer list. (default: ``None``, the model's only stack)
        heads: Slim successors with this many attention heads of the predecessor's ``head_dim``, the heads
            kept by `prune_layer_`. Only for configs that set ``head_dim`` (Llama, Qwen2, Mistral): a BERT
            config derives its head size from ``hidden_size / num_attention_heads``, so it cannot describe
            fewer heads of the same size. A multiple of ``num_key_value_heads``. (default: ``None``, all)
        intermediate_size: Slim successors with this FFN width, the neurons kept by `prune_layer_`.
            (default: ``None``, the predecessor's)
        successor: The registry's default for the layer type (`layer_successor` unless a user registered
            another) when ``None``, a registered name, or a factory. A layer class that derives from neither
            ``GradientCheckpointingLayer`` nor ``MPNetLayer`` and has no registration gets `layer_successor`
            directly. (default: ``None``)
        registry: The private registry you will pass to ``replace_``: a registration of the layer type there
            counts as one in the default registry, so an unusual layer class gets it rather than
            `layer_successor`. (default: ``None``, the default registry only)

    Every spec's options hold what a factory may need: ``stack`` (the `Stack`), ``source`` (index of the
    layer the successor starts from), ``hidden_size``, ``heads`` and ``intermediate_size``.

    Returns:
        A `theseus_core.Plan` whose finalize hook is `sync_config`: with slim successors it also writes
        their ``num_attention_heads`` / ``intermediate_size`` into the config, so the export reloads in
        plain transformers.

    Raises:
        ValueError: Unsupported model (the reason is in the message, see `layer_stack`),
            ``num_layers`` out of range, bad ``init`` or ``group_sizes``, or groups that mix
            per-layer config entries; nothing is changed.
    """
    found = layer_stack(model, stack)
    config = found.config(model)
    total = len(model.get_submodule(found.path))
    same_depth = successor is not None  # a successor of another kind may keep every layer
    if not isinstance(num_layers, int) or not 1 <= num_layers <= total - (not same_depth):
        interval = f"[1, {total}]" if same_depth else f"[1, {total}) (or {total} with a successor of another kind)"
        raise ValueError(f"num_layers must be an integer in {interval} for this {total}-layer model, got {num_layers}")
    sizes = th.group_sizes_for(total, num_layers, group_sizes)
    narrow = hidden_size is not None and hidden_size != config.hidden_size
    if hidden_size is not None and not (isinstance(hidden_size, int) and hidden_size > 0):
        raise ValueError(f"hidden_size must be a positive integer, got {hidden_size!r}")
    if narrow and getattr(config, "head_dim", None) is None and hidden_size % config.num_attention_heads:
        raise ValueError(
            f"hidden_size={hidden_size} must be divisible by num_attention_heads={config.num_attention_heads}"
        )
    if heads is not None or intermediate_size is not None:
        if narrow:
            raise ValueError(
                "hidden_size builds fresh narrower layers; heads / intermediate_size prune copies: pick one"
            )
        check_slim(model.get_submodule(found.path)[0], config, heads, intermediate_size)
    sources = [sum(sizes[:i]) for i in range(num_layers)] if narrow else _initial_layers(init, sizes, num_layers)
    _check_per_layer(found, config, sizes, sources)
    options = {"stack": found, "hidden_size": hidden_size if narrow else None}
    options |= {"heads": heads, "intermediate_size": intermediate_size}
    projection = "linear" if narrow else None
    layer_type = type(model.get_submodule(found.path)[0])
    if successor is None and th.registered_successor(layer_type, registry) is None:  # outside transformers' bases
        successor = layer_successor
    specs = [
        th.ModuleSpec(spec.path, successor, projection, projection, {**options, "source": source})
        for spec, source in zip(th.plan(model, found.path, group_sizes=sizes), sources, strict=True)
    ]
    return th.Plan(tuple(specs), on_finalize=functools.partial(sync_config, sources=tuple(sources), stack=found))


def layer_successor(
    group: list[nn.Module],
    model: nn.Module,
    *,
    stack: Stack | None = None,
    source: int | None = None,
    hidden_size: int | None = None,
    heads: int | None = None,
    intermediate_size: int | None = None,
) -> nn.Module:
    """The default successor of a group of transformers layers, registered for ``GradientCheckpointingLayer``
    (the base class of most transformers layers) and ``MPNetLayer``.

    Args:
        group: The group's layers.
        model: The model being replaced; ``source`` is looked up there, so a plan made on one model works on
            its copies.
        stack: The `Stack` the group belongs to. (default: ``None``: copy the group's first layer)
        source: Index in the stack of the layer to copy; it may lie outside the group. (default: ``None``, the
            group's first layer)
        hidden_size: A freshly initialised layer of the group's class at this width instead (same head count,
            and ``head_dim`` where the config sets one, intermediate size scaled alike), built as layer
            ``source`` (its ``layer_idx`` and per-layer config entries). Needs ``stack``. (default: ``None``)
        heads, intermediate_size: Prune the copy to this many heads / FFN neurons (`prune_layer_`).
            (default: ``None``, keep all)
    """
    if (hidden_size is not None or source is not None) and stack is None:
        raise ValueError("source= and hidden_size= need the stack option (hf.plan passes it)")
    if hidden_size is not None:
        return _fresh_layer(type(group[0]), stack.config(model), hidden_size, 0 if source is None else source)
    layer = copy.deepcopy(group[0] if source is None else model.get_submodule(stack.path)[source])
    if heads is not None or intermediate_size is not None:
        prune_layer_(layer, heads=heads, intermediate_size=intermediate_size)
    return layer


def _fresh_layer(layer_class: type, config, hidden_size: int, index: int) -> nn.Module:
    narrow = copy.deepcopy(config)
    narrow.hidden_size = hidden_size
    if isinstance(getattr(config, "intermediate_size", None), int):
        narrow.intermediate_size = config.intermediate_size * hidden_size // config.hidden_size
    if "layer_idx" in inspect.signature(layer_class).parameters:
        return layer_class(narrow, layer_idx=index)
    return layer_class(narrow)


def _register_defaults() -> None:
    """Puts `layer_successor` in the default registry, below any registration a user made first."""
    from transformers.modeling_layers import GradientCheckpointingLayer
    from transformers.models.mpnet.modeling_mpnet import MPNetLayer

    for layer_type in (GradientCheckpointingLayer, MPNetLayer):
        th.register_successor(layer_type, fallback=True)(layer_successor)


_register_defaults()
