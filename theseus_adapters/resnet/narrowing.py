"""Narrowing a ResNet block in place: every channel count ``c`` becomes ``round(c * width)``, keeping the leading
channels of the weights (`narrow_`), checked first (`check_narrowable`); a block's widths (`block_widths`). Both
narrowings, this one and a light block's started from a wider one, keep channels through `keep_channels_`; which
filters of a convolution are the strongest (`strongest_filters`)."""

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
def keep_channels_(
    layer: nn.Module, *, outputs: torch.Tensor | None = None, inputs: torch.Tensor | None = None
) -> None:
    """Keeps, in place, the channels ``outputs`` and ``inputs`` (index tensors, in the order given) of a
    convolution, batch norm or linear layer: its weights, bias and running statistics, and the widths it records.

    Args:
        layer: A convolution (``_ConvNd``), batch norm (``_BatchNorm``: its features are its outputs) or
            ``nn.Linear``.
        outputs: Output channels to keep (the weight's first dimension). (default: ``None``, all)
        inputs: Input channels to keep, of one group of a grouped convolution (the weight's second dimension);
            the convolution's ``in_channels`` becomes ``len(inputs) * groups``, so a caller changing the groups
            sets ``groups`` first. (default: ``None``, all)
    """

    def kept(tensor: torch.Tensor | None, *indices: torch.Tensor | None) -> torch.Tensor | None:
        if tensor is None:
            return None
        for dim, index in enumerate(indices):
            if index is not None:
                tensor = tensor.index_select(dim, index.to(tensor.device))
        return tensor.clone(memory_format=torch.contiguous_format)

    if isinstance(layer, _BatchNorm):
        if inputs is not None:
            raise ValueError(f"a batch norm has features, not input channels; pass them as outputs (got {inputs})")
        if outputs is None:
            return
        for name in ("weight", "bias"):
            if getattr(layer, name) is not None:
                setattr(layer, name, nn.Parameter(kept(getattr(layer, name), outputs)))
        for name in ("running_mean", "running_var"):
            if getattr(layer, name) is not None:
                setattr(layer, name, kept(getattr(layer, name), outputs))
        layer.num_features = len(outputs)
    elif isinstance(layer, (_ConvNd, nn.Linear)):
        layer.weight = nn.Parameter(kept(layer.weight, outputs, inputs))
        if layer.bias is not None:
            layer.bias = nn.Parameter(kept(layer.bias, outputs))
        out_channels, in_channels = layer.weight.shape[:2]
        if isinstance(layer, nn.Linear):
            layer.in_features, layer.out_features = in_channels, out_channels
        else:
            layer.in_channels, layer.out_channels = in_channels * layer.groups, out_channels
    else:
        raise TypeError(f"keep_channels_ takes a convolution, batch norm or linear layer, got {type(layer).__name__}")


def strongest_filters(conv: _ConvNd, count: int) -> torch.Tensor:
    """Indices of the ``count`` output filters of ``conv`` with the largest L1 norm, in ascending order (the
    criterion of Li et al. 2017, "Pruning Filters for Efficient ConvNets"); of equal norms, the leading filters.
    All of them, in order, when ``count`` is the convolution's ``out_channels``."""
    if not 1 <= count <= conv.out_channels:
        raise ValueError(f"cannot keep {count} of the {conv.out_channels} filters of a {type(conv).__name__}")
    norms = conv.weight.detach().abs().flatten(1).sum(dim=1)
    return torch.argsort(norms, descending=True, stable=True)[:count].sort().values


def _leading(count: int) -> torch.Tensor:
    return torch.arange(count)


@torch.no_grad()
def narrow_(block: nn.Module, width: float) -> None:
    """Narrows every layer of ``block`` in place, keeping the leading channels of its weights."""
    check_narrowable(block, width, type(block).__name__)
    for module in block.modules():
        if isinstance(module, _ConvNd):
            in_channels, out_channels, groups = _narrowed_conv(module, width, "")
            module.groups = groups
            keep_channels_(module, outputs=_leading(out_channels), inputs=_leading(in_channels // groups))
        elif isinstance(module, _BatchNorm):
            keep_channels_(module, outputs=_leading(_scaled(module.num_features, width)))
        elif isinstance(module, nn.Linear):
            outputs, inputs = (
                _leading(_scaled(module.out_features, width)),
                _leading(_scaled(module.in_features, width)),
            )
            keep_channels_(module, outputs=outputs, inputs=inputs)
