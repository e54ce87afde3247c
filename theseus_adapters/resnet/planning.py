"""The ResNet plan: each stage cut into consecutive groups, one successor block each, with the options a
successor factory needs (`plan`); the stages of a torchvision or timm ResNet (`stage_names`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn
from torch.nn.modules.conv import _ConvNd

import theseus_core as th
from theseus_core.checks import is_int, is_real
from theseus_core.spec import SuccessorFactory

from .narrowing import block_widths, check_narrowable

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


def downsamples(block: nn.Module) -> bool:
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
        model: A torchvision or timm ResNet. Only read; the plan names paths, so it
            serves any model of the same layout (its successors copy the blocks of
            the model `replace_` is given, a copy of this one included).
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
            ``"mobilenet_v2"``, ``"shufflenet_v2"``, ``"depthwise_separable"`` (fresh light blocks of
            `theseus_adapters.resnet.successor_blocks` mapping the group's input channels to its output channels at its
            stride) or ``"narrow_basic"`` (a narrower BasicBlock started from the group's first block:
            `narrow_basic_successor`), for which ``init`` is unused and ``width`` must be 1, or a factory.
            (default: ``None``)
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
        late = [index for index, block in enumerate(stage) if index > 0 and downsamples(block)]
        if late:
            raise ValueError(
                f"{name}[{late[0]}] downsamples, but only the first block of a stage may; write ModuleSpecs "
                f"for this model with theseus_core.plan instead"
            )
        if stage_width != 1:
            for index, block in enumerate(stage):
                block_widths(block, f"{name}[{index}]")
                check_narrowable(block, stage_width, f"{name}[{index}]")

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
    for module in block.downsample.modules() if downsamples(block) else ():
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
            if not sizes or any(not is_int(s) or s < 1 for s in sizes):
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
        if not valid or any(not is_int(i) or not -total <= i < total for i in indices):
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
        if not is_real(value) or not 0 < value <= 1:
            raise ValueError(f"width factors must be numbers in (0, 1] (1 keeps the full width), got {width!r}")
    return [float(value) for value in widths]
