"""The `Task` protocol: what a model family gives the trainer, and the family registry.

A family (toy, BERT, ResNet, GNN, causal LM) knows how to build its predecessor, load its
data, batch it, compute the loss and the metrics, make the plan and the
baselines, and export. The trainer knows nothing else about models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

import theseus_core as th
from theseus_zoo.registry import Registry


class Task(Protocol):
    """One family's side of a compression run. ``metric`` names the dev/test metric (higher is better)."""

    metric: str

    def check(self) -> None:
        """Raises `ValueError` with what to do when the options or assets are wrong, before any training."""

    def build_predecessor(self) -> nn.Module: ...

    def dataset(self, split: str) -> Sequence[Any]:
        """Examples of ``"train"``, ``"dev"`` or ``"test"``."""

    def collate(self, examples: list[Any]) -> Any:
        """A batch from examples (tensors on the CPU; the trainer moves them)."""

    def logits(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """The model's outputs on a training batch as ``(examples, classes)`` logits (``(examples, 1)`` for
        regression): what the loss scores and the ``kd`` baseline distils."""

    def criterion(self, logits: torch.Tensor, batch: Any) -> torch.Tensor:
        """The task loss of ``logits`` (from `logits`) against the batch's labels: one forward serves the task loss
        and any distillation term."""

    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        """Metrics of ``model`` (in eval mode) on a split; includes ``self.metric``."""

    # Optional capabilities, each a runtime-checkable protocol in `theseus_zoo.tasks.protocols` that the trainer
    # asks with isinstance: `ScoresExamples` (per-example predictions: bootstrap errors and paired comparisons),
    # `HasHead` (unfreeze_at_one="head"), `ReplaceOptions`, `ExampleInputs` (replace_ verifies the surgery on
    # them), `CompressionOptions` (what --predecessor-from ignores), `Refinable` (a recipe's refine phase),
    # `BuildsDirect` (the direct baseline) and `ReadsAssets` (what a campaign checks is fetched before it starts).

    def plan(self, model: nn.Module) -> th.Plan: ...

    def truncated(self, predecessor: nn.Module) -> nn.Module:
        """The baseline of the successor's size, initialised from the predecessor's layers the successors start from
        (the plan's ``init``: the bottom layers for the paper's ``"first"``, each group's last for ``"group_last"``)."""

    def scratch(self) -> nn.Module:
        """The successor's architecture, randomly initialised (the ``scratch`` baseline)."""

    def latency_batch(self) -> Any:
        """A batch for timing inference."""

    def forward(self, model: nn.Module, batch: Any) -> Any: ...

    def export(self, model: nn.Module, directory: Path) -> list[Path]:
        """Writes the compact model in the family's ordinary format; returns the files written."""


class ScoresAccuracy:
    """For a task whose metric is the accuracy of per-example class ids: ``scores_examples``, `score` and
    `evaluate` from the task's own ``predictions(model, split)`` and ``labels(split)`` (the optional half of
    `Task`)."""

    metric = "accuracy"
    scores_examples = True

    def predictions(self, model: nn.Module, split: str) -> torch.Tensor:
        raise NotImplementedError

    def labels(self, split: str) -> torch.Tensor:
        raise NotImplementedError

    def score(self, predictions: torch.Tensor, split: str, chosen: torch.Tensor | None = None) -> dict[str, float]:
        """The accuracy of ``predictions`` on the split (on the examples ``chosen``, repeats allowed, when given)."""
        labels = self.labels(split)
        if chosen is not None:
            predictions, labels = predictions[chosen], labels[chosen]
        return {"accuracy": (predictions == labels).float().mean().item()}

    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        return self.score(self.predictions(model, split), split)


BUILT_IN_FAMILIES = {
    "toy": "theseus_zoo.tasks.toy:ToyTask",
    "bert": "theseus_zoo.tasks.text:TextClassificationTask",
    "resnet": "theseus_zoo.tasks.images:ResNetTask",
    "gnn": "theseus_zoo.tasks.graphs:GraphTask",
    "causal_lm": "theseus_zoo.tasks.causal_lm:CausalLMTask",
}
"""Family name -> ``module:builder``, imported when a run first needs the family (each imports its model library)."""

FAMILY_EXTRAS = {
    "toy": ("zoo",),
    "bert": ("zoo", "bert", "text"),
    "resnet": ("zoo", "vision"),
    "gnn": ("zoo", "gnn"),
    "causal_lm": ("zoo", "llm", "text"),
}
"""The pip extras (``pip install -e '.[zoo,bert,text]'``) a built-in family's runs need: what `theseus compress`
names when a module is missing, and the recipe table of the documentation."""

ENTRY_POINT_GROUP = "theseus_zoo.families"
"""Other packages add families as entry points in this group: ``name = "package.module:builder"``."""

FamilyBuilder = Callable[[dict[str, Any], int], Task]
"""``builder(options, seed) -> Task``: what a family registers."""

FAMILIES: Registry[FamilyBuilder] = Registry(
    "model family", entry_point_group=ENTRY_POINT_GROUP, entry_points="entries", built_in=BUILT_IN_FAMILIES
)
"""Every family's ``builder(options, seed) -> Task`` by name: built in, registered, and from entry points."""


def register_family(name: str) -> Callable[[FamilyBuilder], FamilyBuilder]:
    """Registers ``builder(options, seed) -> Task`` under ``name``; a name already registered or built in raises
    `KeyError`."""

    def decorator(builder: FamilyBuilder) -> FamilyBuilder:
        return FAMILIES.register(name, builder)

    return decorator


def family_names() -> list[str]:
    """Every family a recipe may name: built in, registered, and from entry points."""
    return FAMILIES.names()


def family_builder(family: str) -> FamilyBuilder:
    """The builder of ``family``; imports its module the first time. Raises `ValueError` for an unknown name."""
    return FAMILIES.get(family)


def build_task(family: str, options: dict[str, Any], seed: int) -> Task:
    """The family's `Task` for a recipe's options and seed."""
    return family_builder(family)(dict(options), seed)
