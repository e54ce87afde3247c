"""ResNets from torchvision and timm: fewer blocks per stage, optionally narrower.

A ResNet is a stem, stages ``layer1`` … ``layerN`` (each an ``nn.Sequential`` of
residual blocks whose first block may downsample: stride 2 and a projection
shortcut) and a head. `plan` cuts every stage into consecutive groups (uneven
allowed: 6 blocks into 2 groups is 3 + 3, 3 blocks into 2 is 2 + 1) and gives
each group one successor block, so ``blocks`` is the number of blocks per stage
after `theseus_core.Theseus.finalize`. The successor of the group that holds a
stage's downsampling block downsamples the same way (same stride, same shortcut).

Supported: torchvision ``ResNet`` (BasicBlock and Bottleneck: resnet18 … 152,
wide_resnet, resnext) and timm ``ResNet`` (the same ``layerN`` naming; its SE /
ECA attention, avg-pool shortcuts and drop path included). At full width the
finalized model is a plain ResNet with the new block counts: torchvision's
resnet34 compressed to ``blocks=(2, 2, 2, 2)`` has exactly resnet18's
architecture, and its state_dict loads into ``torchvision.models.resnet18()``
with ``strict=True``.

The successors come from the registry (issue 15): this module registers `block_successor` as the default for
torchvision's and timm's ``BasicBlock`` and ``Bottleneck``, and the light blocks of
`theseus_adapters.light_blocks` as the alternatives ``"mobilenet_v2"``, ``"shufflenet_v2"`` and
``"depthwise_separable"`` (``plan(model, blocks, successor="mobilenet_v2")``). A user's registration for these
types (a private registry passed to ``replace_``, or ``register_successor(BasicBlock, replace=True)``) is what
the plan then uses; each spec carries the options a factory may need.

Batch norm needs nothing here: `theseus_core.replace_` keeps the statistics of
every frozen batch norm (the predecessor blocks', and the stem's ``bn1`` unless
``train_others``) unchanged while the successors' batch norms train their own,
so ``restore()`` gives back the model that went in. In training mode frozen
batch norms normalise with the batch's statistics, as the original did; pass
``predecessor_eval=True`` to have the predecessor blocks use their running
statistics instead.

Example::

    import torchvision
    import theseus_core as th
    from theseus_adapters import resnet

    model = torchvision.models.resnet34(num_classes=10)  # fine-tuned predecessor, blocks (3, 4, 6, 3)
    theseus = th.replace_(model, resnet.plan(model, blocks=(2, 2, 2, 2)), example_inputs=(images,))
    ...  # train with a schedule (README quick start)
    torchvision.models.resnet18(num_classes=10).load_state_dict(theseus.finalize().state_dict())
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd

import theseus_core as th
from theseus_adapters import light_blocks
from theseus_core.checks import is_int
from theseus_core.spec import SuccessorFactory, resolve

INITS = ("first", "every_other", "last", "fresh")

BlocksPerStage = Sequence[int | Sequence[int]]
"""Per stage: the number of successor blocks, or the sizes of its groups (one successor each)."""


def _resnet_types() -> tuple[type, ...]:
    types: list[type] = []
    try:
        from torchvision.models import ResNet as TorchvisionResNet

        types.append(TorchvisionResNet)
    except ImportError:  # pragma: no cover - depends on the environment
        pass
    try:
        from timm.models.resnet import ResNet as TimmResNet

        types.append(TimmResNet)
    except ImportError:  # pragma: no cover - depends on the environment
        pass
    return tuple(types)


def stage_names(model: nn.Module) -> list[str]:
    """Names of the model's stages in order: ``["layer1", "layer2", "layer3", "layer4"]``.

    Raises:
        ValueError: ``model`` is not a torchvision or timm ResNet, or is already under replacement.
    """
    if not isinstance(model, _resnet_types()):
        raise ValueError(
            f"theseus_adapters.resnet supports torchvision and timm ResNets (torchvision.models.ResNet, "
            f"timm.models.resnet.ResNet), got {type(model).__name__}; for other models write ModuleSpecs "
            f"over their block list with theseus_core.plan"
        )
    if any(isinstance(module, th.ReplacementSite) for module in model.modules()):
        raise ValueError(
            f"this {type(model).__name__} is already under Theseus replacement: finalize() or restore() "
            f"its handle before planning again"
        )
    names = []
    while isinstance(getattr(model, f"layer{len(names) + 1}", None), nn.Sequential):
        names.append(f"layer{len(names) + 1}")
    return names


def _downsamples(block: nn.Module) -> bool:
    """Whether a block changes the shape of its input (torchvision and timm set a ``downsample`` shortcut then)."""
    return getattr(block, "downsample", None) is not None


def plan(
    model: nn.Module,
    blocks: BlocksPerStage = (2, 2, 2, 2),
    *,
    init: str | Sequence[Sequence[int]] = "first",
    width: float | Sequence[float] = 1.0,
    successor: str | SuccessorFactory | None = None,
    options: Mapping[str, Any] | None = None,
) -> th.Plan:
    """Specs compressing each stage of a ResNet to fewer (and optionally narrower) blocks.

    Args:
        model: A torchvision or timm ResNet. Only read; the plan belongs to this
            model (its successors copy this model's blocks).
        blocks: Per stage, either the number of successor blocks ``m`` with
            ``1 <= m <=`` the stage's blocks (groups as even as possible, larger
            first), or the sizes of the stage's consecutive groups, one successor
            block each (``(2, 1)`` for a 3-block stage). (default: ``(2, 2, 2, 2)``,
            resnet18's layout)
        init: Which predecessor block each successor block starts from, per stage:
            ``"first"`` (successor block ``j`` from block ``j``: the bottom blocks,
            the paper's choice), ``"every_other"`` (each group's own first block),
            ``"last"`` (the top blocks), ``"fresh"`` (a newly initialised block of
            the group's first block's configuration: Kaiming-normal convolutions,
            unit batch norms with reset statistics), or one sequence of block
            indices per stage (``((0, 1), (0, 2), (0, 3), (0, 1))``). A successor
            that must downsample but starts from a block that doesn't takes that
            block's weights where the shapes agree, and the stage's downsampling
            block's elsewhere (the shortcut, the first convolution when the input
            width differs). (default: ``"first"``)
        width: Channel factor in ``(0, 1]`` for all successor blocks, or one per
            stage. Below 1 every channel count ``c`` of the block becomes
            ``round(c * width)``; a block started from a predecessor keeps the
            leading channels of its weights (a crude pruning; use ``"fresh"`` for
            none), and learned 1×1 convolutions project the group's input into and
            its output back out of the narrower block. The finalized model keeps
            those projections (as `theseus_core.Projected`). (default: ``1.0``)
        successor: What each group becomes: ``None`` for the registry's default for the group's block type
            (`block_successor`, which ``init`` and ``width`` steer), the name of a registered alternative:
            ``"mobilenet_v2"``, ``"shufflenet_v2"`` or ``"depthwise_separable"`` (fresh light blocks of
            `theseus_adapters.light_blocks` mapping the group's input channels to its output channels at its
            stride; ``init`` is then unused and ``width`` must be 1), or a factory. (default: ``None``)
        options: More keyword options for the successor factory, e.g. ``{"hidden_channels": 96}`` for
            ``"mobilenet_v2"``. (default: none)

    Every spec's options hold what a factory may need, for a user's registration as much as for the
    defaults: ``source`` (path of the block to start from, ``None`` for fresh), ``width``, ``stride`` (of the
    group: 2 for a stage's downsampling group), ``in_channels`` and ``out_channels`` (the group's).

    Returns:
        A `theseus_core.Plan`, one spec per group, stage by stage, for
        ``theseus_core.replace_(model, plan, example_inputs=(images,))``.

    Raises:
        ValueError: Not a supported ResNet, the wrong number of stages, a stage
            asked to grow, bad ``init`` or ``width``, or a block that cannot be
            narrowed; naming the argument and what to do. Nothing is changed.
    """
    names = stage_names(model)
    stages = [getattr(model, name) for name in names]
    group_sizes = _group_sizes(names, stages, blocks)
    sources = _sources(names, stages, group_sizes, init)
    widths = _widths(names, width)
    if successor is not None and not isinstance(successor, str) and not callable(successor):
        raise TypeError(f"successor must be None, a registered name or a factory, got {successor!r}")
    if isinstance(successor, str) and any(stage_width != 1 for stage_width in widths):
        raise ValueError(
            f"width={width!r} narrows the default successor; successor={successor!r} builds its blocks at the "
            f"group's widths, so leave width at 1 (or pass the block's own width options)"
        )
    for name, stage, stage_width in zip(names, stages, widths, strict=True):
        projected = [index for index, block in enumerate(stage) if isinstance(block, th.Projected)]
        if projected:
            raise ValueError(
                f"{name}[{projected[0]}] is a narrowed successor from an earlier compression (a Projected); "
                f"the adapter plans over plain ResNet blocks, so write ModuleSpecs for this model instead"
            )
        late = [index for index, block in enumerate(stage) if index > 0 and _downsamples(block)]
        if late:
            raise ValueError(
                f"{name}[{late[0]}] downsamples, but only the first block of a stage may; write ModuleSpecs "
                f"for this model with theseus_core.plan instead"
            )
        if stage_width != 1:
            for index, block in enumerate(stage):
                block_widths(block, f"{name}[{index}]")
                _check_narrowable(block, stage_width, f"{name}[{index}]")

    specs = []
    for name, stage, sizes, stage_sources, stage_width in zip(names, stages, group_sizes, sources, widths, strict=True):
        start = 0
        for size, source in zip(sizes, stage_sources, strict=True):
            group = list(stage[start : start + size])
            needs = {
                "source": None if source is None else f"{name}[{source}]",
                "width": stage_width,
                "stride": _stride(group[0]),
                "in_channels": block_widths(group[0], f"{name}[{start}]")[0],
                "out_channels": block_widths(group[-1], f"{name}[{start + size - 1}]")[1],
            }
            specs.append(
                th.ModuleSpec(f"{name}[{start}:{start + size}]", successor, options={**needs, **(options or {})})
            )
            start += size
    return th.Plan(tuple(specs))


def _stride(block: nn.Module) -> int:
    """How much a block shrinks height and width: the stride of its shortcut (1 without one)."""
    stride = 1
    for module in block.downsample.modules() if _downsamples(block) else ():
        if isinstance(module, (_ConvNd, nn.AvgPool2d, nn.MaxPool2d)):
            value = module.stride
            stride *= value[0] if isinstance(value, tuple) else value
    return stride


def _group_sizes(names: list[str], stages: list[nn.Sequential], blocks: BlocksPerStage) -> list[list[int]]:
    current = tuple(len(stage) for stage in stages)
    if isinstance(blocks, (str, bytes)) or not isinstance(blocks, Sequence) or len(blocks) != len(stages):
        raise ValueError(
            f"blocks must give one entry per stage: this model has {len(stages)} stages ({', '.join(names)}) "
            f"with {current} blocks, got blocks={blocks!r}; e.g. blocks={tuple(max(1, n // 2) for n in current)}"
        )
    group_sizes = []
    for position, (name, entry, total) in enumerate(zip(names, blocks, current, strict=True)):
        if is_int(entry):
            if entry > total:
                raise ValueError(
                    f"blocks[{position}]={entry} asks {name} to grow from {total} blocks; a successor stage "
                    f"has at most as many blocks as its predecessor, so use 1 <= blocks[{position}] <= {total}"
                )
            if entry < 1:
                raise ValueError(f"blocks[{position}]={entry}: {name} needs at least 1 block (1 to {total})")
            group_sizes.append(th.even_group_sizes(total, entry))
        elif isinstance(entry, Sequence) and not isinstance(entry, (str, bytes)):
            sizes = list(entry)
            if not sizes or any(not isinstance(s, int) or isinstance(s, bool) or s < 1 for s in sizes):
                raise ValueError(f"blocks[{position}]={entry!r}: group sizes of {name} must be positive integers")
            if sum(sizes) != total:
                raise ValueError(
                    f"blocks[{position}]={entry!r}: the group sizes of {name} must sum to its {total} blocks"
                )
            group_sizes.append(sizes)
        else:
            raise ValueError(
                f"blocks[{position}] must be a block count or a sequence of group sizes for {name}, got {entry!r}"
            )
    return group_sizes


def _sources(
    names: list[str], stages: list[nn.Sequential], group_sizes: list[list[int]], init: str | Sequence[Sequence[int]]
) -> list[list[int | None]]:
    """Per stage, the index of the block each successor starts from (``None``: fresh)."""
    counts = [len(sizes) for sizes in group_sizes]
    if isinstance(init, str):
        if init == "first":
            return [list(range(count)) for count in counts]
        if init == "last":
            return [list(range(len(stage) - count, len(stage))) for stage, count in zip(stages, counts, strict=True)]
        if init == "every_other":
            return [[sum(sizes[:j]) for j in range(len(sizes))] for sizes in group_sizes]
        if init == "fresh":
            return [[None] * count for count in counts]
        raise ValueError(f"init must be one of {INITS} or one sequence of block indices per stage, got {init!r}")
    example = tuple(tuple(range(count)) for count in counts)
    if not isinstance(init, Sequence) or len(init) != len(stages):
        raise ValueError(
            f"init as indices needs one sequence per stage ({len(stages)}), each with one block index per "
            f"successor block, e.g. init={example}; got {init!r}"
        )
    sources = []
    for name, stage, count, indices in zip(names, stages, counts, init, strict=True):
        total = len(stage)
        valid = isinstance(indices, Sequence) and len(indices) == count
        if not valid or any(not isinstance(i, int) or isinstance(i, bool) or not -total <= i < total for i in indices):
            raise ValueError(
                f"init for {name} must hold {count} block indices in [0, {total}) (one per successor block), "
                f"got {indices!r}; e.g. init={example}"
            )
        sources.append([index % total for index in indices])
    return sources


def _widths(names: list[str], width: float | Sequence[float]) -> list[float]:
    widths = list(width) if isinstance(width, Sequence) else [width] * len(names)
    if len(widths) != len(names):
        raise ValueError(f"width must be one factor or one per stage ({len(names)}: {', '.join(names)}), got {width}")
    for value in widths:
        if not isinstance(value, Real) or isinstance(value, bool) or not 0 < value <= 1:
            raise ValueError(f"width factors must be numbers in (0, 1] (1 keeps the full width), got {width!r}")
    return [float(value) for value in widths]


# --------------------------------------------------------------- successors
def block_successor(group: list[nn.Module], model: nn.Module, *, source: str | None = None, width: float = 1.0):
    """The default successor of a group of ResNet blocks (registered for torchvision's and timm's
    ``BasicBlock`` and ``Bottleneck``): one block shaped like the group's first block.

    Args:
        group: The group's blocks.
        model: The model being replaced (``source`` is looked up there).
        source: Path of the predecessor block whose weights the successor starts from (``"layer1[1]"``; it
            may lie outside the group), or ``None`` for a freshly initialised block of the group's first
            block's configuration. (default: ``None``)
        width: Channel factor in ``(0, 1]``; see `plan`. (default: ``1.0``)

    Below full width the successor is a `theseus_core.Projected`: the narrowed block between two learned 1×1
    convolutions, from the group's input channels to the block's and from the block's output channels back to
    the group's.

    The successor has the structure of the group's first block, so it downsamples exactly when that block
    does. When ``source`` differs from it in that respect, the successor is a copy of the group's first block
    with the source's weights loaded wherever their names and shapes agree.
    """
    first = group[0]
    origin = None if source is None else resolve(model, source).modules[0]
    if origin is None:
        block = copy.deepcopy(first)
        _reinitialize_(block)
    elif origin is first or not (_downsamples(first) or _downsamples(origin)):
        block = copy.deepcopy(origin)  # same configuration: the blocks of a stage after its first
    else:  # keep the group's stride and shortcut, take the source's weights where they fit
        block = copy.deepcopy(first)
        shapes = {name: tensor.shape for name, tensor in block.state_dict().items()}
        fitting = {k: v for k, v in origin.state_dict().items() if shapes.get(k) == v.shape}
        block.load_state_dict(fitting, strict=False)
    if width == 1:
        return block
    _narrow_(block, width)
    (outer_in, _), (_, outer_out) = block_widths(first), block_widths(group[-1])
    inner_in, inner_out = block_widths(block)
    return th.Projected(block, nn.Conv2d(outer_in, inner_in, 1), nn.Conv2d(inner_out, outer_out, 1))


class BlockSuccessor:
    """`block_successor` with its options bound, for a spec written by hand:
    ``th.ModuleSpec("layer1[0:2]", BlockSuccessor("layer1[0]", width=0.5))``."""

    def __init__(self, source: str | None, width: float = 1.0) -> None:
        self.source, self.width = source, width

    def __call__(self, group: list[nn.Module], model: nn.Module) -> nn.Module:
        return block_successor(group, model, source=self.source, width=self.width)

    def __repr__(self) -> str:
        return f"BlockSuccessor({self.source or 'fresh'}, width={self.width:g})"


def _light_successor(kind: str) -> SuccessorFactory:
    block_type = light_blocks.BLOCKS[kind]
    takes = set(inspect.signature(block_type).parameters)

    def build(group: list[nn.Module], **options: Any) -> nn.Module:
        if "hidden_channels" in takes and options.get("hidden_channels") is None:
            # twice the group's first block's inner width: lighter than one block, BasicBlock or Bottleneck
            options["hidden_channels"] = 2 * group[0].conv1.out_channels
        return block_type(**{name: value for name, value in options.items() if name in takes})

    build.__name__ = build.__qualname__ = f"{kind}_successor"
    build.__doc__ = (
        f"A fresh `theseus_adapters.light_blocks.{block_type.__name__}` mapping the group's ``in_channels`` to its "
        f"``out_channels`` at its ``stride`` (the options `plan` passes), with the block's own options."
    )
    return build


LIGHT_SUCCESSORS = {kind: _light_successor(kind) for kind in light_blocks.BLOCKS}
"""The registered alternatives to `block_successor`, by name: ``resnet.plan(model, successor=name)``."""


def _register_defaults() -> None:
    """Puts this adapter's successors in the default registry, below any registration a user made first."""
    for block_type in _block_types():
        th.register_successor(block_type, fallback=True)(block_successor)
        for kind, build in LIGHT_SUCCESSORS.items():
            th.register_successor(block_type, kind, fallback=True)(build)


