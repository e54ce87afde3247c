"""The successors of groups of ResNet blocks, registered in the default registry on import: `block_successor`
(the default for torchvision's and timm's ``BasicBlock`` and ``Bottleneck``: one block shaped like the group's first,
optionally narrowed) and the light blocks of `theseus_adapters.resnet.successor_blocks` under their names (fresh,
but for `narrow_basic_successor`, started from the group's first block)."""

from __future__ import annotations

import copy
import inspect
from typing import Any

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd

import theseus_core as th
from theseus_core.checks import is_int
from theseus_core.spec import SuccessorFactory, resolve

from . import successor_blocks
from .narrowing import block_widths, keep_channels_, narrow_, strongest_filters
from .planning import downsamples


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
    elif origin is first or not (downsamples(first) or downsamples(origin)):
        block = copy.deepcopy(origin)  # same configuration: the blocks of a stage after its first
    else:  # keep the group's stride and shortcut, take the source's weights where they fit
        block = copy.deepcopy(first)
        shapes = {name: tensor.shape for name, tensor in block.state_dict().items()}
        fitting = {k: v for k, v in origin.state_dict().items() if shapes.get(k) == v.shape}
        block.load_state_dict(fitting, strict=False)
    if width == 1:
        return block
    narrow_(block, width)
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


PLAN_OPTIONS = frozenset({"source", "width", "stride", "in_channels", "out_channels"})
"""The options `theseus_adapters.resnet.plan` gives every group's factory, whichever it is."""


def _light_successor(kind: str) -> SuccessorFactory:
    block_type = successor_blocks.BLOCKS[kind]
    takes = set(inspect.signature(block_type).parameters)

    def build(group: list[nn.Module], **options: Any) -> nn.Module:
        unknown = sorted(set(options) - takes - PLAN_OPTIONS)  # what `plan` passes every factory is not the user's
        if unknown:
            raise TypeError(
                f"{kind} takes no option {', '.join(map(repr, unknown))}; its options are "
                f"{sorted(takes - {'in_channels', 'out_channels', 'stride'})}"
            )
        if "hidden_channels" in takes and options.get("hidden_channels") is None:
            # twice the group's first block's inner width: lighter than one block, BasicBlock or Bottleneck
            options["hidden_channels"] = 2 * group[0].conv1.out_channels
        hidden = options.get("hidden_channels")
        if hidden is not None and not (is_int(hidden) and hidden > 0):
            raise ValueError(f"{kind}: hidden_channels must be a positive integer, got {hidden!r}")
        return block_type(**{name: value for name, value in options.items() if name in takes})

    build.__name__ = build.__qualname__ = f"{kind}_successor"
    build.__doc__ = (
        f"A fresh `theseus_adapters.resnet.successor_blocks.{block_type.__name__}` mapping the group's "
        f"``in_channels`` to its ``out_channels`` at its ``stride`` (the options `plan` passes), with the block's own "
        f"options."
    )
    return build


