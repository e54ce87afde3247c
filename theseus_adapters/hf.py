"""Any Hugging Face transformers model: encoders, decoder LLMs, and either stack of an encoder-decoder.

`plan` finds the model's layer stack (BERT family ``*.encoder.layer``, DistilBERT ``transformer.layer``,
GPT-2 ``transformer.h``, Llama / Qwen2 / Mistral / Phi ``model.layers``, ViT ``*.encoder.layer``, the
``encoder.layers`` or ``decoder.layers`` of BART and Whisper), cuts its ``n`` layers into ``num_layers``
consecutive groups (uneven allowed: 12 → 5 is 3, 3, 2, 2, 2) and gives each group one successor layer. Where the
layers are of several kinds (class, parameter shapes, ``layer_types`` entry) that change once or a few times
(DeepSeek-V3's dense layers before its MoE ones, T5's first layer with the relative-attention table), the groups
stay within the runs of one kind (`theseus_adapters.hf_layout`). The plan verifies on one more batch, the user's
tokens repeated past any window, chunk or bucket the config names (``sliding_window``, ``attention_window``,
``window_size``, ``local_attention``, ``chunk_size_feed_forward``, ...: `hf_layout.WINDOW_FIELDS`). Importing this
module registers `hf_layout.uncovered_window` as an example check of every ``replace_``, ``theseus_core.plan``'s
included: example batches of a transformers model that no sequence of exceeds such a size are refused, naming the
config field.

After `theseus_core.Theseus.finalize` the model is an ordinary transformers model of ``num_layers`` layers
(`sync_config`, the plan's finalize hook): the config's layer count under the name that config uses
(``num_hidden_layers``, ``n_layer``, ``n_layers``, ``encoder_layers``, ``decoder_layers``, one stage's entry of
``depths``), every layer's ``layer_idx`` / ``layer_id`` (the KV cache's slot), the per-layer config lists
(``layer_types`` with its sliding windows, ...) taken from the layers kept, a backbone's ``stage_names`` /
``out_features`` / ``out_indices`` and ``first_k_dense_replace``. ``save_pretrained`` →
``AutoModel*.from_pretrained`` then works without theseus, and a decoder's ``generate()`` with its KV cache gives
the same tokens.

Slim successors: ``plan(model, heads=..., intermediate_size=...)`` prunes each successor copy to fewer
heads and a smaller FFN at the same hidden size (`theseus_adapters.slim.prune_layer_`, by weight magnitude), and
finalize writes the new sizes into the config. Layers of several shapes (a budget search's choice,
`theseus_adapters.hf_candidates`: some without attention or FFN, FFNs of several widths) are listed one form per
layer in ``config.theseus_layers``, and `load_pretrained` rebuilds them. The successors come from the registry:
`layer_successor` is registered for transformers' ``GradientCheckpointingLayer`` (the base of most layers) and
``MPNetLayer``; a user's registration for a layer type (``BertLayer``) wins.

Refused, with the reason, before anything changes (`ValueError`): stacks whose layers change kind from each
layer to the next (Gemma2's sliding and full attention, Reformer), whose layers' computation depends on their
index (GPT-2 with ``scale_attn_by_inverse_layer_idx``) or that rewrite their weights (RWKV's ``rescale_every``),
that skip layers at random (``layerdrop``: set it to 0), whose encoder works between layers (DeBERTa-v2's
convolution), heterogeneous configs, config lists of layer indices (``mlp_only_layers``), groupings that would
mix kinds or the entries of a per-layer list, and backbone outputs that would fall inside a group.

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch import nn

import theseus_core as th

from . import hf_layout as layout
from .hf_stack import (
    LAYER_INDEX_NAMES,
    LAYERDROP,
    PER_LAYER_LISTS,
    STACK_NAMES,
    Stack,
    find_stacks,
    index_attributes,
    layer_stack,
    move_index_attributes,
    sync_config,
)
from .slim import LAYER_FORMS_KEY, check_slim, prune_layer_, shape_layer_

__all__ = [
    "INITS",
    "LAYERDROP",
    "LAYER_INDEX_NAMES",
    "PER_LAYER_LISTS",
    "STACK_NAMES",
    "Stack",
    "find_stacks",
    "layer_stack",
    "layer_successor",
    "load_pretrained",
    "plan",
    "sync_config",
]

INITS = ("first", "every_other", "group_last", "last")


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
        group_sizes: Layers per group, summing to ``n``, each group within a run of one layer kind. (default: as
            even as possible, larger groups first; where the layers are of several kinds, ``num_layers`` spread
            over the runs of one kind in proportion to their length, `theseus_adapters.hf_layout`)
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
        plain transformers. Its ``more_examples`` repeats the user's example tokens past any window the config
        names (`hf_layout.window_length`), so that ``replace_`` verifies on a batch that a window changes.

    Raises:
        ValueError: Unsupported model (the reason is in the message, see `layer_stack`),
            ``num_layers`` out of range or below the number of runs of one layer kind, layers whose kind changes
            from each to the next, bad ``init`` or ``group_sizes``, groups that mix kinds or per-layer config
            entries, a successor copied from a layer of another kind, or a backbone output inside a group;
            nothing is changed.
    """
    found = layer_stack(model, stack)
    config = found.config(model)
    total = len(model.get_submodule(found.path))
    same_depth = successor is not None  # a successor of another kind may keep every layer
    if not isinstance(num_layers, int) or not 1 <= num_layers <= total - (not same_depth):
        interval = f"[1, {total}]" if same_depth else f"[1, {total}) (or {total} with a successor of another kind)"
        raise ValueError(f"num_layers must be an integer in {interval} for this {total}-layer model, got {num_layers}")
    sizes = th.group_sizes_for(total, num_layers, group_sizes)
    kinds = layout.layer_kinds(model.get_submodule(found.path), config, found.per_layer)
    given = sizes if group_sizes is not None else None
    sizes = layout.kind_group_sizes(kinds, num_layers, given, found.path, _inner_stacks(model, found.path)) or sizes
    num_layers = len(sizes)
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
    layout.check_sources(kinds, sizes, sources, found.path)
    _check_per_layer(found, config, sizes, sources)
    if found.stage is None and layout.backbone_stages(config, total):
        layout.check_backbone(config, sizes, found.path)
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
    finalize = functools.partial(_sync_undoably, sources=tuple(sources), stack=found, group_sizes=tuple(sizes))
    length = layout.window_length(config)
    more = functools.partial(layout.longer_batch, length=length) if length else None
    return th.Plan(tuple(specs), on_finalize=finalize, more_examples=more)