def _block_types() -> list[type]:
    types: list[type] = []
    try:
        from torchvision.models.resnet import BasicBlock, Bottleneck

        types += [BasicBlock, Bottleneck]
    except ImportError:  # pragma: no cover - depends on the environment
        pass
    try:
        from timm.models.resnet import BasicBlock, Bottleneck

        types += [BasicBlock, Bottleneck]
    except ImportError:  # pragma: no cover - depends on the environment
        pass
    return types


_register_defaults()


def block_widths(block: nn.Module, where: str = "the block") -> tuple[int, int]:
    """(input channels, output channels) of a torchvision or timm residual block.

    Read from ``conv1`` and the last convolution of the residual branch (``conv3``
    in a Bottleneck, ``conv2`` in a BasicBlock), not from module order: the last
    convolution registered may belong to the shortcut or to attention (timm's
    ECA holds a one-channel ``Conv1d``).
    """
    first = getattr(block, "conv1", None)
    last = getattr(block, "conv3", None) or getattr(block, "conv2", None)
    if not (isinstance(first, nn.Conv2d) and isinstance(last, nn.Conv2d)):
        raise ValueError(
            f"{where} ({type(block).__name__}) has no conv1 / conv2 / conv3 convolutions to read its widths "
            f"from; use width=1 for this stage or write the successor"
        )
    return first.in_channels, last.out_channels


