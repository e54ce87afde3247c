"""How a stage's model is spread over the ranks (``theseus compress --parallel``): `DataParallel`, every rank the
whole model under accelerate's DDP wrapper (the default), or `FullyShardedDataParallel`, PyTorch's FSDP2
(``torch.distributed.fsdp.fully_shard``), each layer's parameters, gradients and optimizer state split across the
ranks, for models whose training state does not fit one device.

`train_phase` (`theseus_zoo.training.loop`) runs any of them through the same seams: `prepare` (the model the loss
runs, its optimizer, the trained parameters as the optimizer holds them), `backward`, `clip_grad_norm_`,
`snapshot` and `restore` (the stage in progress, for checkpoints), `best` and `best_weights` (the best state so far,
and its full weights once the stage ends) and `finish`.

Under FSDP2 the stage trains a sharded *twin* of its model: a copy whose family layers (`ShardsLayers`: a decoder's
layers; under Theseus the predecessor's frozen layers and each successor) are each an FSDP2 unit, and the rest (the
embeddings, the final norm and the head) the root's, on a one-dimensional device mesh over every rank (``"cpu"``
with gloo, ``"cuda"`` with nccl). The twin's sites route through the model's own `theseus_core.Theseus` handle
(`Theseus.share_routes`), so the rate the loop sets, the routes drawn (the same on every rank, from the handle's
generator) and the routing state a checkpoint keeps are the handle's. The model itself stays whole and untouched
until the stage ends, when it takes the best state's full weights: what follows (the report, the export) sees the
ordinary model a one-process run has. On a GPU the twin computes in bf16 and reduces gradients in fp32
(``MixedPrecisionPolicy``), and the layers frozen for the whole stage (the predecessor's) are stored in bf16, which
changes nothing the policy computes (it casts them to bf16 before every all-gather) and halves their bytes. With
``activation_checkpointing`` each unit recomputes its activations in the backward pass instead of keeping them.

A stage's progress under FSDP2 is a `torch.distributed.checkpoint` directory per checkpointed step,
``<out>/sharded/<stage>-<step>`` (the model's and AdamW's state, every rank writing its own shards), which the
run's checkpoint file names instead of holding the tensors; the best state is the directory of its step. The run
keeps the directories its checkpoint and the previous one name (`Session.save`), so that a kill at any moment
leaves a checkpoint whose directories are complete.
"""

from __future__ import annotations

import copy
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from ..recipes import Phase
from ..tasks.protocols import ShardsLayers
from . import ranks
from .optimization import adamw

if TYPE_CHECKING:
    from accelerate import Accelerator

    from ..tasks import Task
    from .methods import Objective
    from .state import Best, StageProgress, Weights

SHARDED = "sharded"
"""The folder of a run directory that holds the sharded checkpoints of `FullyShardedDataParallel`."""

Kind = Literal["ddp", "fsdp"]


@dataclass(frozen=True)
class Parallelism:
    """How ``theseus compress`` spreads a stage over the ranks: ``kind`` ``"ddp"`` (every rank the whole model,
    gradients averaged) or ``"fsdp"`` (FSDP2, layer by layer; needs torchrun and a family that names its layers,
    `ShardsLayers`); ``activation_checkpointing`` (``"fsdp"`` only) recomputes each layer's activations in the
    backward pass. (default: ``"ddp"``, ``False``)"""

    kind: Kind = "ddp"
    activation_checkpointing: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("ddp", "fsdp"):
            raise ValueError(f"--parallel must be ddp or fsdp, got {self.kind!r}")
        if self.activation_checkpointing and self.kind != "fsdp":
            raise ValueError("--activation-checkpointing goes with --parallel fsdp")


@dataclass
class Prepared:
    """A stage's model as it trains: ``model`` (what the loss runs), ``evaluated`` (what dev evaluation runs; the
    DDP wrapper's module), ``optimizer``, and the objective's ``trained`` and ``late`` parameters as the optimizer
    holds them; ``model_in`` is the stage's own model, which takes the best weights at the end."""

    model: nn.Module
    evaluated: nn.Module
    optimizer: torch.optim.Optimizer
    trained: list[nn.Parameter]
    late: list[nn.Parameter]
    model_in: nn.Module


def cpu_state(model: nn.Module) -> Weights:
    """A copy of ``model``'s state dict on the CPU."""
    return {key: tensor.detach().to("cpu", copy=True) for key, tensor in model.state_dict().items()}


