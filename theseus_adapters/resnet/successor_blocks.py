"""Light blocks that stand in for a group of ResNet blocks, and the config that rebuilds a ResNet holding them.

The paper's future work names heterogeneous successors ("ShuffleNet unit for ResBlock"). Four kinds,
each mapping ``in_channels`` to ``out_channels`` at a ``stride`` (1 or 2), as the group it replaces does:

- `InvertedResidual` (``"mobilenet_v2"``, Sandler et al. 2018): 1×1 expansion, 3×3 depthwise, linear 1×1
  projection; a residual connection when the shape is kept.
- `ShuffleUnit` (``"shufflenet_v2"``, Ma et al. 2018): half the channels pass through, the other half take
  1×1 → 3×3 depthwise → 1×1, then the halves are concatenated and shuffled; a downsampling or widening unit
  runs both halves through branches.
- `DepthwiseSeparable` (``"depthwise_separable"``): 3×3 depthwise → 1×1 with a ResNet shortcut (identity, or a
  strided 1×1 convolution and batch norm when the shape changes).
- `NarrowBasic` (``"narrow_basic"``): a ResNet BasicBlock (He et al. 2016) whose inner width is ``hidden_channels``
  (half of ``out_channels`` unless given), with the same shortcut; its layers are named as torchvision's
  BasicBlock's, so that one can start it.

Every block reports its constructor arguments (`config`), so a torchvision ResNet whose stages hold them is
described by `export_config` and rebuilt by `build_from_config` from torch and torchvision alone: this file
imports nothing of theseus, and a test rebuilds a model from it in a process that cannot import theseus.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

CONFIG_FORMAT = "theseus-light-resnet/1"


def _conv_bn(in_channels: int, out_channels: int, kernel: int, stride: int = 1, depthwise: bool = False) -> list:
    groups = in_channels if depthwise else 1
    conv = nn.Conv2d(in_channels, out_channels, kernel, stride, kernel // 2, groups=groups, bias=False)
    return [conv, nn.BatchNorm2d(out_channels)]


def _check(kind: str, in_channels: int, out_channels: int, stride: int) -> None:
    for name, value in (("in_channels", in_channels), ("out_channels", out_channels)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{kind}: {name} must be a positive integer, got {value!r}")
    if stride not in (1, 2):
        raise ValueError(f"{kind}: stride must be 1 or 2, got {stride!r}")


def _initialize_(block: nn.Module) -> None:
    """As torchvision initialises its MobileNetV2 and ShuffleNetV2: Kaiming-normal convolutions, unit norms."""
    for module in block.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


class _LightBlock(nn.Module):
    """What the light blocks share: checked widths and stride, and the config that rebuilds them."""

    kind = ""
    arguments = ("in_channels", "out_channels", "stride")  # the constructor's, in order

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        _check(self.kind, in_channels, out_channels, stride)
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride

    def config(self) -> dict[str, Any]:
        """The constructor's arguments, with ``"kind"``: what `build_block` takes."""
        return {"kind": self.kind, **{name: getattr(self, name) for name in self.arguments}}


class InvertedResidual(_LightBlock):
    """MobileNetV2's inverted residual: ``1×1 (expand) → ReLU6 → 3×3 depthwise (stride) → ReLU6 → 1×1``.

    Args:
        in_channels, out_channels: Widths of the input and the output.
        stride: Of the depthwise convolution: 1, or 2 to halve height and width. (default: ``1``)
        hidden_channels: Width inside the block. (default: ``6 * in_channels``, MobileNetV2's expansion)

    Shapes:
        ``[N, in_channels, H, W]`` → ``[N, out_channels, ceil(H / stride), ceil(W / stride)]``.
    """

    kind = "mobilenet_v2"
    arguments = ("in_channels", "out_channels", "stride", "hidden_channels")

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, hidden_channels: int | None = None):
        super().__init__(in_channels, out_channels, stride)
        hidden = self.hidden_channels = 6 * in_channels if hidden_channels is None else hidden_channels
        layers: list[nn.Module] = []
        if hidden != in_channels:
            layers += [*_conv_bn(in_channels, hidden, 1), nn.ReLU6(inplace=True)]
        layers += [*_conv_bn(hidden, hidden, 3, stride, depthwise=True), nn.ReLU6(inplace=True)]
        layers += _conv_bn(hidden, out_channels, 1)
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and in_channels == out_channels
        _initialize_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)