def _reinitialize_(block: nn.Module) -> None:
    """Initialises a block as torchvision and timm initialise a new ResNet (without zero-init of the last norm)."""
    for module in block.modules():
        if isinstance(module, _ConvNd):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, _BatchNorm):
            module.reset_parameters()  # unit weight, zero bias, fresh running statistics
        elif isinstance(module, nn.Linear):
            module.reset_parameters()


def _scaled(channels: int, width: float) -> int:
    # A function of the count alone, so two layers that agree on a width still agree after narrowing.
    return max(1, round(channels * width))


def _narrowed_conv(conv: _ConvNd, width: float, where: str) -> tuple[int, int, int]:
    """(in_channels, out_channels, groups) of a convolution narrowed by ``width``."""
    if conv.transposed:
        raise ValueError(f"{where}: cannot narrow a transposed convolution; use width=1 for this stage")
    in_channels, out_channels = _scaled(conv.in_channels, width), _scaled(conv.out_channels, width)
    depthwise = conv.groups > 1 and conv.groups == conv.in_channels
    groups = in_channels if depthwise else conv.groups
    if in_channels % groups or out_channels % groups:
        raise ValueError(
            f"width={width:g} gives {where} ({type(conv).__name__}, {conv.groups} groups) {in_channels} input and "
            f"{out_channels} output channels, not multiples of its groups; choose a width that keeps "
            f"{conv.in_channels} and {conv.out_channels} channels divisible by {groups} (e.g. 0.5)"
        )
    return in_channels, out_channels, groups


