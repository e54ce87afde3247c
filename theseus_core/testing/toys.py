"""Toy models with ``example_inputs()``, for tests and examples; they need nothing beyond torch.

- `ToyStack`: residual MLP blocks, in an ``nn.Sequential`` or in an ``nn.ModuleList``
  whose blocks take an extra argument and return tuples, like Hugging Face layers.
- `ToyConvNet`: residual conv / batch-norm blocks.
"""

from __future__ import annotations

import torch
from torch import nn


class ToyBlock(nn.Module):
    """Pre-norm residual MLP block: ``x + scale · dropout(W2 relu(W1 LN(x))))``.

    Args:
        width: Feature width in and out.
        hidden: Width of the inner layer. (default: ``2 * width``)
        dropout: Dropout probability. (default: ``0.1``)
        tuple_output: Return ``(x,)`` instead of ``x``, as Hugging Face layers do.
    """

    def __init__(self, width: int, hidden: int | None = None, dropout: float = 0.1, tuple_output: bool = False):
        super().__init__()
        self.width = width
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden or 2 * width)
        self.fc2 = nn.Linear(hidden or 2 * width, width)
        self.dropout = nn.Dropout(dropout)
        self.tuple_output = tuple_output

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor]:
        update = self.dropout(self.fc2(torch.relu(self.fc1(self.norm(x)))))
        out = x + (update if scale is None else scale * update)
        return (out,) if self.tuple_output else out


class ToyStack(nn.Module):
    """``embed → blocks → head`` over ``[batch, in_features]`` inputs.

    With ``container="sequential"`` the blocks sit in an ``nn.Sequential``; with
    ``"list"`` they sit in an ``nn.ModuleList`` and are called in a loop with an
    extra ``scale`` argument and tuple outputs, like a transformer encoder.
    """

    def __init__(
        self,
        in_features: int = 8,
        width: int = 16,
        num_blocks: int = 4,
        num_classes: int = 3,
        dropout: float = 0.1,
        container: str = "sequential",
    ):
        super().__init__()
        if container not in ("sequential", "list"):
            raise ValueError(f"container must be 'sequential' or 'list', got {container!r}")
        self.in_features = in_features
        self.container = container
        self.embed = nn.Linear(in_features, width)
        blocks = [ToyBlock(width, dropout=dropout, tuple_output=container == "list") for _ in range(num_blocks)]
        self.blocks = nn.Sequential(*blocks) if container == "sequential" else nn.ModuleList(blocks)
        self.head = nn.Linear(width, num_classes)
        self.register_buffer("scale", torch.tensor(0.75))  # an extra argument for every block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(x)
        if self.container == "sequential":
            hidden = self.blocks(hidden)
        else:
            for block in self.blocks:
                hidden = block(hidden, scale=self.scale)[0]
        return self.head(hidden)

    def example_inputs(self, batch_size: int = 4, seed: int = 0) -> tuple[torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        return (torch.randn(batch_size, self.in_features, generator=generator),)


class ToyConvBlock(nn.Module):
    """Residual ``conv3×3 → batch norm → relu`` block on ``[batch, channels, H, W]``."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.bn(self.conv(x)))


class ToyConvNet(nn.Module):
    """``stem → blocks → pool → head`` over ``[batch, 3, size, size]`` images."""

    def __init__(self, channels: int = 8, num_blocks: int = 4, num_classes: int = 3, size: int = 8):
        super().__init__()
        self.size = size
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.Sequential(*(ToyConvBlock(channels) for _ in range(num_blocks)))
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))

    def example_inputs(self, batch_size: int = 4, seed: int = 0) -> tuple[torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        return (torch.randn(batch_size, 3, self.size, self.size, generator=generator),)