def _sync_undoably(model: nn.Module, *, stack: Stack, **options) -> Callable[[], None]:
    """The plan's finalize hook: `sync_config` on a copy of the model's config, which every module of the model that
    held the config (or one of its sub-configs) gets instead (another model built from the same config object, a
    teacher, keeps it unchanged); returns what gives the modules the original back (`theseus_core.Theseus.finalize`
    calls it when the finalized model fails its check; it puts the layers' attributes back itself). A `sync_config`
    that raises leaves the model with its original config."""
    from transformers import PretrainedConfig

    copies: dict[int, Any] = {}  # each object of the configs, copied, by the original's id
    for config in (model.config, stack.config(model)):  # a stack's own (T5's decoder copies the model's)
        copy.deepcopy(config, copies)
    swapped = [
        (module, module.config)
        for module in model.modules()
        if isinstance(getattr(module, "config", None), PretrainedConfig) and id(module.config) in copies
    ]

    def undo() -> None:
        for module, config in swapped:
            module.config = config

    try:
        for module, config in swapped:
            module.config = copies[id(config)]
        sync_config(model, stack=stack, **options)
    except Exception:
        undo()
        raise
    return undo


def _inner_stacks(model: nn.Module, path: str) -> str:
    """Advice for a stack whose layers are stages holding stacks of their own (Swin's ``encoder.layers``)."""
    inner = [name for name in find_stacks(model.get_submodule(path)[0]) if name]
    return f"; its layers are stages with stacks of their own: pass stack='{path}.0.{inner[0]}'" if inner else ""


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
        layer = _fresh_layer(type(group[0]), stack.config(model), hidden_size, 0 if source is None else source)
    else:
        layer = copy.deepcopy(group[0] if source is None else model.get_submodule(stack.path)[source])
        if heads is not None or intermediate_size is not None:
            prune_layer_(layer, heads=heads, intermediate_size=intermediate_size)
    return _in_the_groups_slot(layer, group[0])


def _in_the_groups_slot(layer: nn.Module, first: nn.Module) -> nn.Module:
    """``layer`` with its `LAYER_INDEX_NAMES` attributes moved to the group's first layer's (the KV cache's slot):
    while replacing, a successor copied from another layer would otherwise write into that layer's slot too, in the
    same forward, when a cache is in use (`sync_config` numbers the layers 0, 1, ... at finalize)."""
    theirs = index_attributes(first)
    if theirs:
        move_index_attributes(layer, theirs[0][2])
    return layer


