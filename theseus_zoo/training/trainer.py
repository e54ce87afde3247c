"""The compression run behind `theseus compress`: phases, checkpoints, resume, metrics, report.

Phases, each checkpointed atomically at every evaluation so that a crash or
Ctrl-C loses at most ``eval_every`` steps and ``--resume`` continues with the
same data order, routes and schedule step:

1. ``predecessor``: fine-tune the predecessor (skipped when the family gives a
   fine-tuned one);
2. ``replacing``: `theseus_core.replace_`, the linear curriculum until p = 1, then
   successor fine-tuning; early stopping on the dev metric keeps the best state;
3. ``baseline:<name>``: each baseline (``truncated``, ``pretrained``, ``scratch``, ``kd``, ``direct``; see
   `theseus_zoo.recipes.BASELINES`), same harness, data order and step budget;
   with a ``refine`` phase in the recipe, each compressed model (Theseus' after
   ``replacing``, each baseline after its own phase) goes through `Task.refine_`
   and ``refine:<model>``: prediction-layer distillation from the predecessor;
4. ``report``: test metrics, parameters, size on disk of every model, measured
   speedup, export, ``report.json`` / ``report.md`` and ``curves.png``
   (`theseus_zoo.training.report`).

The loop runs on Hugging Face ``accelerate``. Under ``torchrun --nproc_per_node N``
(gloo on CPUs, nccl on GPUs) every process takes its part of each batch and
gradients are averaged; the ranks agree on the recipe before anything else (a
mismatch is one line, not a hang), draw the same routes (the handle's generator,
from the recipe seed: its fingerprint is compared at every evaluation) and
different dropout masks (`ranks.ForwardRng`); rank 0 alone evaluates on dev,
takes the lock and writes every file (checkpoints, metrics, report, export) while
the others wait where its files or its word are needed (`theseus_zoo.training.ranks`).
The logged loss is the mean over ranks. Metrics go to ``metrics.jsonl``, and to
TensorBoard (``<out>/tensorboard``) when the ``tensorboard`` package is installed.
"""

from __future__ import annotations

import copy
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, DistributedDataParallelKwargs
from torch import nn
from tqdm.auto import tqdm

import theseus_core as th
from theseus_quant.distill import prediction_loss

from ..recipes import Phase, Recipe, with_defaults
from ..tasks import Task, build_task
from . import ranks
from .checkpoints import previous_of, read_checkpoint, write_checkpoint
from .losses import ConsistencyLoss, frozen_teacher
from .optimization import (
    ParameterGroup,
    data_order_generator,
    optimizer_groups,
    predecessor_parameters,
    replacing_schedule,
    unfrozen_at_one,
)
from .report import markdown_report, paired_comparisons, plot_curves, test_metrics
from .run_directory import (
    CHECKPOINT,
    RunError,
    RunLock,
    check_writable,
    finished_predecessor,
    repair_metrics,
)
from .timing import interleaved_seconds, median_ratio

Loss = Callable[[nn.Module, Any], tuple[torch.Tensor, torch.Tensor]]
"""``loss(model, batch) -> (loss, logits)``: one forward of the model."""


@dataclass
class PhaseResult:
    best_metric: float
    best_step: int
    steps: int


def atomic_save(obj: Any, path: Path) -> None:
    """A checksummed checkpoint through a temporary file and a rename (`theseus_zoo.training.checkpoints`): a crash
    never leaves half a file, and the checkpoint it replaces is kept as ``<path>.previous``."""
    write_checkpoint(obj, path)