def _check_narrowable(block: nn.Module, width: float, where: str) -> None:
    for name, module in block.named_modules():
        path = f"{where}.{name}" if name else where
        if isinstance(module, _ConvNd):
            _narrowed_conv(module, width, path)
        elif not isinstance(module, (_BatchNorm, nn.Linear)) and (
            any(p is not None for p in module._parameters.values())
            or any(b is not None for b in module._buffers.values())
        ):
            raise ValueError(
                f"cannot narrow {path} ({type(module).__name__}): only convolutions, batch norms and linear "
                f"layers carry weights the adapter can narrow; use width=1 for this stage or write the successor"
            )


@torch.no_grad()
def _narrow_(block: nn.Module, width: float) -> None:
    """Narrows every layer of ``block`` in place, keeping the leading channels of its weights."""

    def leading(tensor: torch.Tensor | None, *sizes: int) -> torch.Tensor | None:
        if tensor is None:
            return None
        return tensor[tuple(slice(0, size) for size in sizes)].clone(memory_format=torch.contiguous_format)

    _check_narrowable(block, width, type(block).__name__)
    for module in block.modules():
        if isinstance(module, _ConvNd):
            in_channels, out_channels, groups = _narrowed_conv(module, width, "")
            module.weight = nn.Parameter(leading(module.weight, out_channels, in_channels // groups))
            if module.bias is not None:
                module.bias = nn.Parameter(leading(module.bias, out_channels))
            module.in_channels, module.out_channels, module.groups = in_channels, out_channels, groups
        elif isinstance(module, _BatchNorm):
            features = _scaled(module.num_features, width)
            for name in ("weight", "bias"):
                if getattr(module, name) is not None:
                    setattr(module, name, nn.Parameter(leading(getattr(module, name), features)))
            for name in ("running_mean", "running_var"):
                if getattr(module, name) is not None:
                    setattr(module, name, leading(getattr(module, name), features))
            module.num_features = features
        elif isinstance(module, nn.Linear):
            in_features, out_features = _scaled(module.in_features, width), _scaled(module.out_features, width)
            module.weight = nn.Parameter(leading(module.weight, out_features, in_features))
            if module.bias is not None:
                module.bias = nn.Parameter(leading(module.bias, out_features))
            module.in_features, module.out_features = in_features, out_features
