"""What a family's `Task` may give beyond the required half: each capability a runtime-checkable protocol.

The trainer asks ``isinstance(task, Capability)`` instead of probing attributes by name, so that a capability is
declared once, here, with its contract; a family gives a capability by having its members (no base class needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn


@runtime_checkable
class ScoresExamples(Protocol):
    """Per-example predictions, so that reports carry bootstrap standard errors and paired comparisons.

    ``scores_examples`` may be a property: ``False`` for options whose test score is not a function of per-example
    predictions (GLUE's, which may span two splits)."""

    scores_examples: bool

    def predictions(self, model: nn.Module, split: str) -> torch.Tensor:
        """A 1-d tensor: class ids, or regression values, in the split's order."""

    def labels(self, split: str) -> torch.Tensor:
        """A 1-d float tensor of the split's labels, in the same order."""

    def score(self, predictions: torch.Tensor, split: str, chosen: torch.Tensor | None = None) -> dict[str, float]:
        """The metrics of ``predictions`` (of the examples ``chosen``, indices with repeats, when given)."""


@runtime_checkable
class HasHead(Protocol):
    """Which parameters are the head (pooler and classifier), for ``unfreeze_at_one="head"``."""

    def is_head(self, name: str) -> bool: ...


@runtime_checkable
class ReplaceOptions(Protocol):
    """Keyword arguments of `theseus_core.replace_` for the replacing phase (e.g. ``predecessor_eval``)."""

    replace_options: dict[str, Any]


@runtime_checkable
class ExampleInputs(Protocol):
    """Inputs that `theseus_core.replace_` runs the model on to verify the surgery (it refuses a wrong one)."""

    def example_inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]: ...


@runtime_checkable
class CompressionOptions(Protocol):
    """Names of the options that shape only the successor: ``--predecessor-from`` ignores them."""

    compression_options: tuple[str, ...]


@runtime_checkable
class Refinable(Protocol):
    """A final form after a first phase (BinaryBERT: ternary weight splitting), for a recipe's ``refine`` phase.

    ``refinement`` says what `refine_` does, or is ``None`` when these options leave nothing to refine;
    ``refine_(model)`` turns a compressed model into its final form in place, deterministically (a resumed run
    rebuilds the same structure)."""

    refinement: str | None

    def refine_(self, model: nn.Module) -> None: ...


@runtime_checkable
class BuildsDirect(Protocol):
    """The refined form built directly from the predecessor: the ``direct`` baseline."""

    def direct(self, predecessor: nn.Module) -> nn.Module: ...


@runtime_checkable
class ShardsLayers(Protocol):
    """The modules of a model of the family that FSDP2 shards one by one (``theseus compress --parallel fsdp``,
    `theseus_zoo.training.sharding`): its layers, for the predecessor, a baseline, and a model under replacement
    (there, each predecessor layer and each successor), none inside another. What is outside them (embeddings,
    head) is sharded as one unit."""

    def shard_units(self, model: nn.Module) -> list[nn.Module]: ...


@runtime_checkable
class ExportsOnnx(Protocol):
    """The family's exported model (what `Task.export` wrote in ``model_dir``) as ONNX files in ``out``, each
    verified in ONNX Runtime (`theseus_zoo.export.onnx.export_onnx`): what ``theseus export --onnx`` runs. Raises
    `theseus_zoo.export.onnx.ExportRefusedError` in one line when the model has no ONNX form."""

    def export_onnx(self, model_dir: Path, out: Path) -> list[Any]: ...


@runtime_checkable
class OffersCandidates(Protocol):
    """What a budget search (`Recipe.budget`, `theseus_core.search`) may put in place of each group of the family's
    plan: name -> one `theseus_core.ModuleSpec` per group the candidate exists for (``keep`` and ``skip`` among
    them where they fit), and the hook that finalizes any choice into the family's ordinary model (or ``None``)."""

    def candidates(self, model: nn.Module) -> tuple[dict[str, list[Any]], Any]: ...


@runtime_checkable
class DescribesData(Protocol):
    """What a run on the user's own data read and inferred, printed before it trains and kept in its report."""

    def describe_data(self) -> str | None:
        """The file, its columns, classes and split (and rows dropped); ``None`` for a built-in dataset."""

    def label_inference(self) -> str | None:
        """What was inferred about the labels when the options left them out, as a line; else ``None``."""

    def data_warnings(self) -> tuple[str, ...]:
        """Lines to warn about in the user's data (a class with few examples); ``()`` for a built-in dataset."""


@runtime_checkable
class ReadsAssets(Protocol):
    """The assets (`theseus_zoo.data.assets`, ``theseus fetch NAME``) these options read, model and data: what a
    campaign checks before it starts any run, and what the GPU path carries. Known from the options alone (nothing
    is loaded); ``()`` when the options name local files or a hub."""

    assets: tuple[str, ...]


def scores_examples(task: object) -> bool:
    """Whether ``task`` gives per-example predictions for these options (`ScoresExamples`)."""
    return isinstance(task, ScoresExamples) and bool(task.scores_examples)


def refinement(task: object) -> str | None:
    """What ``task`` refines with these options, or ``None`` (`Refinable`)."""
    return task.refinement if isinstance(task, Refinable) else None


def assets_read(task: object) -> tuple[str, ...]:
    """The assets ``task`` reads with its options (`ReadsAssets`); ``()`` for a task that does not say."""
    return tuple(task.assets) if isinstance(task, ReadsAssets) else ()
