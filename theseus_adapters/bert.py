"""BERT-family encoders from Hugging Face transformers: the paper's reference setup.

`plan` cuts the encoder's ``n`` layers into ``num_layers`` consecutive groups
(uneven allowed: 12 → 5 is 3, 3, 2, 2, 2) and gives each group one successor
layer. After `theseus_core.Theseus.finalize` the model is an ordinary
transformers model of ``num_layers`` layers: the config's
``num_hidden_layers`` and every layer's ``layer_idx`` are fixed, so
``save_pretrained`` → ``AutoModel*.from_pretrained`` works without theseus.

Supported: BERT (``BertModel`` and every ``BertFor*`` head; MiniLM is a BERT),
RoBERTa, and MPNet (whose layers take a relative-position bias computed once by
the encoder: the site passes it through to every layer).

Example::

    from transformers import AutoModelForSequenceClassification
    import theseus_core as th
    from theseus_adapters import bert

    model = AutoModelForSequenceClassification.from_pretrained(path)  # fine-tuned, 12 layers
    batch = tokenizer(["a sentence", "another"], return_tensors="pt")  # replace_ verifies the surgery on it
    theseus = th.replace_(model, bert.plan(model, num_layers=6, init="first"), example_kwargs=dict(batch))
    ...  # train with a schedule (README quick start)
    theseus.finalize().save_pretrained("out")  # a plain 6-layer model
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from torch import nn

import theseus_core as th

SUPPORTED_MODEL_TYPES = ("bert", "roberta", "mpnet")
INITS = ("first", "every_other", "group_last", "last")


def encoder_layers_path(model: nn.Module) -> str:
    """Path of the encoder's ``nn.ModuleList`` of layers (``"bert.encoder.layer"``, ``"encoder.layer"``, ...).

    Raises:
        ValueError: ``model`` is not a supported transformers model.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"theseus_adapters.bert supports transformers models of type {SUPPORTED_MODEL_TYPES}, got "
            f"{type(model).__name__} (model_type={model_type!r}); for other models write ModuleSpecs "
            f"over their layer list with theseus_core.plan"
        )
    paths = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] == "layer" and name.endswith("encoder.layer")
    ]
    if len(paths) != 1:
        raise ValueError(f"expected one encoder layer list in {type(model).__name__}, found {paths or 'none'}")
    return paths[0]


def _initial_layers(init: str | Sequence[int], group_sizes: list[int], num_layers: int) -> list[int]:
    """Index of the predecessor layer each successor starts from."""
    total = sum(group_sizes)
    if isinstance(init, str):
        if init == "first":  # the paper: the bottom m layers, successor i from layer i
            return list(range(num_layers))
        if init == "last":
            return list(range(total - num_layers, total))
        if init == "every_other":  # each group's own first layer: 0, 2, 4, ... for 12 → 6
            starts = [0]
            for size in group_sizes[:-1]:
                starts.append(starts[-1] + size)
            return starts
        if init == "group_last":  # each group's own last layer, whose output the next group expects: 1, 3, 5, ...
            ends = [group_sizes[0] - 1]
            for size in group_sizes[1:]:
                ends.append(ends[-1] + size)
            return ends
        raise ValueError(f"init must be one of {INITS} or a list of {num_layers} layer indices, got {init!r}")
    indices = list(init)
    if len(indices) != num_layers or not all(isinstance(i, int) and 0 <= i < total for i in indices):
        raise ValueError(f"init as a list needs {num_layers} layer indices in [0, {total}), got {indices}")
    return indices


def _narrow_layer(layer: nn.Module, config, hidden_size: int) -> nn.Module:
    """A freshly initialised layer of the same class with a smaller hidden size (same head count)."""
    heads = config.num_attention_heads
    if hidden_size % heads:
        raise ValueError(f"hidden_size={hidden_size} must be divisible by num_attention_heads={heads}")
    narrow = copy.deepcopy(config)
    narrow.hidden_size = hidden_size
    narrow.intermediate_size = config.intermediate_size * hidden_size // config.hidden_size
    return type(layer)(narrow)


