"""What one run holds while it trains: its directory opened, checked and locked, the ranks, the checkpointed state
(`theseus_zoo.training.state.RunState`), and the dev evaluation every rank agrees on; its random streams
(`theseus_zoo.training.rng.RunRng`) and its metrics log (`theseus_zoo.training.metrics_log.MetricsLog`) are parts
of their own.

`Session.open` checks everything before anything is written (the ranks agree on the recipe and on how to spread it over
them, the directory is free or resumable and writable, batches divide among the ranks, the family can do what the recipe
asks, a borrowed predecessor fits, and the caller's checks: the methods' and the budget's), then rank 0 alone takes the
lock and writes; the others wait where its files or its word are needed (`theseus_zoo.training.ranks`), except that
under FSDP2 every rank writes its shards of each checkpoint (`theseus_zoo.training.sharding`).
`theseus_zoo.training.loop` trains a stage through it; `theseus_zoo.training.run` orchestrates the stages.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, DistributedDataParallelKwargs
from torch import nn

import theseus_core as th

from ..errors import ONE_LINE_ERRORS
from ..methods import parse_method
from ..recipes import Phase, Recipe
from ..tasks import Task, build_task
from ..tasks.protocols import BuildsDirect, CompressionOptions, ShardsLayers, refinement
from . import ranks
from .checkpoints import read_checkpoint, write_checkpoint
from .data_order import labelled_split
from .metrics_log import MetricsLog
from .rng import RunRng
from .run_directory import (
    CHECKPOINT,
    RunError,
    RunLock,
    check_writable,
    data_changed,
    finished_predecessor,
    has_checkpoint,
    recipe_changes,
    repair_metrics,
)
from .sharding import DataParallel, Parallelism, parallel_for, prune_sharded
from .state import RunState, StageProgress, StageRecord

FINISHED_FILES = ("report.json", "report.md", "metrics.jsonl", "model", "curves.png", "search.png")
"""What a run leaves in its directory beside the checkpoint: a fresh run refuses a directory that holds any."""


def atomic_save(obj: Any, path: Path) -> None:
    """A checksummed checkpoint through a temporary file and a rename (`theseus_zoo.training.checkpoints`): a crash
    never leaves half a file, and the checkpoint it replaces is kept as ``<path>.previous``."""
    write_checkpoint(obj, path)


class Session:
    """One run's directory, ranks, state and logs (see the module doc). Build it with `Session.open`."""

    def __init__(self, recipe: Recipe, out: Path, progress: bool, parallelism: Parallelism | None = None) -> None:
        self.recipe, self.out, self.progress = recipe, Path(out), progress
        self.parallelism = parallelism or Parallelism()
        self.accelerator = Accelerator(  # writes nothing; under torchrun, joins the process group
            cpu=not torch.cuda.is_available(),
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],  # one branch per step
        )
        self.main, self.processes = self.accelerator.is_main_process, self.accelerator.num_processes
        rank, device = self.accelerator.process_index, self.accelerator.device
        self.rng = RunRng(recipe.seed, rank, self.processes, device)
        self.state = RunState()
        self.task: Task
        self.parallel: DataParallel  # once the ranks agree that the run can start (`parallel_for`)
        self._sharded_kept: set[str] = set()  # the sharded directories the previous checkpoint names
        self.lock: RunLock | None = None
        self.metrics: MetricsLog | None = None  # once the directory is checked and locked

    @classmethod
    def open(
        cls,
        recipe: Recipe,
        out: Path,
        *,
        resume: bool,
        progress: bool,
        predecessor_from: Path | None,
        parallelism: Parallelism | None = None,
        check: Callable[[Session], None] | None = None,
    ) -> Session:
        """Checks, then opens the run directory (see the module doc); raises `RunError` (every rank alike) before
        any write when something is wrong. ``parallelism``: DDP (the default) or FSDP2. ``check``: the caller's own
        checks, given the session with its task built, run on every rank after the session's and before any
        write; it reads only and raises `ValueError` with a one-line message."""
        session = cls(recipe, out, progress, parallelism)
        spread = dataclasses.asdict(session.parallelism)
        mismatch = ranks.disagreement(ranks.all_gather({**recipe.to_dict(), "parallel": spread}))
        if mismatch is not None:  # before any collective that different recipes would leave waiting
            raise RunError(
                f"the {session.processes} processes were given different recipes ({mismatch}); give every process "
                f"the same --recipe, --config and flags",
                on_every_rank=True,
                quiet=not session.main,
            )
        with session.together():  # every rank checks, reading only
            borrowed = session._check(resume, predecessor_from)
            if check is not None:
                check(session)
        session.parallel = parallel_for(session.parallelism, session.accelerator, session.task)  # every rank
        # --- nothing above this line writes anything; below, rank 0 alone writes ---
        state, processes = session.state, session.processes
        if resume and state.processes != processes and session.main:
            print(
                f"theseus: warning: the run in {session.out} was checkpointed with {state.processes} "
                f"process(es) and resumes with {processes}: each rank's part of the batch and dropout stream "
                f"change, so it will not end where an uninterrupted run would",
                file=sys.stderr,
            )
        if borrowed is not None:  # its RNG unused: what comes after starts from this run's RNG before the phase
            state.done["predecessor"] = dataclasses.replace(borrowed, rng=None, source=str(predecessor_from))
        state.recipe, state.processes, state.parallel = recipe.to_dict(), processes, session.parallelism.kind
        if resume:  # the directories of the checkpoint resumed from, which the next save makes the previous one
            session._sharded_kept = session._sharded(state)
        with session.together():  # the others wait for rank 0's lock and files, and fail with it
            if session.main:
                session.out.mkdir(parents=True, exist_ok=True)
                session.lock = RunLock(session.out)
                if resume:
                    repair_metrics(session.out / "metrics.jsonl", state.metrics_bytes)
                (session.out / "recipe.json").write_text(json.dumps(recipe.to_dict(), indent=2) + "\n")
        session.metrics = MetricsLog(session.out, enabled=session.main)
        return session

    def _check_few_labels(self, recipe: Recipe, phases: tuple[tuple[str, Phase | None], ...]) -> None:
        """``labelled_examples`` within the training split, at least a batch of labelled and of unlabelled examples
        in every phase but a full-batch one (a ``batch_size`` at or above the split's size: each part is one
        batch, whole), and one process (a step's two forwards, labelled then unlabelled, would route differently on
        each rank)."""
        if self.processes > 1:
            raise RunError("labelled_examples runs on one process for now; launch it without accelerate's processes")
        size = len(self.task.dataset("train"))
        try:
            labelled, unlabelled = labelled_split(size, recipe.labelled_examples)
        except ValueError as error:
            raise RunError(str(error)) from None
        sizes = [phase.batch_size for _, phase in phases if phase is not None and phase.batch_size < size]
        largest = max(sizes, default=0)
        if min(len(labelled), len(unlabelled)) < largest:
            raise RunError(
                f"labelled_examples={recipe.labelled_examples} leaves {len(labelled)} labelled and {len(unlabelled)} "
                f"unlabelled examples; each must fill a batch of {largest}"
            )

    def _check(self, resume: bool, predecessor_from: Path | None) -> StageRecord | None:
        """The checks before any write; reads the checkpoint to resume, builds the task, and returns the borrowed
        predecessor's record (``--predecessor-from``), or ``None``."""
        recipe, checkpoint = self.recipe, self.out / CHECKPOINT
        started = has_checkpoint(self.out)
        if resume and not started:
            raise RunError(f"--resume: no {CHECKPOINT} in {self.out}; start without --resume")
        if not resume and started:
            raise RunError(f"{self.out} holds a run already; pass --resume to continue it, or choose another --out")
        left = [name for name in FINISHED_FILES if not resume and (self.out / name).exists()]
        if left:  # a finished run whose checkpoint was deleted: a new run would overwrite its results unasked
            raise RunError(
                f"{self.out} holds an earlier run's results ({', '.join(left)}) and no {CHECKPOINT} to resume: "
                f"choose another --out, or delete them first"
            )
        check_writable(self.out)
        if self.parallelism.kind == "fsdp":
            self._check_sharding(recipe)
        phases = (("predecessor", recipe.predecessor), ("replacing", recipe.replacing), ("refine", recipe.refine))
        uneven = [name for name, phase in phases if phase is not None and phase.batch_size % self.processes]
        if uneven:
            raise RunError(
                f"the batch_size of {', '.join(uneven)} must be a multiple of the {self.processes} processes, "
                f"so that every rank trains on an equal share of each batch"
            )
        self.task = build_task(recipe.family, recipe.options, recipe.seed)
        self.task.check()
        if recipe.labelled_examples is not None:
            self._check_few_labels(recipe, phases)
        if self.parallelism.kind == "fsdp" and not isinstance(self.task, ShardsLayers):
            raise RunError(
                f"--parallel fsdp: the {recipe.family} family does not name its layers to shard (ShardsLayers); "
                f"causal_lm does, or run it with --parallel ddp"
            )
        if recipe.refine is not None and refinement(self.task) is None:
            raise RunError(
                f"the recipe has a refine phase, but the {recipe.family} family has nothing to refine with these "
                f"options (its refinement is None): drop refine, or set the options that give one"
            )
        trained = {parse_method(name).base for name in recipe.method_names()}
        if "direct" in trained and not isinstance(self.task, BuildsDirect):
            raise RunError(f"the {recipe.family} family builds no direct baseline (it has no Task.direct)")
        borrowed = None
        if predecessor_from and not resume:
            ignored = self.task.compression_options if isinstance(self.task, CompressionOptions) else ()
            borrowed = finished_predecessor(Path(predecessor_from), recipe, ignored)
        if resume:
            self.state = RunState.from_dict(read_checkpoint(checkpoint))
            differing = recipe_changes(self.state.recipe, recipe)
            if differing is not None and data_changed(self.state.recipe, recipe):
                raise RunError(
                    f"--resume: the data changed since the run in {self.out} began ({differing}); resume with the "
                    f"data it began with, or start a new run with another --out"
                )
            if differing is not None:
                raise RunError(
                    f"--resume: the run in {self.out} used another recipe ({differing}); resume with the same "
                    f"--recipe, --config and flags"
                )
            if self.state.parallel != self.parallelism.kind:
                raise RunError(
                    f"--resume: the run in {self.out} was checkpointed with --parallel {self.state.parallel}; "
                    f"resume it with --parallel {self.state.parallel}"
                )
        return borrowed

    def _check_sharding(self, recipe: Recipe) -> None:
        """``--parallel fsdp``: under torchrun, and none of what trains modules outside the model's forward or changes
        which parameters train mid-stage (the family's part is checked once its task is built)."""
        if "WORLD_SIZE" not in os.environ:
            raise RunError(
                "--parallel fsdp runs under torchrun: torchrun --standalone --nproc_per_node N -m theseus_zoo.cli "
                "compress ... --parallel fsdp (N = 1 on one GPU)"
            )
        refused = {
            "budget": recipe.budget is not None,
            "labelled_examples": recipe.labelled_examples is not None,
        }
        for name in recipe.method_names():
            spelled, own = parse_method(name), recipe.for_method(name)
            refused[f"{name} (+warmup)"] = "warmup" in spelled.flags
            refused[f"{name}'s consistency_weight"] = spelled.base == "theseus" and bool(own.consistency_weight)
            refused[f"{name}'s unfreeze_at_one"] = spelled.base == "theseus" and own.unfreeze_at_one is not None
        found = [what for what, given in refused.items() if given]
        if found:
            raise RunError(
                f"--parallel fsdp does not run {', '.join(found)} yet (they train modules outside the sharded "
                f"model's forward or change what trains mid-stage); run them with --parallel ddp"
            )

    @contextmanager
    def together(self) -> Iterator[None]:
        """Runs the block on every rank, then raises on every rank what any rank's block raised (naming that rank),
        so that no rank waits at the next collective for one that gave up; a barrier when none did. In one process,
        the block's own error as it was. An error the cli reports in one line (`ONE_LINE_ERRORS`) becomes a
        `RunError` on every rank; any other error is raised as it was, with its traceback, on the rank that met it,
        and as a `RunError` naming it on the others."""
        failure: str | None = None
        unexpected: Exception | None = None
        try:
            yield
        except Exception as raised:
            if self.processes == 1:
                raise
            if isinstance(raised, ONE_LINE_ERRORS):
                failure = str(raised)
            else:
                unexpected, failure = raised, f"{type(raised).__name__}: {raised}"
        failures = ranks.all_gather(failure)
        if unexpected is not None:
            raise unexpected
        for rank, message in enumerate(failures):
            if message is not None:
                where = "" if rank == 0 else f"rank {rank}: "
                raise RunError(where + message, on_every_rank=True, quiet=not self.main) from None

    def save(self, current: StageProgress | None) -> None:
        """Checkpoints atomically with the stage in progress (``None`` between stages) and the length of
        metrics.jsonl, so that a resume drops the lines logged after (rank 0 writes; the state it saves is the same
        on every rank but for the forward streams, gathered in it)."""
        self.state.current = current
        if self.main:
            self.state.metrics_bytes = self.metrics.size()
            atomic_save(self.state.to_dict(), self.out / CHECKPOINT)
        if self.parallel.sharded:  # the checkpoint and the previous one name the directories a resume may read
            named = self._sharded(self.state)
            if self.main:
                prune_sharded(self.out, named | self._sharded_kept)
            self._sharded_kept = named

    @staticmethod
    def _sharded(state: RunState) -> set[str]:
        """The sharded checkpoint directories ``state`` names: its stage in progress's and its best state's."""
        current = state.current
        return set() if current is None else {d for d in (current.sharded, current.best.sharded) if d is not None}

    def finished(self, stage: str) -> bool:
        """Whether ``stage`` is done; if so, the RNG continues from where that stage left it, so that a resumed run
        draws what an uninterrupted one would (dropout masks, fresh initialisations)."""
        done = self.state.done.get(stage)
        if done is not None and done.rng is not None:
            self.rng.restore(done.rng)
        return done is not None

    def evaluate(self, model: nn.Module, theseus: th.Theseus | None, record: dict[str, Any], step: int) -> dict:
        """The dev metrics, computed by rank 0 alone and given to every rank, so that early stopping decides alike
        everywhere; a ``"hybrid"`` evaluation draws routes, so the others then take rank 0's routing state. With
        several processes, ``record["ranks"]`` first gets each rank's routing and forward-RNG fingerprints, and
        routes that differ between ranks stop the run."""
        if self.processes == 1:
            return self.task.evaluate(model, "dev")
        fingerprints = ranks.all_gather(
            {
                "routes": ranks.fingerprint(theseus.state_dict()) if theseus is not None else None,
                "forward_rng": ranks.fingerprint(self.rng.forward.state),
            }
        )
        record["ranks"] = fingerprints
        if len({entry["routes"] for entry in fingerprints}) > 1:
            raise RunError(
                f"the ranks drew different routes by step {step} of the replacing phase (fingerprints "
                f"{[entry['routes'] for entry in fingerprints]}): they must share the routing seed",
                on_every_rank=True,
                quiet=not self.main,
            )
        sharded = self.parallel.sharded  # every rank runs its shards of the forward
        metrics = self.task.evaluate(model, "dev") if self.main or sharded else None
        routing = theseus.state_dict() if theseus is not None and self.main else None
        metrics, routing = ranks.from_rank_zero((metrics, routing))
        if routing is not None and not self.main:
            theseus.load_state_dict(routing)
        return metrics

    def close(self) -> None:
        """Releases the lock and closes the metrics log."""
        if self.metrics is not None:
            self.metrics.close()
        if self.lock is not None:
            self.lock.release()
            self.lock = None