def _rng_state(forward: ranks.ForwardRng | None = None) -> dict[str, Any]:
    """The shared RNG states (the same on every rank), and with ``forward`` every rank's forward stream, gathered
    (a collective: every rank calls it)."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if forward is not None:
        state["forward"] = ranks.all_gather(forward.state)
    return state


def _set_rng_state(state: dict[str, Any], forward: ranks.ForwardRng | None = None, rank: int = 0) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(_as_python_state(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    saved = state.get("forward")
    if forward is not None and saved is not None and rank < len(saved):  # else: another number of processes
        forward.state = saved[rank]


def _as_python_state(state: Any) -> tuple:
    """`random.setstate` wants tuples; a checkpoint may give lists back."""
    version, internal, gauss = state
    return version, tuple(internal), gauss


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
    ) -> None:
        """``predecessor_from``: a run directory whose fine-tuned predecessor this run takes instead of training
        its own; that run must have the same family, options and predecessor phase (its seed may differ: seeds
        then vary the compression and the baselines only)."""
        self.recipe, self.out, self.progress = recipe, Path(out), progress
        self.accelerator = Accelerator(  # writes nothing; under torchrun, joins the process group
            cpu=not torch.cuda.is_available(),
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],  # one branch per step
        )
        self.main, self.processes = self.accelerator.is_main_process, self.accelerator.num_processes
        mismatch = ranks.disagreement(ranks.all_gather(recipe.to_dict()))
        if mismatch is not None:  # before any collective that different recipes would leave waiting
            raise RunError(
                f"the {self.processes} processes were given different recipes ({mismatch}); give every process the "
                f"same --recipe, --config and flags",
                on_every_rank=True,
                quiet=not self.main,
            )
        checkpoint = self.out / CHECKPOINT
        with self._together():  # every rank checks, reading only
            started = checkpoint.exists() or previous_of(checkpoint).exists()
            if resume and not started:
                raise RunError(f"--resume: no {CHECKPOINT} in {self.out}; start without --resume")
            if not resume and started:
                raise RunError(f"{self.out} holds a run already; pass --resume to continue it, or choose another --out")
            check_writable(self.out)
            uneven = [
                name
                for name, phase in (
                    ("predecessor", recipe.predecessor),
                    ("replacing", recipe.replacing),
                    ("refine", recipe.refine),
                )
                if phase is not None and phase.batch_size % self.processes
            ]
            if uneven:
                raise RunError(
                    f"the batch_size of {', '.join(uneven)} must be a multiple of the {self.processes} processes, "
                    f"so that every rank trains on an equal share of each batch"
                )
            self.task: Task = build_task(recipe.family, recipe.options, recipe.seed)
            self.task.check()
            if recipe.refine is not None and getattr(self.task, "refinement", None) is None:
                raise RunError(
                    f"the recipe has a refine phase, but the {recipe.family} family has nothing to refine with these "
                    f"options (its refinement is None): drop refine, or set the options that give one"
                )
            if "direct" in recipe.baselines and not hasattr(self.task, "direct"):
                raise RunError(f"the {recipe.family} family builds no direct baseline (it has no Task.direct)")
            borrowed = None
            if predecessor_from and not resume:
                ignored = getattr(self.task, "compression_options", ())
                borrowed = finished_predecessor(Path(predecessor_from), recipe, ignored)
                borrowed.pop("rng", None)  # unused: what comes after starts from this run's RNG before the phase
            state: dict[str, Any] = read_checkpoint(checkpoint) if resume else {"done": {}}
            if resume and with_defaults(state.get("recipe") or {}) != recipe.to_dict():
                raise RunError(
                    f"--resume: the run in {self.out} used another recipe (see its recipe.json); "
                    f"resume with the same --recipe, --config and flags"
                )
        # --- nothing above this line writes anything; below, rank 0 alone writes ---
        if resume and state.get("processes", 1) != self.processes and self.main:
            print(
                f"theseus: warning: the run in {self.out} was checkpointed with {state.get('processes', 1)} "
                f"process(es) and resumes with {self.processes}: each rank's part of the batch and dropout stream "
                f"change, so it will not end where an uninterrupted run would",
                file=sys.stderr,
            )
        self.forward_rng = (
            ranks.ForwardRng(recipe.seed, self.accelerator.process_index, self.accelerator.device)
            if self.processes > 1
            else None  # one process: forwards draw from the global RNG, as they always did
        )
        self.state = state
        if borrowed is not None:
            self.state["done"]["predecessor"] = {**borrowed, "from": str(predecessor_from)}
        self.state["recipe"] = recipe.to_dict()
        self.state["processes"] = self.processes
        self.lock: RunLock | None = None
        with self._together():  # the others wait for rank 0's lock and files, and fail with it
            if self.main:
                self.out.mkdir(parents=True, exist_ok=True)
                self.lock = RunLock(self.out)
                metrics = self.out / "metrics.jsonl"
                if resume:
                    repair_metrics(metrics, self.state["metrics_bytes"])
                else:
                    for stale in ("metrics.jsonl", "report.json", "report.md", "curves.png"):  # appends to nothing
                        (self.out / stale).unlink(missing_ok=True)
                (self.out / "recipe.json").write_text(json.dumps(recipe.to_dict(), indent=2) + "\n")
        self.tensorboard = _tensorboard_writer(self.out / "tensorboard") if self.main else None

    @contextmanager
    def _together(self) -> Iterator[None]:
        """Runs the block on every rank, then raises on every rank what any rank's block raised (naming that rank),
        so that no rank waits at the next collective for one that gave up; a barrier when none did. In one process,
        the block's own error as it was."""
        failure = None
        try:
            yield
        except (ValueError, KeyError, FileNotFoundError) as error:  # the errors the cli reports in one line
            if self.processes == 1:
                raise
            failure = str(error)
        for rank, message in enumerate(ranks.all_gather(failure)):
            if message is not None:
                where = "" if rank == 0 else f"rank {rank}: "
                raise RunError(where + message, on_every_rank=True, quiet=not self.main) from None

    # ----------------------------------------------------------------- logging
    def log(self, record: dict[str, Any]) -> None:
        if self.main:
            with open(self.out / "metrics.jsonl", "a") as stream:
                stream.write(json.dumps(record) + "\n")
            if self.tensorboard is not None:
                phase, step = record["phase"], record["step"]
                for name, value in [("loss", record["loss"]), ("rate", record.get("rate"))]:
                    if value is not None:
                        self.tensorboard.add_scalar(f"{phase}/{name}", value, step)
                for name, value in record.get("dev", {}).items():
                    self.tensorboard.add_scalar(f"{phase}/dev_{name}", value, step)

    def save(self, **state: Any) -> None:
        """Checkpoints atomically, with the length of metrics.jsonl so a resume drops the lines logged after (rank 0
        writes; the state it saves is the same on every rank but for the forward streams, gathered in it)."""
        self.state.update(state)
        if self.main:
            metrics = self.out / "metrics.jsonl"
            self.state["metrics_bytes"] = metrics.stat().st_size if metrics.exists() else 0
            atomic_save(self.state, self.out / CHECKPOINT)

    def _rng_state(self) -> dict[str, Any]:
        return _rng_state(self.forward_rng)

    def _set_rng_state(self, state: dict[str, Any]) -> None:
        _set_rng_state(state, self.forward_rng, self.accelerator.process_index)

    # ------------------------------------------------------------------ phases
    def run(self) -> dict[str, Any]:
        torch.manual_seed(self.recipe.seed)
        random.seed(self.recipe.seed)
        try:
            return self._run()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _finished(self, phase: str) -> bool:
        """Whether ``phase`` is done; if so, the RNG continues from where that phase left it, so that a resumed run
        draws what an uninterrupted one would (dropout masks, fresh initialisations)."""
        done = self.state["done"].get(phase)
        if done is not None and "rng" in done:
            self._set_rng_state(done["rng"])
        return done is not None

    def _run(self) -> dict[str, Any]:
        predecessor = self.task.build_predecessor()
        if self.recipe.predecessor is not None:
            # What follows draws from the RNG as it stood before the predecessor phase, whether that phase ran here
            # or its result was borrowed (--predecessor-from): a run compresses the same either way, so runs that
            # share a predecessor pair up however it reached them.
            before = self._rng_state()
            if not self._finished("predecessor"):
                self._train("predecessor", predecessor, predecessor_parameters(predecessor), self.recipe.predecessor)
            predecessor.load_state_dict(self.state["done"]["predecessor"]["weights"])
            self._set_rng_state(before)

        compact = None
        if self.recipe.theseus:
            model = copy.deepcopy(predecessor)
            options = dict(getattr(self.task, "replace_options", {}))  # e.g. predecessor_eval
            if hasattr(self.task, "example_inputs"):  # replace_ runs them at rate 0 and refuses a wrong surgery
                options["example_inputs"], options["example_kwargs"] = _to(
                    self.task.example_inputs(), self.accelerator.device
                )
            theseus = th.replace_(model, self.task.plan(model), seed=self.recipe.seed, **options)
            if not self._finished("replacing"):
                self._train(
                    "replacing",
                    model,
                    self._replacing_parameters(model, theseus),
                    self.recipe.replacing,
                    theseus,
                    replacing_schedule(self.recipe),
                    loss=self._replacing_loss(predecessor, theseus),
                )
            model.load_state_dict(self.state["done"]["replacing"]["weights"])
            compact = self._refined("theseus", theseus.finalize(), predecessor)

        baselines = {}
        for name in self.recipe.baselines:
            baseline = self._baseline_model(name, predecessor)
            key = f"baseline:{name}"
            if not self._finished(key):
                distils = name in ("kd", "direct")
                loss = self._distillation_loss(predecessor, self.recipe.kd_alpha) if distils else None
                self._train(key, baseline, predecessor_parameters(baseline), self.recipe.replacing, loss=loss)
            baseline.load_state_dict(self.state["done"][key]["weights"])
            baselines[name] = self._refined(key, baseline, predecessor)
        if self.tensorboard is not None:
            self.tensorboard.close()
        # rank 0 tests, times, exports and writes; the others wait for its report (and so for its files)
        return ranks.from_rank_zero(self._report(predecessor, compact, baselines) if self.main else None)

    def _baseline_model(self, name: str, predecessor: nn.Module) -> nn.Module:
        """A baseline's model before its training (see `theseus_zoo.recipes.BASELINES`); ``pretrained`` cuts a
        fresh `Task.build_predecessor`, the model as it was before the predecessor phase."""
        if name == "scratch":
            return self.task.scratch()
        if name == "direct":
            return self.task.direct(predecessor)
        return self.task.truncated(self.task.build_predecessor() if name == "pretrained" else predecessor)

    def _refined(self, name: str, model: nn.Module, predecessor: nn.Module) -> nn.Module:
        """``model`` (Theseus' successor or a baseline, after its phase) in its final form: with a ``refine`` phase in
        the recipe, `Task.refine_` (deterministic, so a resumed run rebuilds the same structure before loading the
        phase's weights) then ``refine:<name>``, prediction-layer distillation from the predecessor; else as it is."""
        if self.recipe.refine is None:
            return model
        self.task.refine_(model)
        key = f"refine:{name}"
        if not self._finished(key):
            loss = self._distillation_loss(predecessor, alpha=0.0)
            self._train(key, model, predecessor_parameters(model), self.recipe.refine, loss=loss)
        model.load_state_dict(self.state["done"][key]["weights"])
        return model

    def _replacing_parameters(self, model: nn.Module, theseus: th.Theseus) -> list[ParameterGroup]:
        """The successors' parameters, and with ``unfreeze_at_one`` those it unfreezes at p = 1 (frozen until then:
        AdamW skips a parameter without gradient)."""
        groups = [("successors", list(theseus.successor_parameters()))]
        if self.recipe.unfreeze_at_one is not None:
            groups.append(
                ("unfrozen at p = 1", unfrozen_at_one(model, theseus, self.recipe.unfreeze_at_one, self.task))
            )
        return groups

    def _replacing_loss(self, predecessor: nn.Module, theseus: th.Theseus) -> Loss | None:
        """The task loss, plus the extensions the recipe asks for (`Recipe` docs); ``None`` for the paper's own."""
        kd_weight, consistency_weight = self.recipe.kd_weight, self.recipe.consistency_weight
        if not kd_weight and not consistency_weight:
            return None
        teacher = frozen_teacher(predecessor, self.accelerator.device) if kd_weight else None
        consistency = ConsistencyLoss(theseus) if consistency_weight else None

        def loss(model: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if consistency is not None:
                consistency.reset()
            logits = self.task.logits(model, batch)
            value = self.task.criterion(logits, batch)
            if teacher is not None:
                with torch.no_grad():
                    target = self.task.logits(teacher, batch)
                value = value + kd_weight * prediction_loss(logits, target, self.recipe.kd_temperature)
            if consistency is not None and consistency.terms:
                value = value + consistency_weight * consistency.value()
            return value, logits

        return loss

    def _distillation_loss(self, predecessor: nn.Module, alpha: float) -> Loss:
        """Vanilla KD: ``alpha`` · task loss + ``(1 - alpha)`` · T² · KL(teacher ‖ student) at temperature T
        (mean squared error between the outputs when they are single regression values), from one forward of the
        student."""
        teacher = frozen_teacher(predecessor, self.accelerator.device)
        temperature = self.recipe.kd_temperature

        def loss(student: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
            with torch.no_grad():
                target = self.task.logits(teacher, batch)
            logits = self.task.logits(student, batch)
            value = alpha * self.task.criterion(logits, batch) + (1 - alpha) * prediction_loss(
                logits, target, temperature
            )
            return value, logits

        return loss

    def _train(
        self,
        phase_name: str,
        model: nn.Module,
        parameters: list[ParameterGroup],
        phase: Phase,
        theseus: th.Theseus | None = None,
        schedule: Callable[[int], float] | None = None,
        loss: Loss | None = None,
    ) -> None:
        """Trains one phase, evaluating and checkpointing every ``phase.eval_every`` steps.

        ``parameters``: named lists of the parameters to train; the last one, when there are two, is frozen until
        p = 1 (``unfreeze_at_one``). ``loss(model, batch)`` returns the loss and the logits (default: the task's
        criterion on the task's logits)."""
        compute_loss = loss or self._task_loss
        trained = [parameter for _, group in parameters for parameter in group]
        late = parameters[1][1] if len(parameters) > 1 else []
        optimizer = torch.optim.AdamW(optimizer_groups(model, trained, phase.weight_decay), lr=phase.lr)
        model, optimizer = self.accelerator.prepare(model, optimizer)
        unwrapped = self.accelerator.unwrap_model(model)
        current = self.state.get("current")
        if current is not None and current["phase"] == phase_name:  # resuming inside this phase
            unwrapped.load_state_dict(current["weights"])
            optimizer.load_state_dict(current["optimizer"])
            if theseus is not None:
                theseus.load_state_dict(current["routing"])
            self._set_rng_state(current["rng"])
            step, best, seconds_before = current["step"], current["best"], current.get("seconds", 0.0)
            stop = current.get("stop", False)  # checkpoints of theseus 0.1.0 have neither
        else:
            step, best = 0, {"metric": -float("inf"), "step": 0, "weights": None, "evaluations_since": 0}
            seconds_before, stop = 0.0, False
        started = time.perf_counter()

        def checkpoint() -> None:
            self.save(
                current={
                    "phase": phase_name,
                    "step": step,
                    "weights": _cpu_state(unwrapped),
                    "optimizer": optimizer.state_dict(),
                    "routing": theseus.state_dict() if theseus is not None else None,
                    "rng": self._rng_state(),
                    "best": best,
                    "stop": stop,  # an early stop decided at this evaluation holds after a resume
                    "seconds": seconds_before + time.perf_counter() - started,
                }
            )

        if step == 0:
            checkpoint()  # a crash before the first evaluation resumes with this phase's RNG state

        train = self.task.dataset("train")
        per_process = max(1, phase.batch_size // self.accelerator.num_processes)
        steps_per_epoch = max(1, len(train) // phase.batch_size)
        # The predecessor, the compression phases (Theseus and the baselines alike: a paired comparison) and the refine
        # phases each draw data orders of their own.
        stream = {"predecessor": "predecessor", "refine": "refine"}.get(phase_name.split(":")[0], "compression")
        bar = tqdm(
            total=phase.steps, initial=step, desc=phase_name, disable=not (self.progress and self.main), leave=False
        )
        forward = self.forward_rng.active if self.forward_rng is not None else nullcontext
        while step < phase.steps and not stop:
            epoch, offset = divmod(step, steps_per_epoch)
            order = torch.randperm(len(train), generator=data_order_generator(self.recipe.seed, stream, epoch))
            for index in range(offset, steps_per_epoch):
                batch_indices = order[index * phase.batch_size : (index + 1) * phase.batch_size]
                mine = batch_indices[self.accelerator.process_index :: self.accelerator.num_processes][:per_process]
                batch = _to(self.task.collate([train[int(i)] for i in mine]), self.accelerator.device)
                if theseus is not None:
                    theseus.rate = schedule(step)
                for parameter in late:
                    parameter.requires_grad_(theseus is not None and theseus.rate >= 1.0)
                lr = phase.lr_at(step)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                model.train()
                with forward():  # this rank's dropout masks
                    value, _ = compute_loss(model, batch)
                    mean = self.accelerator.reduce(value.detach(), "mean").item()  # over ranks: what is logged
                    if not math.isfinite(mean):  # on every rank alike, since the mean is the same everywhere
                        raise RunError(
                            f"the loss of step {step + 1} of {phase_name} is {mean}: the run stops, its last good "
                            f"checkpoint kept; lower the learning rate ({lr:g}) or look at the data, then --resume",
                            on_every_rank=self.processes > 1,
                            quiet=not self.main,
                        )
                    if value.requires_grad:  # every group on its frozen predecessor: nothing to learn this step
                        self.accelerator.backward(value)
                record = {"phase": phase_name, "step": step + 1, "loss": mean, "lr": lr}
                if value.requires_grad:
                    if phase.max_grad_norm is not None:
                        norm = self.accelerator.clip_grad_norm_(trained, phase.max_grad_norm)
                        record["grad_norm"] = float(norm)
                    optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                bar.update(1)
                if theseus is not None:
                    record["rate"] = theseus.rate
                evaluate = step % phase.eval_every == 0 or step == phase.steps
                if evaluate:
                    metrics = self._evaluate(unwrapped, theseus, record, step)
                    record["dev"] = metrics
                    value = metrics[self.task.metric]
                    at_one = theseus is None or theseus.rate >= 1.0
                    if value > best["metric"]:
                        best = {"metric": value, "step": step, "weights": _cpu_state(unwrapped), "evaluations_since": 0}
                    elif at_one:
                        best["evaluations_since"] += 1
                    patience = self.recipe.patience if theseus is not None else None
                    stop = patience is not None and at_one and best["evaluations_since"] >= patience
                    bar.set_postfix(
                        {self.task.metric: f"{value:.4f}", **({"p": f"{theseus.rate:.2f}"} if theseus else {})}
                    )
                self.log(record)
                if evaluate:
                    checkpoint()  # after the log line, so that a resume keeps it
                if step >= phase.steps or stop:
                    break
        bar.close()
        for parameter in late:
            parameter.requires_grad_(False)
        done = {
            "weights": best["weights"],
            "best_metric": best["metric"],
            "best_step": best["step"],
            "steps": step,
            "seconds": seconds_before + time.perf_counter() - started,  # wall-clock, evaluations included
            "rng": self._rng_state(),  # where the next phase's draws start, also after a resume
        }
        self.state["done"][phase_name] = done
        self.save(current=None)

    def _evaluate(
        self, model: nn.Module, theseus: th.Theseus | None, record: dict[str, Any], step: int
    ) -> dict[str, float]:
        """The dev metrics, computed by rank 0 alone and given to every rank, so that early stopping decides alike
        everywhere; a ``"hybrid"`` evaluation draws routes, so the others then take rank 0's routing state. With
        several processes, ``record["ranks"]`` first gets each rank's routing and forward-RNG fingerprints, and
        routes that differ between ranks stop the run."""
        if self.processes == 1:
            return self.task.evaluate(model, "dev")
        fingerprints = ranks.all_gather(
            {
                "routes": ranks.fingerprint(theseus.state_dict()) if theseus is not None else None,
                "forward_rng": ranks.fingerprint(self.forward_rng.state),
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
        metrics = self.task.evaluate(model, "dev") if self.main else None
        routing = theseus.state_dict() if theseus is not None and self.main else None
        metrics, routing = ranks.from_rank_zero((metrics, routing))
        if routing is not None and not self.main:
            theseus.load_state_dict(routing)
        return metrics

    def _task_loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.task.logits(model, batch)
        return self.task.criterion(logits, batch), logits

    # ------------------------------------------------------------------ report
    def _report(
        self, predecessor: nn.Module, compact: nn.Module | None, baselines: dict[str, nn.Module]
    ) -> dict[str, Any]:
        """Test metrics of every model (with a bootstrap standard error and the per-example predictions when the
        task gives them: what paired comparisons across models and seeds need), parameters and size on disk (each
        model exported as `Task.export` writes it; the others' exports are deleted once measured), the export of
        the Theseus successor and its measured speedup (the first baseline's when Theseus was not trained). Rank 0's
        work."""
        models = {"predecessor": predecessor, **({"theseus": compact} if compact is not None else {})}
        models.update({f"baseline:{k}": v for k, v in baselines.items()})
        report: dict[str, Any] = {"recipe": self.recipe.to_dict(), "metric": self.task.metric, "models": {}}
        for name, model in models.items():
            model.eval()
            parameters = sum(p.numel() for p in model.parameters())
            report["models"][name] = {**test_metrics(self.task, model), "parameters": parameters}
        for name, model in models.items():
            report["models"][name]["size_on_disk_bytes"] = self._size_on_disk(name, model)
        if self.recipe.refine is not None:
            report["refinement"] = self.task.refinement
        reference = report["models"]["predecessor"]["test"][self.task.metric]
        for entry in report["models"].values():
            entry["retention_percent"] = 100.0 * entry["test"][self.task.metric] / reference if reference else None
        if getattr(self.task, "scores_examples", False):
            report["test_labels"] = [round(float(value), 5) for value in self.task.labels("test")]
            if compact is not None:
                report["comparisons"] = paired_comparisons(self.task, report)
        small = compact if compact is not None else next(iter(baselines.values()))
        report["speedup"] = self._speedup(predecessor, small)
        report["phases"] = {
            k: {kk: v for kk, v in d.items() if kk not in ("weights", "rng")} for k, d in self.state["done"].items()
        }
        (self.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        (self.out / "report.md").write_text(markdown_report(report))
        plot_curves(self.out / "metrics.jsonl", self.out / "curves.png", self.task.metric)
        return report

    def _size_on_disk(self, name: str, model: nn.Module) -> int:
        """Bytes of ``model``'s export: Theseus' stays in ``<out>/model``, the others' go once measured."""
        if name == "theseus":
            return sum(f.stat().st_size for f in self.task.export(model, self.out / "model"))
        with tempfile.TemporaryDirectory(dir=self.out, prefix=".export-") as scratch:
            return sum(f.stat().st_size for f in self.task.export(model, Path(scratch) / "model"))

    def _speedup(self, predecessor: nn.Module, compact: nn.Module, repeats: int = 7) -> float:
        """Median per-turn latency ratio, predecessor over successor, eager, on `Task.latency_batch`."""
        batch = _to(self.task.latency_batch(), self.accelerator.device)
        predecessor.eval(), compact.eval()
        runs = {
            "predecessor": lambda: self.task.forward(predecessor, batch),
            "successor": lambda: self.task.forward(compact, batch),
        }
        with torch.no_grad():
            times = interleaved_seconds(runs, warmup=1, repeats=repeats, device=self.accelerator.device)
        return median_ratio(times["predecessor"], times["successor"])


def _tensorboard_writer(directory: Path) -> Any:
    """A TensorBoard ``SummaryWriter`` when the ``tensorboard`` package is installed, else ``None``."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(directory))


def _cpu_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}


def _to(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {key: _to(value, device) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to(value, device) for value in batch)
    return batch
