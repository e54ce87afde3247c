"""The training loop of one stage: `train_phase`, evaluating and checkpointing every ``eval_every`` steps.

It knows nothing of methods (an `Objective` says what to train with which loss) nor of run directories (a
`Session` logs, checkpoints, evaluates on dev and keeps the RNG) nor of how the model is spread over the ranks (the
session's `theseus_zoo.training.sharding` strategy: DDP or FSDP2): what it owns is the order of a step (data order,
replacing rate, unfreezing at p = 1, learning rate, forward, a finite loss, backward, clipping, AdamW), early
stopping on the dev metric with the best state kept, and resuming inside a stage.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch
from torch import nn
from tqdm.auto import tqdm

from ..recipes import Phase
from .data_order import DataOrder, labelled_split
from .methods import Objective, to_device
from .optimization import adamw
from .run_directory import RunError
from .state import Best, StageProgress, StageRecord

if TYPE_CHECKING:
    from .session import Session


def optimizer_for(model: nn.Module, objective: Objective, phase: Phase) -> torch.optim.AdamW:
    """AdamW over the objective's parameters with the phase's rate and weight decay (none on biases and norms)."""
    return adamw(model, objective.trained, phase)


def train_phase(session: Session, name: str, model: nn.Module, objective: Objective, phase: Phase) -> None:
    """Trains stage ``name`` of ``model``, evaluating and checkpointing every ``phase.eval_every`` steps, and records
    it in ``session.state.done[name]`` (a `StageRecord`: best weights, best dev metric and step, steps, seconds, the
    RNG where the next stage starts). Resumes inside the stage when the session's checkpoint stopped there."""
    accelerator, task, recipe, parallel = session.accelerator, session.task, session.recipe, session.parallel
    theseus, schedule = objective.theseus, objective.schedule
    prepared = parallel.prepare(model, objective, phase)
    model, optimizer, late, unwrapped = prepared.model, prepared.optimizer, prepared.late, prepared.evaluated
    current = session.state.current
    if current is not None and current.phase == name:  # resuming inside this stage
        parallel.restore(prepared, session.out, current)
        if theseus is not None:
            theseus.load_state_dict(current.routing)
        session.rng.restore(current.rng)
        step, best, seconds_before, stop = current.step, current.best, current.seconds, current.stop
    else:
        step, best, seconds_before, stop = 0, Best(), 0.0, False
    started = time.perf_counter()

    def checkpoint() -> None:
        weights, optimizer_state, sharded = parallel.snapshot(prepared, session.out, name, step)
        session.save(
            StageProgress(
                phase=name,
                step=step,
                weights=weights,
                optimizer=optimizer_state,
                sharded=sharded,
                routing=theseus.state_dict() if theseus is not None else None,
                rng=session.rng.state(),
                best=best,
                stop=stop,  # an early stop decided at this evaluation holds after a resume
                seconds=seconds_before + time.perf_counter() - started,
            )
        )

    if step == 0:
        checkpoint()  # a crash before the first evaluation resumes with this stage's RNG state

    train = task.dataset("train")
    labelled, unlabelled = labelled_split(len(train), recipe.labelled_examples)
    per_process = max(1, phase.batch_size // accelerator.num_processes)

    def batch_of(indices: torch.Tensor) -> object:  # this rank's share of a batch, collated, on its device
        mine = indices[accelerator.process_index :: accelerator.num_processes][:per_process]
        return to_device(task.collate([train[int(i)] for i in mine]), accelerator.device)

    # The predecessor, the compression stages (Theseus and the baselines alike: a paired comparison) and the refine
    # stages each draw data orders of their own; unlabelled examples a stream of their own beside each.
    stream = {"predecessor": "predecessor", "refine": "refine"}.get(name.split(":")[0], "compression")
    order = DataOrder(labelled, phase.batch_size, recipe.seed, stream)
    extra = None
    if objective.unlabelled is not None and len(unlabelled):
        extra = DataOrder(unlabelled, phase.batch_size, recipe.seed, f"{stream}:unlabelled")
    bar = tqdm(total=phase.steps, initial=step, desc=name, disable=not (session.progress and session.main), leave=False)
    forward = session.rng.forward.active if session.rng.forward is not None else nullcontext
    while step < phase.steps and not stop:
        batch = batch_of(order.batch(step))
        if theseus is not None:
            theseus.rate = schedule(step)
        for parameter in late:
            parameter.requires_grad_(theseus is not None and theseus.rate >= 1.0)
        lr = phase.lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        model.train()
        with forward():  # this rank's dropout masks
            value, _ = objective.loss(model, batch)
            if extra is not None:  # few labels: the label-free part of the loss on as many unlabelled examples
                value = value + objective.unlabelled(model, batch_of(extra.batch(step)))[0]
            mean = accelerator.reduce(value.detach(), "mean").item()  # over ranks: what is logged
            if not math.isfinite(mean):  # on every rank alike, since the mean is the same everywhere
                raise RunError(
                    f"the loss of step {step + 1} of {name} is {mean}: the run stops, its last good "
                    f"checkpoint kept; lower the learning rate ({lr:g}) or look at the data, then --resume",
                    on_every_rank=session.processes > 1,
                    quiet=not session.main,
                )
            if value.requires_grad:  # every group on its frozen predecessor: nothing to learn this step
                parallel.backward(prepared, value, objective.outside_wrapper)
        record = {"phase": name, "step": step + 1, "loss": mean, "lr": lr}
        if value.requires_grad:
            if phase.max_grad_norm is not None:
                record["grad_norm"] = parallel.clip_grad_norm_(prepared, phase.max_grad_norm)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        bar.update(1)
        if theseus is not None:
            record["rate"] = theseus.rate
        evaluate = step % phase.eval_every == 0 or step == phase.steps
        if evaluate:
            metrics = session.evaluate(unwrapped, theseus, record, step)
            record["dev"] = metrics
            value = metrics[task.metric]
            at_one = theseus is None or theseus.rate >= 1.0
            if value > best.metric:
                weights, sharded = parallel.best(prepared, name, step)
                best = Best(value, step, weights, sharded=sharded)
            elif at_one:
                best.evaluations_since += 1
            patience = recipe.patience if theseus is not None else None
            stop = patience is not None and at_one and best.evaluations_since >= patience
            bar.set_postfix({task.metric: f"{value:.4f}", **({"p": f"{theseus.rate:.2f}"} if theseus else {})})
        session.metrics.log(record)
        if evaluate:
            checkpoint()  # after the log line, so that a resume keeps it
    bar.close()
    for parameter in late:
        parameter.requires_grad_(False)
    weights = parallel.best_weights(prepared, session.out, best)
    parallel.finish(prepared)
    session.state.done[name] = StageRecord(
        weights=weights,
        best_metric=best.metric,
        best_step=best.step,
        steps=step,
        seconds=seconds_before + time.perf_counter() - started,  # wall-clock, evaluations included
        rng=session.rng.state(),  # where the next stage's draws start, also after a resume
    )
    session.save(None)
