"""The compression run behind `theseus compress`: phases, checkpoints, resume, metrics, report.

Phases, each checkpointed atomically at every evaluation so that a crash or
Ctrl-C loses at most ``eval_every`` steps and ``--resume`` continues with the
same data order, routes and schedule step:

1. ``predecessor``: fine-tune the predecessor (skipped when the family gives a
   fine-tuned one);
2. ``replacing``: `theseus_core.replace_`, the linear curriculum until p = 1, then
   successor fine-tuning; early stopping on the dev metric keeps the best state;
3. ``baseline:<name>``: each baseline (``truncated``, ``scratch``, ``kd``; see
   `theseus_zoo.recipe.BASELINES`), same harness, data order and step budget;
4. ``report``: test metrics, parameters, size on disk, measured speedup, export,
   ``report.json`` / ``report.md`` and ``curves.png``.

The loop runs on Hugging Face ``accelerate``: under ``accelerate launch`` every
process takes its shard of each batch, and ranks draw the same routes (same seed).
Metrics go to ``metrics.jsonl``, and to TensorBoard (``<out>/tensorboard``) when
the ``tensorboard`` package is installed.
"""

from __future__ import annotations

import copy
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from accelerate import Accelerator, DistributedDataParallelKwargs
from torch import nn
from tqdm.auto import tqdm

import theseus_core as th

from .recipe import Phase, Recipe
from .task import Task, build_task
from .timing import interleaved_seconds, median_ratio

CHECKPOINT = "checkpoint.pt"


class RunError(ValueError):
    """Bad input for a run, found before any training; the message says what to do."""