def narrow_basic_successor(
    group: list[nn.Module], *, in_channels: int, out_channels: int, stride: int, hidden_channels: int | None = None
) -> successor_blocks.NarrowBasic:
    """A `theseus_adapters.resnet.successor_blocks.NarrowBasic` mapping the group's ``in_channels`` to its
    ``out_channels`` at its ``stride`` (the options `plan` passes), started from the group's first block.

    Of that block it keeps ``conv1``, ``bn1``, ``conv2`` and ``bn2`` restricted to the ``hidden_channels`` inner
    channels whose ``conv1`` filters have the largest L1 norm (`narrowing.strongest_filters`, in their order):
    trained filters carry no meaning in their position, so the leading ones would be an arbitrary subset, while a
    filter of small L1 norm produces small activations and matters least to the block's output (Li et al. 2017).
    Its ``downsample`` is kept whole where it is a 1×1 convolution and a batch norm, as torchvision builds it; a
    shortcut of another form (timm's average pool, a larger kernel) leaves the successor's a fresh one. At
    ``hidden_channels`` equal to the block's inner width, the successor computes exactly what the block does.
    ``init`` does not steer it: the group's first block holds the group's stride and shortcut.

    Args:
        group: The group's blocks; the first a torchvision or timm ``BasicBlock``.
        in_channels, out_channels, stride: The group's, as `plan` gives them.
        hidden_channels: The inner width. Fresh weights throughout where it exceeds the first block's inner
            width, which has no more channels to give. (default: half of ``out_channels``, `NarrowBasic`'s)

    Raises:
        ValueError: the group's first block has parts a NarrowBasic has not (timm's ``se``, ``aa``, ``drop_block``,
            ``drop_path``, a dilation), or is a Bottleneck (``conv3``), or no block of two 3×3 convolutions:
            nothing of a Bottleneck maps onto a BasicBlock's layers, and a BasicBlock at the width of a Bottleneck
            group's output costs more than the Bottleneck (its 3×3 convolutions work at the expanded width), so it
            is no light successor there. A budget search (`candidates`) records the refusal and offers the others.
    """
    first = group[0]
    convs = [getattr(first, name, None) for name in ("conv1", "conv2")]
    if getattr(first, "conv3", None) is not None or not all(
        isinstance(conv, nn.Conv2d) and conv.kernel_size == (3, 3) for conv in convs
    ):
        raise ValueError(
            f"narrow_basic replaces groups of BasicBlocks (two 3×3 convolutions); this group starts with a "
            f"{type(first).__name__}, for which a narrow BasicBlock is no lighter: use another successor"
        )
    dilated = [conv.dilation for conv in convs if conv.dilation != (1, 1)]
    if dilated:  # a NarrowBasic's convolutions are not dilated: it would compute something else silently
        raise ValueError(
            f"narrow_basic builds undilated 3×3 convolutions; this group's first block is dilated {dilated[0]} (a "
            f"ResNet with output_stride < 32): use another successor, or the default one (a copy of the block)"
        )
    extras = [  # timm's optional parts, which a NarrowBasic has not: it would drop them silently
        name
        for name in ("se", "aa", "drop_block", "drop_path")
        if not isinstance(getattr(first, name, None), (type(None), nn.Identity))
    ]
    if extras:
        raise ValueError(
            f"narrow_basic holds a BasicBlock's convolutions, norms and shortcut; this group's {type(first).__name__} "
            f"also has {', '.join(extras)}, which it would drop: use another successor"
        )
    block = successor_blocks.NarrowBasic(in_channels, out_channels, stride, hidden_channels)
    if block.hidden_channels > first.conv1.out_channels:
        return block  # wider inside than the group's first block: nothing to keep
    donor = copy.deepcopy(first)
    kept = strongest_filters(donor.conv1, block.hidden_channels)
    keep_channels_(donor.conv1, outputs=kept)
    keep_channels_(donor.bn1, outputs=kept)
    keep_channels_(donor.conv2, inputs=kept)
    shapes = {name: tensor.shape for name, tensor in block.state_dict().items()}
    fitting = {name: tensor for name, tensor in donor.state_dict().items() if shapes.get(name) == tensor.shape}
    missing = [name for name in shapes if name not in fitting]
    if any(name.startswith(("conv", "bn")) for name in missing):  # a BasicBlock of the group's widths always fits
        raise ValueError(f"narrow_basic: {type(first).__name__}'s {missing} do not fit a NarrowBasic of its widths")
    if missing:  # the shortcut is the donor's whole or fresh, never half of each
        fitting = {name: tensor for name, tensor in fitting.items() if not name.startswith("downsample.")}
    block.load_state_dict(fitting, strict=False)
    return block


_STARTED_FROM_THE_GROUP = {successor_blocks.NarrowBasic.kind: narrow_basic_successor}

LIGHT_SUCCESSORS = {
    kind: _STARTED_FROM_THE_GROUP.get(kind) or _light_successor(kind) for kind in successor_blocks.BLOCKS
}
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
