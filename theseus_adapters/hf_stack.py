"""The layer stack of a transformers model and the config fields that describe it, for `theseus_adapters.hf`:
finding the stack (`find_stacks`, `layer_stack`), refusing families whose stack the adapter cannot keep in step,
and keeping the config in step after the stack lost layers (`sync_config`, the plan's finalize hook)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from theseus_core.checks import is_int

from . import hf_layout as layout
from .slim import LAYER_FORMS_KEY, sync_slim

STACK_NAMES = ("layer", "layers", "h", "block", "blocks")
"""Last path component of the ``nn.ModuleList`` that holds a transformers model's layers."""
PER_LAYER_LISTS = ("layer_types", "mlp_layer_types", "no_rope_layers", "attention_window", "attn_layers")
"""Config lists with one entry per layer: finalize keeps the entries of the layers kept."""
LAYER_INDEX_NAMES = ("layer_idx", "layer_id")
"""Attributes of a layer's modules that hold the layer's position (the KV cache slot)."""
_COUNT_NAMES = {
    "encoder": ("encoder_layers", "num_layers", "num_hidden_layers"),
    "decoder": ("decoder_layers", "num_decoder_layers", "num_hidden_layers", "num_layers"),
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
}
# Families whose layers or encoder depend on something the layer list does not show.
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
    "rwkv": (
        lambda config: config.rescale_every > 0,
        "RWKV with rescale_every > 0 divides its layers' weights in place in eval mode (and multiplies them back "
        "in training mode), reaching through a site to its first layer only; set config.rescale_every=0",
    ),
}
LAYERDROP = {"encoder": ("encoder_layerdrop", "layerdrop"), "decoder": ("decoder_layerdrop", "layerdrop")}
"""Config fields with the probability of skipping a layer at random, per stack role (``"layers"``: ``layerdrop``)."""


@dataclass(frozen=True)
class Stack:
    """A transformers model's layer stack and the config fields that describe it.

    Attributes:
        stage: Where the stack is one stage of several (``stages.0.blocks``): its index in the per-stage
            list ``count_name`` (``depths``); ``None`` otherwise.
        path: Path of the ``nn.ModuleList`` of layers (``"model.layers"``, ``"bert.encoder.layer"``).
        role: ``"encoder"`` or ``"decoder"`` (one stack of an encoder-decoder), or ``"layers"``.
        owner: Path of the nearest module above the stack with a ``config`` ('' for the model): the
            config that describes the stack (a vision-language model's text config, say).
        count_name: The config attribute that holds the layer count.
        per_layer: The `PER_LAYER_LISTS` this config has, one entry per layer.
        model_count_name: Where the stack's config is a copy of the model's (T5 builds each stack from its own
            copy), the attribute of the model's config, which ``save_pretrained`` writes, that holds this stack's
            layer count (``num_layers`` for T5's encoder, ``num_decoder_layers`` for its decoder); ``None``
            otherwise.
    """

    path: str
    role: str
    owner: str
    count_name: str
    per_layer: tuple[str, ...]
    stage: int | None = None
    model_count_name: str | None = None

    def config(self, model: nn.Module):
        """The config of this stack in ``model`` (or in a copy of the model the stack was found in)."""
        return model.get_submodule(self.owner).config


def find_stacks(model: nn.Module) -> list[str]:
    """Paths of every ``nn.ModuleList`` that looks like a layer stack: named as in `STACK_NAMES`, two or more
    layers (of one class or several: Jamba's Mamba and attention layers), not inside another stack. Only reads
    the model."""
    found: list[str] = []
    for name, module in model.named_modules():
        if (
            isinstance(module, nn.ModuleList)
            and name.rsplit(".", 1)[-1] in STACK_NAMES
            and len(module) >= 2
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
    _refuse_unsupported(model)

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
    staged = layout.find_stage(model, path, stack_config, len(layers), shortened)
    if staged is None and any(part.isdigit() for part in path.split(".")):
        raise ValueError(
            f"{path!r} is one stage of several in {type(model).__name__}, and no per-stage list of its config "
            f"(depths) holds its length {len(layers)}, so finalize could not say how many layers the stage has; "
            f"write ModuleSpecs with th.plan and keep the config in step yourself"
        )
    count_name = staged[0] if staged else _count_name(stack_config, role, len(layers), shortened)
    if count_name is None:
        raise ValueError(
            f"none of the config attributes {_COUNT_NAMES[role]} of {type(model).__name__} holds the length "
            f"of {path!r} ({len(layers)}), so the finalized config could not say how many layers it has"
        )
    for name in LAYERDROP.get(role, ("layerdrop",)):
        if (getattr(stack_config, name, 0) or 0) > 0:
            raise ValueError(
                f"config.{name} = {getattr(stack_config, name)} makes {type(model).__name__} skip layers of {path!r} "
                f"at random in training (LayerDrop), which a site standing for several layers changes; set "
                f"config.{name} = 0 while replacing"
            )
    per_layer = []
    for name, value in vars(stack_config).items():
        if name == LAYER_FORMS_KEY:  # the layers' own shapes, which finalize describes again (sync_slim)
            continue
        if staged or not (isinstance(value, (list, tuple)) and value and ("layer" in name or name in PER_LAYER_LISTS)):
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
                f"not know it; add it to theseus_adapters.hf_stack.PER_LAYER_LISTS if finalize should slice it"
            )
    model_count_name = None
    if stack_config is not config and type(stack_config) is type(config) and not staged:
        model_count_name = _count_name(config, role, len(layers), shortened)
        if model_count_name is None:
            raise ValueError(
                f"{type(model).__name__} builds {path!r} from a copy of its config, and none of the attributes "
                f"{_COUNT_NAMES[role]} of the model's config holds its length ({len(layers)}), so the exported "
                f"config could not say how many layers it has"
            )
    return Stack(path, role, owner, count_name, tuple(per_layer), staged[1] if staged else None, model_count_name)