def sharded_directory(stage: str, step: int) -> str:
    """Where, relative to the run directory, FSDP2 checkpoints stage ``stage`` at ``step``."""
    return f"{SHARDED}/{stage.replace(':', '_').replace('+', '_')}-{step:07d}"


class DataParallel:
    """Every rank holds the whole model, under accelerate's DDP wrapper when there are several (`Session`'s
    accelerator); the checkpoint file holds the weights and the optimizer's state."""

    sharded = False

    def __init__(self, accelerator: Accelerator) -> None:
        self.accelerator = accelerator

    def prepare(self, model: nn.Module, objective: Objective, phase: Phase) -> Prepared:
        optimizer = adamw(model, objective.trained, phase)
        wrapped, optimizer = self.accelerator.prepare(model, optimizer)
        unwrapped = self.accelerator.unwrap_model(wrapped)
        return Prepared(wrapped, unwrapped, optimizer, objective.trained, objective.late, model)

    def backward(self, prepared: Prepared, value: torch.Tensor, outside_wrapper: bool) -> None:
        self.accelerator.backward(value)
        if outside_wrapper:  # DDP averaged none of these gradients
            ranks.average_gradients(prepared.trained)

    def clip_grad_norm_(self, prepared: Prepared, max_norm: float) -> float:
        return float(self.accelerator.clip_grad_norm_(prepared.trained, max_norm))

    def snapshot(self, prepared: Prepared, out: Path, stage: str, step: int) -> tuple[Weights, dict, str | None]:
        """The stage's weights, the optimizer's state, and no sharded directory."""
        return cpu_state(prepared.evaluated), prepared.optimizer.state_dict(), None

    def restore(self, prepared: Prepared, out: Path, progress: StageProgress) -> None:
        prepared.evaluated.load_state_dict(progress.weights)
        prepared.optimizer.load_state_dict(progress.optimizer)

    def best(self, prepared: Prepared, stage: str, step: int) -> tuple[Weights | None, str | None]:
        """The best state's weights now (a copy), or the sharded directory where `snapshot` will write them."""
        return cpu_state(prepared.evaluated), None

    def best_weights(self, prepared: Prepared, out: Path, best: Best) -> Weights | None:
        """The best state's full weights, the same on every rank."""
        return best.weights

    def finish(self, prepared: Prepared) -> None:
        """Done with the stage (its model has its best weights)."""