@dataclass
class PhaseResult:
    best_metric: float
    best_step: int
    steps: int


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save through a temporary file and a rename: a crash never leaves half a file."""
    temporary = path.with_name(path.name + ".tmp")
    torch.save(obj, temporary)
    os.replace(temporary, path)


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


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
        checkpoint = self.out / CHECKPOINT
        if resume and not checkpoint.exists():
            raise RunError(f"--resume: no {CHECKPOINT} in {self.out}; start without --resume")
        if not resume and checkpoint.exists():
            raise RunError(f"{self.out} holds a run already; pass --resume to continue it, or choose another --out")
        borrowed = _finished_predecessor(Path(predecessor_from), recipe) if predecessor_from and not resume else None
        self.task: Task = build_task(recipe.family, recipe.options, recipe.seed)
        self.task.check()
        self.out.mkdir(parents=True, exist_ok=True)
        self.accelerator = Accelerator(
            cpu=not torch.cuda.is_available(),
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],  # one branch per step
        )
        self.state: dict[str, Any] = torch.load(checkpoint, weights_only=False) if resume else {"done": {}}
        if borrowed is not None:
            self.state["done"]["predecessor"] = {**borrowed, "from": str(predecessor_from)}
        if resume and self.state.get("recipe") != recipe.to_dict():
            raise RunError(
                f"--resume: the run in {self.out} used another recipe (see its recipe.json); "
                f"resume with the same --recipe, --config and flags"
            )
        self.state["recipe"] = recipe.to_dict()
        metrics = self.out / "metrics.jsonl"
        if resume and metrics.exists():  # lines logged after the checkpoint are logged again
            os.truncate(metrics, self.state["metrics_bytes"])
        (self.out / "recipe.json").write_text(json.dumps(recipe.to_dict(), indent=2) + "\n")
        self.tensorboard = _tensorboard_writer(self.out / "tensorboard") if self.accelerator.is_main_process else None

    # ----------------------------------------------------------------- logging
    def log(self, record: dict[str, Any]) -> None:
        if self.accelerator.is_main_process:
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
        """Checkpoints atomically, with the length of metrics.jsonl so a resume drops the lines logged after."""
        self.state.update(state)
        metrics = self.out / "metrics.jsonl"
        self.state["metrics_bytes"] = metrics.stat().st_size if metrics.exists() else 0
        if self.accelerator.is_main_process:
            atomic_save(self.state, self.out / CHECKPOINT)

    # ------------------------------------------------------------------ phases
    def run(self) -> dict[str, Any]:
        torch.manual_seed(self.recipe.seed)
        random.seed(self.recipe.seed)
        predecessor = self.task.build_predecessor()
        if self.recipe.predecessor is not None:
            if "predecessor" not in self.state["done"]:
                self._train("predecessor", predecessor, list(predecessor.parameters()), self.recipe.predecessor)
            predecessor.load_state_dict(self.state["done"]["predecessor"]["weights"])

        model = copy.deepcopy(predecessor)
        theseus = th.replace_(model, self.task.plan(model), seed=self.recipe.seed)
        if "replacing" not in self.state["done"]:
            schedule = th.LinearSchedule.reaching_one_at(self.recipe.steps_to_one, base=self.recipe.schedule_base)
            self._train(
                "replacing", model, list(theseus.successor_parameters()), self.recipe.replacing, theseus, schedule
            )
        model.load_state_dict(self.state["done"]["replacing"]["weights"])
        compact = theseus.finalize()

        baselines = {}
        for name in self.recipe.baselines:
            baseline = self.task.scratch() if name == "scratch" else self.task.truncated(predecessor)
            key = f"baseline:{name}"
            if key not in self.state["done"]:
                loss = self._distillation_loss(predecessor) if name == "kd" else None
                self._train(key, baseline, list(baseline.parameters()), self.recipe.replacing, loss=loss)
            baseline.load_state_dict(self.state["done"][key]["weights"])
            baselines[name] = baseline
        if self.tensorboard is not None:
            self.tensorboard.close()
        return self._report(predecessor, compact, baselines)

    def _distillation_loss(self, teacher: nn.Module) -> Callable[[nn.Module, Any], torch.Tensor]:
        """Vanilla KD: ``alpha`` · task loss + ``(1 - alpha)`` · T² · KL(teacher ‖ student) at temperature T
        (mean squared error between the outputs when they are single regression values)."""
        teacher = copy.deepcopy(teacher).to(self.accelerator.device).eval().requires_grad_(False)
        alpha, temperature = self.recipe.kd_alpha, self.recipe.kd_temperature

        def loss(student: nn.Module, batch: Any) -> torch.Tensor:
            with torch.no_grad():
                target = self.task.logits(teacher, batch)
            logits = self.task.logits(student, batch)
            if logits.shape[-1] == 1:
                soft = F.mse_loss(logits, target)
            else:
                soft = (
                    F.kl_div(
                        F.log_softmax(logits / temperature, dim=-1),
                        F.log_softmax(target / temperature, dim=-1),
                        log_target=True,
                        reduction="batchmean",
                    )
                    * temperature**2
                )
            return alpha * self.task.loss(student, batch) + (1 - alpha) * soft

        return loss

    def _train(
        self,
        phase_name: str,
        model: nn.Module,
        parameters: list[nn.Parameter],
        phase: Phase,
        theseus: th.Theseus | None = None,
        schedule: Callable[[int], float] | None = None,
        loss: Callable[[nn.Module, Any], torch.Tensor] | None = None,
    ) -> None:
        """Trains one phase, evaluating and checkpointing every ``phase.eval_every`` steps; ``loss(model, batch)``
        defaults to the task's loss."""
        compute_loss = loss or self.task.loss
        optimizer = torch.optim.AdamW(parameters, lr=phase.lr)
        model, optimizer = self.accelerator.prepare(model, optimizer)
        unwrapped = self.accelerator.unwrap_model(model)
        current = self.state.get("current")
        if current is not None and current["phase"] == phase_name:  # resuming inside this phase
            unwrapped.load_state_dict(current["weights"])
            optimizer.load_state_dict(current["optimizer"])
            if theseus is not None:
                theseus.load_state_dict(current["routing"])
            _set_rng_state(current["rng"])
            step, best = current["step"], current["best"]
        else:
            step, best = 0, {"metric": -float("inf"), "step": 0, "weights": None, "evaluations_since": 0}

        def checkpoint() -> None:
            self.save(
                current={
                    "phase": phase_name,
                    "step": step,
                    "weights": _cpu_state(unwrapped),
                    "optimizer": optimizer.state_dict(),
                    "routing": theseus.state_dict() if theseus is not None else None,
                    "rng": _rng_state(),
                    "best": best,
                }
            )

        if step == 0:
            checkpoint()  # a crash before the first evaluation resumes with this phase's RNG state

        train = self.task.dataset("train")
        per_process = max(1, phase.batch_size // self.accelerator.num_processes)
        steps_per_epoch = max(1, len(train) // phase.batch_size)
        bar = tqdm(total=phase.steps, initial=step, desc=phase_name, disable=not self.progress, leave=False)
        stop = False
        while step < phase.steps and not stop:
            epoch, offset = divmod(step, steps_per_epoch)
            order = torch.randperm(len(train), generator=torch.Generator().manual_seed(self.recipe.seed * 1000 + epoch))
            for index in range(offset, steps_per_epoch):
                batch_indices = order[index * phase.batch_size : (index + 1) * phase.batch_size]
                mine = batch_indices[self.accelerator.process_index :: self.accelerator.num_processes][:per_process]
                batch = _to(self.task.collate([train[int(i)] for i in mine]), self.accelerator.device)
                if theseus is not None:
                    theseus.rate = schedule(step)
                model.train()
                value = compute_loss(model, batch)
                if value.requires_grad:  # every group on its frozen predecessor: nothing to learn this step
                    self.accelerator.backward(value)
                    optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                bar.update(1)
                record = {"phase": phase_name, "step": step, "loss": value.item()}
                if theseus is not None:
                    record["rate"] = theseus.rate
                evaluate = step % phase.eval_every == 0 or step == phase.steps
                if evaluate:
                    metrics = self.task.evaluate(unwrapped, "dev")
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
        done = {"weights": best["weights"], "best_metric": best["metric"], "best_step": best["step"], "steps": step}
        self.state["done"][phase_name] = done
        self.save(current=None)

    # ------------------------------------------------------------------ report
    def _report(self, predecessor: nn.Module, compact: nn.Module, baselines: dict[str, nn.Module]) -> dict[str, Any]:
        models = {"predecessor": predecessor, "theseus": compact, **{f"baseline:{k}": v for k, v in baselines.items()}}
        report: dict[str, Any] = {"recipe": self.recipe.to_dict(), "metric": self.task.metric, "models": {}}
        export_dir = self.out / "model"
        files = self.task.export(compact, export_dir)
        for name, model in models.items():
            model.eval()
            report["models"][name] = {
                "test": self.task.evaluate(model, "test"),
                "parameters": sum(p.numel() for p in model.parameters()),
            }
        report["models"]["theseus"]["size_on_disk_bytes"] = sum(f.stat().st_size for f in files)
        reference = report["models"]["predecessor"]["test"][self.task.metric]
        for entry in report["models"].values():
            entry["retention_percent"] = 100.0 * entry["test"][self.task.metric] / reference if reference else None
        report["speedup"] = self._speedup(predecessor, compact)
        report["phases"] = {k: {kk: v for kk, v in d.items() if kk != "weights"} for k, d in self.state["done"].items()}
        if self.accelerator.is_main_process:
            (self.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
            (self.out / "report.md").write_text(markdown_report(report))
            plot_curves(self.out / "metrics.jsonl", self.out / "curves.png", self.task.metric)
        return report

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


def _finished_predecessor(run: Path, recipe: Recipe) -> dict[str, Any]:
    """The fine-tuned predecessor phase of the run in ``run``, checked to be the one ``recipe`` would train."""
    if not (run / CHECKPOINT).exists():
        raise RunError(f"--predecessor-from: no {CHECKPOINT} in {run}")
    state = torch.load(run / CHECKPOINT, weights_only=False)
    if "predecessor" not in state["done"]:
        raise RunError(f"--predecessor-from: the run in {run} has not finished fine-tuning its predecessor")
    theirs, ours = state["recipe"], recipe.to_dict()
    differing = [key for key in ("family", "options", "predecessor") if theirs[key] != ours[key]]
    if differing:
        raise RunError(
            f"--predecessor-from: the run in {run} has another {', '.join(differing)}; its predecessor "
            f"is not the one this recipe trains"
        )
    return state["done"]["predecessor"]


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


def markdown_report(report: dict[str, Any]) -> str:
    metric = report["metric"]
    lines = [
        f"# Compression report: {report['recipe']['name']}\n",
        f"{report['recipe']['description']}\n",
        f"| model | test {metric} | retention | parameters |",
        "|---|---|---|---|",
    ]
    for name, entry in report["models"].items():
        retention = f"{entry['retention_percent']:.1f}%" if entry["retention_percent"] is not None else "n/a"
        lines.append(f"| {name} | {entry['test'][metric]:.4f} | {retention} | {entry['parameters']:,} |")
    size = report["models"]["theseus"]["size_on_disk_bytes"] / 2**20
    lines.append(
        f"\nThe exported successor takes {size:.2f} MiB on disk and runs {report['speedup']:.2f}× as fast as the "
        f"predecessor (measured, eager, median of per-turn ratios)."
    )
    return "\n".join(lines) + "\n"


def plot_curves(metrics_path: Path, png: Path, metric: str) -> None:
    """The replacing rate and the dev metric over steps, per phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    figure, (rate_axis, metric_axis) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for phase in dict.fromkeys(r["phase"] for r in records):
        rows = [r for r in records if r["phase"] == phase]
        if "rate" in rows[0]:
            rate_axis.plot([r["step"] for r in rows], [r["rate"] for r in rows], label=phase)
        evaluated = [r for r in rows if "dev" in r]
        metric_axis.plot([r["step"] for r in evaluated], [r["dev"][metric] for r in evaluated], "o-", label=phase)
    rate_axis.set_ylabel("replacing rate p")
    rate_axis.set_ylim(-0.05, 1.05)
    metric_axis.set_ylabel(f"dev {metric}")
    metric_axis.set_xlabel("optimizer step (within its phase)")
    for axis in (rate_axis, metric_axis):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(png, dpi=110)
    plt.close(figure)
