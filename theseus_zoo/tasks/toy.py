"""The toy family: a residual MLP on a synthetic 4-class problem, runnable anywhere in seconds.

Labels come from a fixed random teacher network, so the problem is learnable
but not trivial. The default recipe ``toy`` compresses 8 blocks to 3 (groups 3,
3, 2) and is what ``make demo`` runs until the BERT recipe lands::

    theseus compress --recipe toy --out runs/toy
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import theseus_core as th
from theseus_core.testing import ToyStack

from . import ScoresAccuracy
from .exported import hold_export
from .options import parse_options

NUM_FEATURES, NUM_CLASSES = 16, 4
SPLITS = {"train": 4000, "dev": 1000, "test": 1000}


def make_data(seed: int) -> dict[str, list[tuple[torch.Tensor, int]]]:
    """Inputs ~ N(0, I); label = argmax of a fixed random two-layer teacher. Same data for every seed of
    the recipe (the data seed is fixed), so seeds vary only training."""
    generator = torch.Generator().manual_seed(1234)
    teacher_in = torch.randn(NUM_FEATURES, 64, generator=generator)
    teacher_out = torch.randn(64, NUM_CLASSES, generator=generator)
    inputs = torch.randn(sum(SPLITS.values()), NUM_FEATURES, generator=generator)
    labels = (torch.tanh(inputs @ teacher_in) @ teacher_out).argmax(dim=1)
    data, start = {}, 0
    for split, size in SPLITS.items():
        data[split] = list(zip(inputs[start : start + size], labels[start : start + size].tolist(), strict=True))
        start += size
    return data


@dataclass(frozen=True)
class ToyOptions:
    """The toy family's options: the predecessor's ``num_blocks`` of ``width``, compressed to ``num_layers``
    blocks in groups of ``group_sizes`` (default: as even as possible), ``dropout`` in every block."""

    num_blocks: int = field(default=8, metadata={"min": 2})
    width: int = field(default=64, metadata={"min": 1})
    num_layers: int = field(default=3, metadata={"min": 1})
    group_sizes: tuple[int, ...] | None = None
    dropout: float = field(default=0.1, metadata={"min": 0, "max": 1})


class ToyTask(ScoresAccuracy):
    """`Task` for `ToyStack` predecessors; options in `ToyOptions`."""

    compression_options = ("num_layers", "group_sizes")

    def __init__(self, options: dict[str, Any], seed: int) -> None:
        parsed = parse_options(ToyOptions, options, "toy")
        self.num_blocks, self.width, self.dropout = parsed.num_blocks, parsed.width, parsed.dropout
        self.num_layers, self.group_sizes = parsed.num_layers, parsed.group_sizes
        self.data = make_data(seed)
        self._labels: dict[str, torch.Tensor] = {}

    def check(self) -> None:
        if not 1 <= self.num_layers < self.num_blocks:
            raise ValueError(f"num_layers must be in [1, num_blocks={self.num_blocks}), got {self.num_layers}")
        th.group_sizes_for(self.num_blocks, self.num_layers, self.group_sizes)

    def config(self, num_blocks: int) -> dict[str, Any]:
        return {
            "in_features": NUM_FEATURES,
            "width": self.width,
            "num_blocks": num_blocks,
            "num_classes": NUM_CLASSES,
            "dropout": self.dropout,
        }

    def build_predecessor(self) -> nn.Module:
        return ToyStack(**self.config(self.num_blocks))

    def dataset(self, split: str) -> list[tuple[torch.Tensor, int]]:
        return self.data[split]

    def collate(self, examples: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, labels = zip(*examples, strict=True)
        return torch.stack(inputs), torch.tensor(labels)

    def criterion(self, logits: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(logits, batch[1])

    def is_head(self, name: str) -> bool:
        return name.startswith("head.")

    def logits(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return model(batch[0])

    @torch.no_grad()
    def predictions(self, model: nn.Module, split: str) -> torch.Tensor:
        """The predicted class of every example of the split."""
        model.eval()
        inputs, _ = self.collate(self.data[split])
        return model(inputs.to(_device(model))).argmax(dim=1).float().cpu()

    def labels(self, split: str) -> torch.Tensor:
        if split not in self._labels:  # scored a thousand times over by the bootstrap: built once
            self._labels[split] = self.collate(self.data[split])[1].float()
        return self._labels[split]

    def plan(self, model: nn.Module) -> th.Plan:
        if self.group_sizes is not None:
            return th.plan(model, "blocks", group_sizes=self.group_sizes, successor=th.copy_module(0))
        return th.plan(model, "blocks", num_groups=self.num_layers, successor=th.copy_module(0))

    def candidates(self, model: nn.Module) -> tuple[dict[str, list[th.ModuleSpec]], Any]:
        """`OffersCandidates`: per group of the plan, ``keep``, ``skip`` and ``one`` (the plan's copied block); any
        choice finalizes into a `ToyStack` of fewer blocks (`theseus_core.candidates.splice_`)."""
        from theseus_core.candidates import splice_

        base = self.plan(model)
        found = {"keep": th.keep_specs(base), "skip": th.skip_specs(base), "one": list(base)}
        return found, lambda model: splice_(model.blocks)

    def truncated(self, predecessor: nn.Module) -> nn.Module:
        model = copy.deepcopy(predecessor)
        model.blocks = nn.Sequential(*list(model.blocks)[: self.num_layers])
        return model

    def scratch(self) -> nn.Module:
        return ToyStack(**self.config(self.num_layers))

    def latency_batch(self) -> torch.Tensor:
        return self.collate(self.data["test"])[0]

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(batch)

    def example_inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """What `replace_` runs the model on to verify the surgery: ``model(*args, **kwargs)``."""
        return (self.latency_batch()[:8],), {}

    def export(self, model: nn.Module, directory: Path) -> list[Path]:
        """``model.pt`` (a state_dict) and ``config.json``: ``ToyStack(**config)`` loads it with strict=True, and
        computes what ``model`` does, or the export refuses (`theseus_zoo.tasks.exported.hold_export`)."""
        directory.mkdir(parents=True, exist_ok=True)
        weights, config = directory / "model.pt", directory / "config.json"
        torch.save(model.state_dict(), weights)
        config.write_text(json.dumps(self.config(len(model.blocks)), indent=2) + "\n")

        def reload() -> nn.Module:
            reloaded = ToyStack(**json.loads(config.read_text()))
            reloaded.load_state_dict(torch.load(weights, weights_only=True), strict=True)
            return reloaded

        return hold_export([weights, config], model, reload, self.forward, self.latency_batch())


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device
