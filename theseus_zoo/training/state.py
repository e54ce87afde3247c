"""A run's checkpointed state, typed and versioned: what is done (`StageRecord` per stage), the stage in progress
(`StageProgress`), the recipe and the number of processes it ran with.

The checkpoint file holds `RunState.to_dict`: plain containers and tensors, so that
``torch.load(weights_only=True)`` reads it (`theseus_zoo.training.checkpoints`). `RunState.from_dict` reads every
layout written so far: version 1 is the first with a ``version`` field; a checkpoint without one (theseus 0.1.0 and
later, before the field) has the same keys, some of a stage in progress missing (``stop``, ``seconds``), which load
at their defaults. Version 2 adds how the run was spread over the ranks (``parallel``) and, under FSDP2, the
sharded checkpoint directory of the stage in progress and of its best state (``sharded``), which then hold the
weights and optimizer state in place of the file (`theseus_zoo.training.sharding`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .checkpoints import read_checkpoint

STATE_VERSION = 2
"""The layout `RunState.to_dict` writes."""

Weights = dict[str, torch.Tensor]


@dataclass
class StageRecord:
    """A finished stage: its best state's ``weights``, dev metric and step, the ``steps`` it ran and its ``seconds``
    of wall-clock (evaluations included), the RNG where the next draw starts (``None`` for a borrowed predecessor)
    and, for a predecessor taken with ``--predecessor-from``, the run it came from (``source``)."""

    weights: Weights | None
    best_metric: float
    best_step: int
    steps: int
    seconds: float
    rng: dict[str, Any] | None = None
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        record = {
            "weights": self.weights,
            "best_metric": self.best_metric,
            "best_step": self.best_step,
            "steps": self.steps,
            "seconds": self.seconds,
        }
        if self.rng is not None:
            record["rng"] = self.rng
        if self.source is not None:
            record["from"] = self.source
        return record

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageRecord:
        return cls(
            data["weights"],
            data["best_metric"],
            data["best_step"],
            data["steps"],
            data["seconds"],
            data.get("rng"),
            data.get("from"),
        )

    def summary(self) -> dict[str, Any]:
        """What a report says of the stage: everything but its weights and RNG."""
        return {key: value for key, value in self.to_dict().items() if key not in ("weights", "rng")}


@dataclass
class Best:
    """The best dev state of a stage in progress, and how many evaluations at p = 1 have not beaten it; under
    FSDP2 its weights are in the sharded checkpoint directory ``sharded`` instead."""

    metric: float = -float("inf")
    step: int = 0
    weights: Weights | None = None
    evaluations_since: int = 0
    sharded: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "step": self.step,
            "weights": self.weights,
            "evaluations_since": self.evaluations_since,
            "sharded": self.sharded,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Best:
        return cls(data["metric"], data["step"], data["weights"], data["evaluations_since"], data.get("sharded"))


@dataclass
class StageProgress:
    """The stage in progress at the last checkpoint: its name (``phase``), the step reached, the model's and the
    optimizer's state, the routing state of a Theseus stage, the RNG, the best state so far, whether early
    stopping decided at that evaluation (``stop``) and the wall-clock spent; under FSDP2 the weights and optimizer
    state are empty and ``sharded`` names the directory that holds them."""

    phase: str
    step: int
    weights: Weights
    optimizer: dict[str, Any]
    routing: dict[str, Any] | None
    rng: dict[str, Any]
    best: Best
    stop: bool = False
    seconds: float = 0.0
    sharded: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "step": self.step,
            "weights": self.weights,
            "optimizer": self.optimizer,
            "routing": self.routing,
            "rng": self.rng,
            "best": self.best.to_dict(),
            "stop": self.stop,
            "seconds": self.seconds,
            "sharded": self.sharded,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageProgress:
        return cls(
            data["phase"],
            data["step"],
            data["weights"],
            data["optimizer"],
            data["routing"],
            data["rng"],
            Best.from_dict(data["best"]),
            data.get("stop", False),  # checkpoints of theseus 0.1.0 have neither
            data.get("seconds", 0.0),
            data.get("sharded"),
        )


@dataclass
class RunState:
    """Everything a run needs to resume: the finished stages by name, the stage in progress, the recipe as
    `Recipe.to_dict` wrote it, the number of processes and how the stages were spread over them (``parallel``:
    ``"ddp"`` or ``"fsdp"``), and the length of ``metrics.jsonl`` at the checkpoint (a resume cuts what was logged
    after it)."""

    done: dict[str, StageRecord] = field(default_factory=dict)
    current: StageProgress | None = None
    recipe: dict[str, Any] | None = None
    processes: int = 1
    metrics_bytes: int = 0
    search: dict[str, Any] | None = None
    """A budget search's outcome (`theseus_zoo.training.search`), so that a resumed run keeps its choice."""
    parallel: str = "ddp"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "done": {name: record.to_dict() for name, record in self.done.items()},
            "current": None if self.current is None else self.current.to_dict(),
            "recipe": self.recipe,
            "processes": self.processes,
            "metrics_bytes": self.metrics_bytes,
            "search": self.search,
            "parallel": self.parallel,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        """A state of any layout written so far (module doc). Raises `ValueError` for a newer one."""
        version = data.get("version", 1)
        if version > STATE_VERSION:
            raise ValueError(
                f"the checkpoint was written by a newer theseus (state version {version} > {STATE_VERSION}): "
                "update theseus to resume it"
            )
        current = data.get("current")
        return cls(
            {name: StageRecord.from_dict(record) for name, record in data.get("done", {}).items()},
            None if current is None else StageProgress.from_dict(current),
            data.get("recipe"),
            data.get("processes", 1),
            data.get("metrics_bytes", 0),
            data.get("search"),
            data.get("parallel", "ddp"),
        )


def read_state(path: Path) -> RunState:
    """The run state in the checkpoint file ``path`` (checked: `theseus_zoo.training.checkpoints.read_checkpoint`)."""
    return RunState.from_dict(read_checkpoint(path))
