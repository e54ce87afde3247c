"""What the harness trains and in which order: parameter groups, replacing schedules, data order.

Set up as the reference ``run_glue.py`` of BERT-of-Theseus: AdamW without weight decay on biases and
normalization weights, and every phase's data order of its own.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import theseus_core as th
from theseus_core.spec import resolve

from ..recipes import Phase, Recipe
from ..tasks.protocols import HasHead

ParameterGroup = tuple[str, list[nn.Parameter]]


def predecessor_parameters(model: nn.Module) -> list[ParameterGroup]:
    """Every parameter of ``model``, as one group: fine-tuning trains them all."""
    return [("all", list(model.parameters()))]


def _is_normalization(module: nn.Module) -> bool:
    """LayerNorm, BatchNorm, GroupNorm and the like, including families' own (``LlamaRMSNorm``, ``T5LayerNorm``)."""
    return isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)) or (
        "Norm" in type(module).__name__
    )


def optimizer_groups(model: nn.Module, parameters: list[nn.Parameter], weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups of ``parameters``: weight decay on weights, none on biases and normalization weights (the
    reference code's ``no_decay = ["bias", "LayerNorm.weight"]``, by module type rather than by name)."""
    exempt = {
        id(parameter)
        for module in model.modules()
        for name, parameter in module.named_parameters(recurse=False)
        if name.endswith("bias") or _is_normalization(module)
    }
    decay = [parameter for parameter in parameters if id(parameter) not in exempt]
    no_decay = [parameter for parameter in parameters if id(parameter) in exempt]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def adamw(model: nn.Module, parameters: list[nn.Parameter], phase: Phase) -> torch.optim.AdamW:
    """AdamW over ``parameters`` (of ``model``) with the phase's rate and weight decay (none on biases and norms)."""
    return torch.optim.AdamW(optimizer_groups(model, parameters, phase.weight_decay), lr=phase.lr)


def unfrozen_at_one(model: nn.Module, theseus: th.Theseus, which: str, task: Any) -> list[nn.Parameter]:
    """The parameters outside the groups that ``unfreeze_at_one`` trains once p = 1: all of them (``"all"``), or
    those the task calls its head (``"head"``: `Task.is_head` on the parameter's name)."""
    inside = {id(parameter) for site in theseus.sites for parameter in site.parameters()}
    return _outside(model, inside, which, task)


def check_unfreeze(predecessor: nn.Module, which: str, task: Any) -> None:
    """Raises `ValueError` now, before anything trains, where `unfrozen_at_one` would raise once the replacing stage
    is built: on a copy of ``predecessor`` on the meta device (no weight copied or changed), planned by the task,
    whose groups would hold every parameter (GCN's layers) or every ``"head"`` parameter."""
    tensors = [*predecessor.parameters(), *predecessor.buffers()]
    on_meta = {  # deepcopy's memo: each tensor's copy is its meta twin, once, however often it is shared
        id(tensor): nn.Parameter(tensor.to("meta"), tensor.requires_grad)
        if isinstance(tensor, nn.Parameter)
        else tensor.to("meta")
        for tensor in tensors
    }
    model = copy.deepcopy(predecessor, on_meta)  # no weight copied, tied parameters kept tied
    inside = {
        id(parameter)
        for spec in task.plan(model)
        for module in resolve(model, spec.path).modules
        for parameter in module.parameters()
    }
    _outside(model, inside, which, task)


def _outside(model: nn.Module, inside: set[int], which: str, task: Any) -> list[nn.Parameter]:
    outside = [(name, parameter) for name, parameter in model.named_parameters() if id(parameter) not in inside]
    if which == "head":
        if not isinstance(task, HasHead):
            raise ValueError(f"unfreeze_at_one='head' needs a task that names its head, not {type(task).__name__}")
        outside = [(name, parameter) for name, parameter in outside if task.is_head(name)]
    if not outside:
        what = "parameter" if which == "all" else "parameter of the head"
        raise ValueError(f"unfreeze_at_one={which!r} finds nothing to train: the groups hold every {what}")
    return [parameter for _, parameter in outside]


def replacing_schedule(recipe: Recipe, steps_to_one: int | None = None) -> Callable[[int], float]:
    """p(step) for the recipe's ``schedule``: the curriculum, a constant rate or the anti-curriculum until
    ``steps_to_one`` (default: the recipe's), then 1 (successor fine-tuning), as in the paper's Table 6."""
    steps_to_one = recipe.steps_to_one if steps_to_one is None else steps_to_one
    curriculum = th.LinearSchedule.reaching_one_at(steps_to_one, base=recipe.schedule_base)
    if recipe.schedule == "curriculum":
        return curriculum
    before = (
        th.ConstantSchedule(recipe.schedule_base)
        if recipe.schedule == "constant"
        else th.AntiCurriculumSchedule(curriculum.base, curriculum.k)
    )

    def schedule(step: int) -> float:
        return 1.0 if step >= steps_to_one else before(step)

    return schedule


def data_order_generator(seed: int, stream: str, epoch: int) -> torch.Generator:
    """The generator of one epoch's data order. Each ``stream`` has orders of its own: the compression phase
    (Theseus and the baselines, which see the same order: a paired comparison) does not replay the order the
    predecessor was just fine-tuned on."""
    digest = hashlib.sha256(f"{seed}:{stream}:{epoch}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