class FullyShardedDataParallel(DataParallel):
    """FSDP2 layer by layer over every rank (the module doc); ``task`` names the layers (`ShardsLayers`)."""

    sharded = True

    def __init__(self, accelerator: Accelerator, task: Task, activation_checkpointing: bool = False) -> None:
        super().__init__(accelerator)
        if not isinstance(task, ShardsLayers):
            raise ValueError("--parallel fsdp needs a family that names its layers (ShardsLayers)")
        self.task, self.activation_checkpointing = task, activation_checkpointing
        self.device = accelerator.device
        from torch.distributed.device_mesh import init_device_mesh

        self.mesh = init_device_mesh(self.device.type, (accelerator.num_processes,))

    @property
    def mixed_precision(self) -> bool:
        """bf16 parameters and fp32 gradient reduction: on GPUs only (CPUs train in fp32, as the one-process run)."""
        return self.device.type == "cuda"

    def prepare(self, model: nn.Module, objective: Objective, phase: Phase) -> Prepared:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        twin = copy.deepcopy(model)  # the stage's model stays whole; the twin is sharded below
        if objective.theseus is not None:
            objective.theseus.share_routes(twin)
        trained, late = _twin_parameters(model, twin, objective.trained), _twin_parameters(model, twin, objective.late)
        units = self.task.shard_units(twin)
        before = dict(twin.named_parameters())
        learning = {id(before[name]) for name in [*trained, *late]}
        options: dict = {"mesh": self.mesh}
        if self.mixed_precision:
            options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for unit in units:
            if self.mixed_precision and not any(id(parameter) in learning for parameter in unit.parameters()):
                unit.to(torch.bfloat16)  # frozen all stage: the policy casts it to bf16 before every all-gather
            if self.activation_checkpointing:
                from torch.distributed._composable import checkpoint

                checkpoint(unit)
            fully_shard(unit, **options)
        fully_shard(twin, **options)  # the rest: embeddings, final norm, head
        by_name = dict(twin.named_parameters())  # fully_shard swapped in its sharded parameters: find them again
        trained, late = [by_name[name] for name in trained], [by_name[name] for name in late]
        optimizer = adamw(twin, trained, phase)
        _start_adam_state(optimizer)
        return Prepared(twin, twin, optimizer, trained, late, model)

    def backward(self, prepared: Prepared, value: torch.Tensor, outside_wrapper: bool) -> None:
        value.backward()  # FSDP2 reduce-scatters the gradients, averaged over ranks

    def clip_grad_norm_(self, prepared: Prepared, max_norm: float) -> float:
        norm = torch.nn.utils.clip_grad_norm_(prepared.trained, max_norm)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # a DTensor: each rank's part

    def _states(self, prepared: Prepared) -> dict:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optimizer = get_state_dict(prepared.model, prepared.optimizer)
        return {"model": model, "optimizer": optimizer}

    def snapshot(self, prepared: Prepared, out: Path, stage: str, step: int) -> tuple[Weights, dict, str | None]:
        """Every rank writes its shards of the model and AdamW into the step's directory; nothing for the file."""
        import torch.distributed.checkpoint as dcp

        directory = sharded_directory(stage, step)
        dcp.save(self._states(prepared), checkpoint_id=out / directory)
        return {}, {}, directory

    def restore(self, prepared: Prepared, out: Path, progress: StageProgress) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        if progress.sharded is None:
            raise ValueError("--resume: this stage was checkpointed without --parallel fsdp; resume it without")
        states = self._states(prepared)
        dcp.load(states, checkpoint_id=out / progress.sharded)
        set_state_dict(
            prepared.model, prepared.optimizer, model_state_dict=states["model"], optim_state_dict=states["optimizer"]
        )

    def best(self, prepared: Prepared, stage: str, step: int) -> tuple[Weights | None, str | None]:
        return None, sharded_directory(stage, step)  # the snapshot of this step, written next

    def best_weights(self, prepared: Prepared, out: Path, best: Best) -> Weights | None:
        """The best step's model loaded into the twin, then gathered, one tensor at a time, on every rank."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

        if best.sharded is not None:
            state = {"model": get_model_state_dict(prepared.model)}
            dcp.load(state, checkpoint_id=out / best.sharded)
            set_model_state_dict(prepared.model, state["model"])
        dtypes = {key: tensor.dtype for key, tensor in prepared.model_in.state_dict().items()}
        weights = {}
        for key, tensor in prepared.model.state_dict().items():
            full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor  # an all-gather
            weights[key] = full.detach().to("cpu", dtypes.get(key, full.dtype), copy=True)
        return weights

    def finish(self, prepared: Prepared) -> None:
        """The stage's own model on the device, as DDP's preparation leaves it (the report runs it there)."""
        prepared.model_in.to(self.device)


def _start_adam_state(optimizer: torch.optim.Optimizer) -> None:
    """Gives every parameter the state AdamW would give it at its first gradient (step 0, zero moments), so that
    every checkpoint holds the same entries, whichever successors have had a gradient yet, and a sharded state
    dict never takes the step ``torch.distributed.checkpoint.state_dict`` runs to fill an empty optimizer (lr 0, but
    every parameter's step count at 1, which changes AdamW's bias correction). AdamW skips a parameter without
    gradient, state or not: this changes no update."""
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            optimizer.state[parameter] = {
                "step": torch.tensor(0.0, dtype=torch.float32),
                "exp_avg": torch.zeros_like(parameter, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(parameter, memory_format=torch.preserve_format),
            }


def _twin_parameters(model: nn.Module, twin: nn.Module, parameters: list[nn.Parameter]) -> list[str]:
    """The names of ``parameters`` (of ``model``), which name the same parameters of its copy ``twin``."""
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    missing = [parameter for parameter in parameters if id(parameter) not in names]
    if missing:
        raise ValueError(f"{len(missing)} trained parameter(s) are not the stage's model's: FSDP2 cannot shard them")
    return [names[id(parameter)] for parameter in parameters]


def parallel_for(parallelism: Parallelism, accelerator: Accelerator, task: Task) -> DataParallel:
    """The strategy ``parallelism`` asks for."""
    if parallelism.kind == "fsdp":
        return FullyShardedDataParallel(accelerator, task, parallelism.activation_checkpointing)
    return DataParallel(accelerator)


def prune_sharded(out: Path, keep: set[str], everything: bool = False) -> None:
    """Deletes the sharded checkpoint directories of ``out`` that are not in ``keep`` (relative paths), and with
    ``everything`` the folder that held them."""
    folder = out / SHARDED
    if not folder.is_dir():
        return
    for directory in folder.iterdir():
        if f"{SHARDED}/{directory.name}" not in keep:
            shutil.rmtree(directory, ignore_errors=True)
    if everything and not keep:
        shutil.rmtree(folder, ignore_errors=True)
