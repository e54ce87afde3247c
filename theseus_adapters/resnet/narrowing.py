"""Narrowing a ResNet block in place: every channel count ``c`` becomes ``round(c * width)``, keeping the leading
channels of the weights (`narrow_`), checked first (`check_narrowable`); a block's widths (`block_widths`)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd


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
            f"{where} ({type(block).__name__}) has no conv1 / conv2 / conv3 nn.Conv2d to read its widths from "
            f"(whatever the width: the plan reads every block's); theseus_adapters.resnet knows torchvision's and "
            f"timm's BasicBlock and Bottleneck: write ModuleSpecs with th.plan and a successor of your own"
        )
    return first.in_channels, last.out_channels


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


def check_narrowable(block: nn.Module, width: float, where: str) -> None:
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
def narrow_(block: nn.Module, width: float) -> None:
    """Narrows every layer of ``block`` in place, keeping the leading channels of its weights."""

    def leading(tensor: torch.Tensor | None, *sizes: int) -> torch.Tensor | None:
        if tensor is None:
            return None
        return tensor[tuple(slice(0, size) for size in sizes)].clone(memory_format=torch.contiguous_format)

    check_narrowable(block, width, type(block).__name__)
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