def _count_name(config, role: str, length: int, shortened: bool) -> str | None:
    """The first of the role's layer-count attributes of ``config`` that holds ``length`` (``shortened``: that is
    set at all, the stack having lost layers already)."""
    return next(
        (
            name
            for name in _COUNT_NAMES[role]
            if getattr(config, name, None) == length or (shortened and getattr(config, name, None))
        ),
        None,
    )


def _has(model: nn.Module, path: str) -> bool:
    try:
        model.get_submodule(path)
    except AttributeError:
        return False
    return True


def _has_config(model: nn.Module, path: str) -> bool:
    return getattr(getattr(model.get_submodule(path), "config", None), "model_type", None) is not None


def _refuse_unsupported(model: nn.Module) -> None:
    model_type = model.config.model_type
    if model_type in _REFUSED:
        applies, reason = _REFUSED[model_type]
        if applies(model.config):
            raise ValueError(reason)


def sync_config(
    model: nn.Module,
    sources: Sequence[int] | None = None,
    *,
    stack: Stack | str | None = None,
    group_sizes: Sequence[int] | None = None,
) -> None:
    """Makes a transformers model's config and layers agree after its stack lost layers: `plan`'s finalize hook.

    Sets the config's layer count (`Stack.count_name`) to the stack's length, moves the `LAYER_INDEX_NAMES`
    attributes of layer i so that its first is ``i`` (``layer_idx`` 0, 1, ... for the KV cache; others in the layer
    keep their offset from it, whichever slot the layer held before) and replaces each per-layer config list by its
    entries at ``sources``. A stack that is one stage of several sets its entry of
    the per-stage list (``depths[stage]``); a backbone with one stage per layer gets ``stage_names``,
    ``out_features`` and ``out_indices`` for the layers kept; ``first_k_dense_replace`` counts the kept layers
    that came from the first ones.

    Args:
        model: The model, its stack already shortened.
        sources: For each layer now in the stack, the index of the layer it was copied from.
            (default: each layer's own ``layer_idx`` / ``layer_id``, which every layer must then have)
        stack: The `Stack` found before the layers were removed (`plan` passes it), or as in `layer_stack`.
            (default: ``None``, the only stack)
        group_sizes: How many old layers each kept layer stands for, to map a backbone's output stages.
            (default: ``None``, each kept layer stands for its source alone)
    """
    found = stack if isinstance(stack, Stack) else layer_stack(model, stack, shortened=True)
    layers = model.get_submodule(found.path)
    if sources is None:
        sources = [_layer_index(layer, found.path, index) for index, layer in enumerate(layers)]
    if len(sources) != len(layers):
        raise ValueError(f"{found.path!r} holds {len(layers)} layers, sources names {len(sources)}")
    config = found.config(model)
    old_count = _stack_count(config, found)
    for name in found.per_layer:
        values = getattr(config, name)
        setattr(config, name, type(values)(values[source] for source in sources))
    if found.stage is not None:
        counts = list(getattr(config, found.count_name))
        counts[found.stage] = len(layers)
        setattr(config, found.count_name, type(getattr(config, found.count_name))(counts))
    else:
        if layout.backbone_stages(config, old_count):
            ends = [s + 1 for s in sources] if group_sizes is None else [*itertools.accumulate(group_sizes)]
            layout.sync_stages(config, ends)
        setattr(config, found.count_name, len(layers))
        if found.model_count_name is not None:  # the config save_pretrained writes
            setattr(model.config, found.model_count_name, len(layers))
    layout.sync_leading_counts(config, sources)
    for index, layer in enumerate(layers):
        move_index_attributes(layer, index)  # the layer's first index becomes its position
    sync_slim(layers, config, found.path)


def _stack_count(config, found: Stack) -> int:
    value = getattr(config, found.count_name)
    return value[found.stage] if found.stage is not None else value


def move_index_attributes(layer: nn.Module, first: int) -> None:
    """Shifts every integer `LAYER_INDEX_NAMES` attribute of ``layer`` alike, so that its first is ``first`` (the
    others keep their offset from it); nothing for a layer without one."""
    found = index_attributes(layer)
    for module, name, value in found:
        setattr(module, name, value + first - found[0][2])


def index_attributes(layer: nn.Module) -> list[tuple[nn.Module, str, int]]:
    """(module, attribute, value) of every integer `LAYER_INDEX_NAMES` attribute in a layer."""
    return [
        (module, name, value)
        for module in layer.modules()
        for name, value in vars(module).items()
        if name in LAYER_INDEX_NAMES and is_int(value)
    ]


def _layer_index(layer: nn.Module, path: str, position: int) -> int:
    found = index_attributes(layer)
    if not found:
        raise ValueError(f"layer {position} of {path!r} has no {'/'.join(LAYER_INDEX_NAMES)}; pass sources=")
    return found[0][2]