def layer_units(model: nn.Module) -> list[nn.Module]:
    """The layers of a transformers model, for FSDP2 to shard one by one: the outermost modules of the classes its
    ``_no_split_modules`` names (a decoder's ``LlamaDecoderLayer``, BERT's ``BertLayer`` and embeddings). Under
    `theseus_core.replace_` these are each predecessor layer and each successor layer (copies of the class).

    Raises:
        ValueError: the model names no such class, or has none of them.
    """
    names = set(getattr(model, "_no_split_modules", None) or ())
    units: list[nn.Module] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside or type(module).__name__ not in names:
            continue
        units.append(module)
        inside.update(id(child) for child in module.modules())
    if not units:
        raise ValueError(f"{type(model).__name__} names no layer class to shard (_no_split_modules: {sorted(names)})")
    return units


def _fresh_layer(layer_class: type, config, hidden_size: int, index: int) -> nn.Module:
    narrow = copy.deepcopy(config)
    narrow.hidden_size = hidden_size
    if isinstance(getattr(config, "intermediate_size", None), int):
        narrow.intermediate_size = config.intermediate_size * hidden_size // config.hidden_size
    if "layer_idx" in inspect.signature(layer_class).parameters:
        return layer_class(narrow, layer_idx=index)
    return layer_class(narrow)


def _register_defaults() -> None:
    """Puts `layer_successor` in the default registry, below any registration a user made first, and registers
    `hf_layout.uncovered_window` as an example check of every `replace_`."""
    from transformers.modeling_layers import GradientCheckpointingLayer
    from transformers.models.mpnet.modeling_mpnet import MPNetLayer

    for layer_type in (GradientCheckpointingLayer, MPNetLayer):
        th.register_successor(layer_type, fallback=True)(layer_successor)
    th.register_example_check(layout.uncovered_window)  # for every plan, theseus_core.plan's too


_register_defaults()


def load_pretrained(directory: str | Path, **kwargs: Any) -> Any:
    """The transformers model ``save_pretrained`` wrote to ``directory``, its layers as the config describes them.

    Without ``config.theseus_layers`` (every layer of one shape: any model that plain transformers describes) this
    is ``from_pretrained`` of the class the config names (``config.architectures[0]``). With them (a budget search
    chose layers of several forms, `sync_slim`): that class built from the config, each layer of its stack shaped by
    its form (`shape_layer_`: narrowed, a sublayer removed), then the weights loaded by that same
    ``from_pretrained``, so that ``output_loading_info=True`` reports any missing, unexpected or mismatched key.
    The model returned is an instance of that class.

    Args:
        directory: What ``save_pretrained`` wrote.
        **kwargs: Passed to ``from_pretrained`` (``dtype``, ``output_loading_info``, ...).

    Raises:
        ValueError: a config that names no transformers class, or forms that do not fit its layer stack.
    """
    import transformers

    config = transformers.AutoConfig.from_pretrained(directory)
    name = next(iter(getattr(config, "architectures", None) or ()), None)
    model_class = getattr(transformers, name, None) if isinstance(name, str) else None
    if model_class is None:
        raise ValueError(f"the config in {directory} names no transformers model class (architectures: {name!r})")
    forms = getattr(config, LAYER_FORMS_KEY, None) or getattr(config.get_text_config(), LAYER_FORMS_KEY, None)
    if not forms:
        return model_class.from_pretrained(directory, **kwargs)

    class Shaped(model_class):  # builds as model_class, then shapes the layers before the weights load
        def __init__(self, config, *args: Any, **options: Any) -> None:
            super().__init__(config, *args, **options)
            paths = [  # the stack the forms describe: a search may have left it one layer, which finders skip
                path
                for path, module in self.named_modules()
                if isinstance(module, nn.ModuleList)
                and path.rsplit(".", 1)[-1] in STACK_NAMES
                and len(module) == len(forms)
            ]
            if len(paths) != 1:
                raise ValueError(
                    f"config.{LAYER_FORMS_KEY} lists {len(forms)} layer forms, and {type(self).__name__} has "
                    f"{len(paths)} layer stacks of that length ({paths}): which one it describes is unclear"
                )
            found = layer_stack(self, paths[0])
            for layer, form in zip(self.get_submodule(found.path), forms, strict=True):
                shape_layer_(layer, form, found.config(self))

    Shaped.__name__ = Shaped.__qualname__ = model_class.__name__
    loaded = Shaped.from_pretrained(directory, config=config, **kwargs)
    (loaded[0] if isinstance(loaded, tuple) else loaded).__class__ = model_class  # Shaped adds nothing after init
    return loaded
