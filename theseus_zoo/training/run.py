"""The compression run behind `theseus compress`: its stages in order, each checkpointed, then the report.

Stages, each checkpointed atomically at every evaluation so that a crash or Ctrl-C loses at most ``eval_every``
steps and ``--resume`` continues with the same data order, routes and schedule step:

1. ``predecessor``: fine-tune the predecessor (skipped when the family gives a fine-tuned one, or borrowed from
   another run with ``--predecessor-from``);
2. each method of the recipe (`theseus_zoo.training.methods`), in order: ``replacing`` for Theseus
   (`theseus_core.replace_`, the curriculum until p = 1, then successor fine-tuning; early stopping on the dev
   metric keeps the best state), ``baseline:<name>`` for each baseline (same harness, data order and step budget);
   with a ``refine`` phase in the recipe, each compressed model then goes through `Task.refine_` and
   ``refine:<model>``, prediction-layer distillation from the predecessor;
3. ``report``: test metrics, parameters, size on disk of every model, measured speedup, export, ``report.json`` /
   ``report.md`` and ``curves.png`` (`theseus_zoo.training.report`).

The loop (`theseus_zoo.training.loop`) runs on Hugging Face ``accelerate``. Under ``torchrun --nproc_per_node N``
(gloo on CPUs, nccl on GPUs) every process takes its part of each batch and gradients are averaged; the ranks agree
on the recipe before anything else (a mismatch is one line, not a hang), draw the same routes (the handle's
generator, from the recipe seed: its fingerprint is compared at every evaluation) and different dropout masks
(`ranks.ForwardRng`); rank 0 alone evaluates on dev, takes the lock and writes every file (checkpoints, metrics,
report, export) while the others wait where its files or its word are needed (`theseus_zoo.training.session`).
With ``--parallel fsdp`` each stage trains under FSDP2 instead, every layer sharded across the ranks, every rank
evaluating with its shards and writing them into each checkpoint (`theseus_zoo.training.sharding`); the models it
hands on are whole, as with DDP. The logged loss is the mean over ranks. Metrics go to ``metrics.jsonl``, and to
TensorBoard (``<out>/tensorboard``) when the ``tensorboard`` package is installed.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
from torch import nn

from theseus_core.budget import Cost

from ..recipes import Recipe
from . import ranks
from .checkpoints import previous_of
from .loop import train_phase
from .methods import Context, Method, Objective, Stage, methods_of, refine_stage, task_loss
from .optimization import predecessor_parameters
from .report import write_report
from .run_directory import CHECKPOINT
from .search import BudgetSearch
from .session import Session
from .sharding import Parallelism, prune_sharded


class Run:
    """One compression run of a recipe into an output directory."""

    def __init__(
        self,
        recipe: Recipe,
        out: Path,
        *,
        resume: bool = False,
        progress: bool = True,
        predecessor_from: Path | None = None,
        keep_checkpoints: bool = False,
        parallelism: Parallelism | None = None,
    ) -> None:
        """Checks everything and opens ``out`` (`Session.open`); trains nothing until `run`.

        ``keep_checkpoints``: keep ``checkpoint.pt.previous`` once the run is finished (by default it goes, and the
        finished run keeps one checkpoint: what ``--resume`` and ``--predecessor-from`` read).

        ``predecessor_from``: a run directory whose fine-tuned predecessor this run takes instead of training its
        own; that run must have the same family, options and predecessor phase (its seed may differ: seeds then
        vary the compression and the baselines only).

        ``parallelism``: how each stage is spread over the ranks (`Parallelism`: DDP, the default, or FSDP2)."""
        self.recipe, self.out, self.keep_checkpoints = recipe, Path(out), keep_checkpoints
        self.search: BudgetSearch | None = None
        self.costs: tuple[dict[tuple[str, str], Cost], Cost] | None = None  # measured by the budget's check
        self.session = Session.open(
            recipe,
            self.out,
            resume=resume,
            progress=progress,
            predecessor_from=predecessor_from,
            parallelism=parallelism,
            check=self._check,
        )
        self.task, self.main = self.session.task, self.session.main

    def _check(self, session: Session) -> None:
        """What the methods' stages and the budget would refuse once built, refused before the run directory is
        written (`Session.open`): each method's `Method.check` and an impossible budget (`BudgetSearch.check`,
        which measures the candidates' costs once, unless the run resumes from a checkpoint that holds its choice:
        measured again, a latency near the budget could refuse a choice made and trained on). A predecessor of the
        family's, built for the checks alone and only when one reads it: the run's random streams do not move."""
        recipe, task = self.recipe, session.task
        device = session.accelerator.device
        built: list[nn.Module] = []

        def predecessor() -> nn.Module:  # built once, for the checks that read one (most read none)
            if not built:
                built.append(task.build_predecessor())
            return built[0]

        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            for method in methods_of(recipe):
                method.check(task, recipe.for_method(method.full_name), predecessor)
            if recipe.budget is not None:
                self.search = BudgetSearch(task, recipe, device)
                if session.state.search is None:  # a resumed run whose checkpoint holds its choice measures nothing
                    self.costs = self.search.check(predecessor())

    def run(self) -> dict[str, Any]:
        """Trains every stage not yet done and writes the report; returns it (on every rank)."""
        torch.manual_seed(self.recipe.seed)
        random.seed(self.recipe.seed)
        try:
            return self._run()
        finally:
            self.session.close()

    def _run(self) -> dict[str, Any]:
        session, recipe = self.session, self.recipe
        predecessor = self.task.build_predecessor()
        methods, search, costs = methods_of(recipe), self.search, self.costs
        if recipe.predecessor is not None:
            # What follows draws from the RNG as it stood before the predecessor phase, whether that phase ran here
            # or its result was borrowed (--predecessor-from): a run compresses the same either way, so runs that
            # share a predecessor pair up however it reached them.
            before = session.rng.state()
            if not session.finished("predecessor"):
                objective = Objective(predecessor_parameters(predecessor), task_loss(self.task))
                train_phase(session, "predecessor", predecessor, objective, recipe.predecessor)
            predecessor.load_state_dict(session.state.done["predecessor"].weights)
            # on the device, as the phase's preparation leaves it; a borrowed predecessor never went through one
            predecessor.to(session.accelerator.device)
            session.rng.restore(before)
        plan = None
        if search is not None:  # a successor per group, under the budget: what every method `uses_search` trains
            session.rng.start_stream("search")
            plan, record = search.run(
                predecessor,
                costs,
                saved=session.state.search,
                agree=ranks.from_rank_zero,
                progress=session.progress and session.main,
            )
            if session.state.search is None:
                session.state.search = record
                session.save(None)
        models: dict[str, nn.Module] = {"predecessor": predecessor}
        for method in methods:  # each with the recipe as it trains it: its own arguments in place
            device = session.accelerator.device
            context = Context(self.task, recipe.for_method(method.full_name), predecessor, device, plan)
            models[method.name] = self._train(method, context)
        # rank 0 tests, times, exports and writes; the others wait for its report (and so for its files)
        # the exported model: Theseus', else the first method's (a run of baselines alone exports nothing)
        compact = models["theseus"] if "theseus" in models else next(m for n, m in models.items() if n != "predecessor")
        report = ranks.from_rank_zero(write_report(session, models, compact) if self.main else None)
        if self.main and not self.keep_checkpoints:  # finished: one checkpoint is all a later run reads
            previous_of(self.out / CHECKPOINT).unlink(missing_ok=True)
            prune_sharded(self.out, set(), everything=True)  # the finished checkpoint names none
        return report

    def _train(self, method: Method, context: Context) -> nn.Module:
        """``method``'s compact model in its final form: its stages trained (or found done), then with a ``refine``
        phase in the recipe, `Task.refine_` (deterministic, so a resumed run rebuilds the same structure before
        loading the stage's weights) and ``refine:<name>``. Every random draw comes from the method's own stream
        (`theseus_zoo.training.rng.RunRng.start_stream`)."""
        self.session.rng.start_stream(method.full_name)  # its draws from its name, not from what trained before it
        trainee = method.build(context)
        for stage in trainee.stages:
            self._stage(stage, trainee.model)
        compact = trainee.finish()
        if self.recipe.refine is None:
            return compact
        self.task.refine_(compact)
        self._stage(refine_stage(context, method.name, compact), compact)
        return compact

    def _stage(self, stage: Stage, model: nn.Module) -> None:
        """Trains ``stage`` unless it is done, then loads its best weights into ``model``."""
        if not self.session.finished(stage.name):
            train_phase(self.session, stage.name, model, stage.objective(), stage.phase)
        model.load_state_dict(self.session.state.done[stage.name].weights)