def fix_layer_indices(model: nn.Module) -> None:
    """The finalize hook: config.num_hidden_layers and each layer's ``layer_idx`` match the new stack."""
    layers = model.get_submodule(encoder_layers_path(model))
    model.config.num_hidden_layers = len(layers)
    for index, layer in enumerate(layers):
        for module in layer.modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = index


def plan(
    model: nn.Module,
    num_layers: int = 6,
    *,
    init: str | Sequence[int] = "first",
    group_sizes: Sequence[int] | None = None,
    hidden_size: int | None = None,
) -> th.Plan:
    """Specs compressing a BERT-family encoder to ``num_layers`` layers.

    Args:
        model: A transformers BERT / RoBERTa / MPNet model (any head). Only read.
        num_layers: Successor layers, one per group, ``1 <= num_layers < n``. (default: ``6``)
        init: Which predecessor layer each successor starts from: ``"first"`` (the
            bottom ``num_layers`` layers, the paper's choice), ``"every_other"``
            (each group's first layer), ``"group_last"`` (each group's last layer),
            ``"last"`` (the top layers), or a list of
            ``num_layers`` indices. Ignored with ``hidden_size``. (default: ``"first"``)
        group_sizes: Layers per group, summing to ``n``. (default: as even as
            possible, larger groups first)
        hidden_size: Make the successors narrower: fresh layers of this width
            (same head count, intermediate size scaled alike) behind learned
            ``Linear`` projections at each group boundary. The finalized model then
            keeps those projections (as `theseus_core.Projected`) and is no longer
            loadable by plain transformers. (default: ``None``, the predecessor's width)

    Returns:
        A `theseus_core.Plan` whose finalize hook fixes the config and layer indices.

    Raises:
        ValueError: Unsupported model, ``num_layers`` out of range, bad ``init`` or
            ``group_sizes``; nothing is changed.
    """
    path = encoder_layers_path(model)
    layers = model.get_submodule(path)
    total = len(layers)
    if not isinstance(num_layers, int) or not 1 <= num_layers < total:
        raise ValueError(
            f"num_layers must be an integer in [1, {total}) for this {total}-layer model, got {num_layers}"
        )
    sizes = th.even_group_sizes(total, num_layers) if group_sizes is None else list(group_sizes)
    if len(sizes) != num_layers:
        raise ValueError(f"group_sizes {sizes} must have num_layers={num_layers} entries")
    if hidden_size is not None and not (isinstance(hidden_size, int) and hidden_size > 0):
        raise ValueError(f"hidden_size must be a positive integer, got {hidden_size!r}")
    sources = _initial_layers(init, sizes, num_layers)
    groups = th.plan(model, path, group_sizes=sizes).specs  # validates the sizes

    specs = []
    for spec, source in zip(groups, sources, strict=True):
        if hidden_size is None or hidden_size == model.config.hidden_size:
            successor = _CopyLayer(path, source)
            specs.append(th.ModuleSpec(spec.path, successor))
        else:
            successor = _NarrowLayer(model.config, hidden_size)
            specs.append(th.ModuleSpec(spec.path, successor, in_proj="linear", out_proj="linear"))
    return th.Plan(tuple(specs), on_finalize=fix_layer_indices)


class _CopyLayer:
    """Successor factory: a deep copy of one predecessor layer, which may lie outside the group. The layer is
    looked up in the model being replaced, so a plan made on one model works on its copies."""

    def __init__(self, layers_path: str, index: int) -> None:
        self.layers_path, self.index = layers_path, index

    def __call__(self, group: list[nn.Module], model: nn.Module) -> nn.Module:
        return copy.deepcopy(model.get_submodule(self.layers_path)[self.index])

    def __repr__(self) -> str:
        return f"copy of {self.layers_path}[{self.index}]"


class _NarrowLayer:
    def __init__(self, config, hidden_size: int) -> None:
        self.config, self.hidden_size = config, hidden_size

    def __call__(self, group: list[nn.Module]) -> nn.Module:
        return _narrow_layer(group[0], self.config, self.hidden_size)