class ShuffleUnit(_LightBlock):
    """ShuffleNet v2's unit.

    When the shape is kept (``stride=1``, ``in_channels == out_channels``), half the channels pass through and
    the other half take ``1×1 → 3×3 depthwise → 1×1``; otherwise both halves come from branches of the whole
    input (the paper's downsampling unit, also used here to change the width at stride 1). The halves are
    concatenated and shuffled so that the next unit mixes them.

    Args:
        in_channels, out_channels: Widths of the input and the output (``out_channels`` even).
        stride: 1, or 2 to halve height and width. (default: ``1``)

    Shapes:
        ``[N, in_channels, H, W]`` → ``[N, out_channels, ceil(H / stride), ceil(W / stride)]``.
    """

    kind = "shufflenet_v2"

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__(in_channels, out_channels, stride)
        if out_channels % 2 or (stride == 1 and in_channels == out_channels and in_channels % 2):
            raise ValueError(f"{self.kind}: out_channels must be even (two halves), got {out_channels}")
        half = out_channels // 2
        self.split = stride == 1 and in_channels == out_channels
        self.branch1 = (
            nn.Sequential()
            if self.split
            else nn.Sequential(
                *_conv_bn(in_channels, in_channels, 3, stride, depthwise=True),
                *_conv_bn(in_channels, half, 1),
                nn.ReLU(inplace=True),
            )
        )
        branch_in = half if self.split else in_channels
        self.branch2 = nn.Sequential(
            *_conv_bn(branch_in, half, 1),
            nn.ReLU(inplace=True),
            *_conv_bn(half, half, 3, stride, depthwise=True),
            *_conv_bn(half, half, 1),
            nn.ReLU(inplace=True),
        )
        _initialize_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.split:
            kept, moved = x.chunk(2, dim=1)
            out = torch.cat((kept, self.branch2(moved)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        batch, channels, height, width = out.shape  # channel shuffle, two groups
        return out.view(batch, 2, channels // 2, height, width).transpose(1, 2).reshape(batch, channels, height, width)


class DepthwiseSeparable(_LightBlock):
    """A depthwise-separable residual block: ``3×3 depthwise (stride) → ReLU → 1×1``, plus the shortcut, ReLU.

    The shortcut is the identity when the shape is kept, else a 1×1 convolution at the stride and a batch
    norm (a ResNet's projection shortcut).

    Args:
        in_channels, out_channels: Widths of the input and the output.
        stride: 1, or 2 to halve height and width. (default: ``1``)

    Shapes:
        ``[N, in_channels, H, W]`` → ``[N, out_channels, ceil(H / stride), ceil(W / stride)]``.
    """

    kind = "depthwise_separable"

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__(in_channels, out_channels, stride)
        self.conv = nn.Sequential(
            *_conv_bn(in_channels, in_channels, 3, stride, depthwise=True),
            nn.ReLU(inplace=True),
            *_conv_bn(in_channels, out_channels, 1),
        )
        keeps = stride == 1 and in_channels == out_channels
        self.shortcut = nn.Sequential() if keeps else nn.Sequential(*_conv_bn(in_channels, out_channels, 1, stride))
        self.act = nn.ReLU(inplace=True)
        _initialize_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x) + self.shortcut(x))


class NarrowBasic(_LightBlock):
    """A narrower ResNet BasicBlock: ``3×3 (stride) → BN → ReLU → 3×3 → BN``, plus the shortcut, ReLU, whose
    inner width (the first convolution's output, the second's input) is ``hidden_channels``.

    The shortcut is the identity when the shape is kept, else a 1×1 convolution at the stride and a batch norm.
    The layers are named as in torchvision's ``BasicBlock`` (``conv1``, ``bn1``, ``conv2``, ``bn2``,
    ``downsample``, ``None`` for the identity) and compute as it does: at ``hidden_channels == out_channels`` it is
    a BasicBlock, and that block's state_dict loads into it.

    Args:
        in_channels, out_channels: Widths of the input and the output.
        stride: Of the first convolution and the shortcut: 1, or 2 to halve height and width. (default: ``1``)
        hidden_channels: Width inside the block. (default: ``max(1, out_channels // 2)``, half a BasicBlock's)

    Shapes:
        ``[N, in_channels, H, W]`` → ``[N, out_channels, ceil(H / stride), ceil(W / stride)]``.
    """

    kind = "narrow_basic"
    arguments = ("in_channels", "out_channels", "stride", "hidden_channels")

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, hidden_channels: int | None = None):
        super().__init__(in_channels, out_channels, stride)
        hidden = max(1, out_channels // 2) if hidden_channels is None else hidden_channels
        if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 1:
            raise ValueError(f"{self.kind}: hidden_channels must be a positive integer, got {hidden!r}")
        self.hidden_channels = hidden
        self.conv1, self.bn1 = _conv_bn(in_channels, hidden, 3, stride)
        self.relu = nn.ReLU(inplace=True)
        self.conv2, self.bn2 = _conv_bn(hidden, out_channels, 3)
        keeps = stride == 1 and in_channels == out_channels
        self.downsample = None if keeps else nn.Sequential(*_conv_bn(in_channels, out_channels, 1, stride))
        _initialize_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


BLOCKS: dict[str, type[nn.Module]] = {
    cls.kind: cls for cls in (InvertedResidual, ShuffleUnit, DepthwiseSeparable, NarrowBasic)
}
"""The light blocks by kind: the names ``theseus_adapters.resnet`` registers them under."""


def build_block(config: dict[str, Any]) -> nn.Module:
    """A light block from its `config` (``{"kind": "mobilenet_v2", "in_channels": 64, ...}``)."""
    arguments = dict(config)
    kind = arguments.pop("kind", None)
    if kind not in BLOCKS:
        raise ValueError(f"unknown light block kind {kind!r}; the kinds are {sorted(BLOCKS)}")
    return BLOCKS[kind](**arguments)


def export_config(model: nn.Module) -> dict[str, Any]:
    """A JSON-able description of a torchvision ResNet whose stages may hold light blocks.

    It holds the arguments of ``torchvision.models.resnet.ResNet`` (block type, blocks per stage, classes,
    groups, width per group) and, per stage, the `config` of every light block (``None`` for a plain block,
    which the ResNet constructor builds as it was). The config is checked before it is returned: the model it
    builds must load ``model``'s state_dict with ``strict=True``.

    Raises:
        ValueError: not a torchvision ResNet, or a stage holds a module that is neither a plain block of the
            model's type nor a light block (a narrowed ``Projected`` successor, say).
    """
    from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

    if not isinstance(model, ResNet):
        raise ValueError(f"export_config describes torchvision ResNets, got {type(model).__name__}")
    stages, plain = [], set()
    for index in range(1, 5):
        entries = []
        for position, block in enumerate(getattr(model, f"layer{index}")):
            if isinstance(block, tuple(BLOCKS.values())):
                entries.append(block.config())
            elif type(block) in (BasicBlock, Bottleneck):
                plain.add(type(block).__name__)
                entries.append(None)
            else:
                raise ValueError(
                    f"layer{index}[{position}] is a {type(block).__name__}: only torchvision's blocks and the light "
                    f"blocks ({', '.join(BLOCKS)}) can be described"
                )
        stages.append(entries)
    if len(plain) > 1:
        raise ValueError("the model mixes BasicBlock and Bottleneck stages; the ResNet constructor takes one type")
    block_type = plain.pop() if plain else _original_block(model)
    config = {
        "format": CONFIG_FORMAT,
        "block": block_type,
        "layers": [len(entries) for entries in stages],
        "num_classes": model.fc.out_features,
        "groups": model.groups,
        "width_per_group": model.base_width,
        "stages": stages,
    }
    build_from_config(config).load_state_dict(model.state_dict(), strict=True)  # raises if it does not rebuild
    return config


def _original_block(model: nn.Module) -> str:
    """The block type a ResNet whose stages are all light blocks was built with, from its head's width."""
    from torchvision.models.resnet import Bottleneck

    return "Bottleneck" if model.fc.in_features == 512 * Bottleneck.expansion else "BasicBlock"


def build_from_config(config: dict[str, Any]) -> nn.Module:
    """The model `export_config` described, freshly initialised: load its state_dict next.

    Builds ``torchvision.models.resnet.ResNet`` with the config's arguments, then puts a light block from
    `build_block` wherever a stage's entry is not ``None``; a stage of no blocks (every group of it skipped by a
    budget search, where it keeps its shape) is an empty ``nn.Sequential``, the identity, which the ResNet
    constructor cannot build.
    """
    from torchvision.models import resnet

    if config.get("format") != CONFIG_FORMAT:
        raise ValueError(f"not a {CONFIG_FORMAT} config (format {config.get('format')!r})")
    model = resnet.ResNet(
        getattr(resnet, config["block"]),
        [max(1, blocks) for blocks in config["layers"]],
        num_classes=config["num_classes"],
        groups=config["groups"],
        width_per_group=config["width_per_group"],
    )
    for index, entries in enumerate(config["stages"], start=1):
        if not entries:
            setattr(model, f"layer{index}", nn.Sequential())
            continue
        stage = getattr(model, f"layer{index}")
        for position, entry in enumerate(entries):
            if entry is not None:
                stage[position] = build_block(entry)
    return model
