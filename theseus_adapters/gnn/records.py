"""What a conversion to stepped form leaves on the model so that it can be undone (`_Record`), and the stateless
modules that layers shared, which each step gets a copy of (the core requires disjoint groups) and gets back after
(`_finish_conversion`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from torch import nn

from .steps import GNNStep


@dataclass
@dataclass
class _Record:
    """What `to_steps_` changed, kept on the stepped model so that `from_steps_` can undo it."""

    stack_name: str
    unshared: list[tuple[nn.Module, str, nn.Module]]  # (parent, child name, shared original) per copy


def _finish_conversion(model: nn.Module, record: _Record) -> None:
    """Puts back the stateless modules that `to_steps_` copied (where their parent is still in the model) and
    drops the record."""
    present = {id(module) for module in model.modules()}
    for parent, name, original in record.unshared:
        if id(parent) in present:
            parent._modules[name] = original
    del model.__dict__["_steps_record"]


def _has_state(module: nn.Module) -> bool:
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def _shared_modules(steps: list[GNNStep], name: str) -> set[int]:
    """Ids of modules reachable from two steps; raises if one of them holds parameters or buffers.

    GIN and EdgeCNN put the model's one activation module inside every layer's MLP. It holds no state,
    but the core rejects groups that share a module, so `_unshare` gives each step a copy.
    """
    first_step: dict[int, int] = {}
    shared: dict[int, nn.Module] = {}
    for index, step in enumerate(steps):
        for module in step.modules():
            if first_step.setdefault(id(module), index) != index:
                shared[id(module)] = module
    stateful = sorted({type(m).__name__ for m in shared.values() if _has_state(m)})
    if stateful:
        raise ValueError(f"layers of this {name} share {stateful} with parameters; each layer needs its own")
    return set(shared)


def _unshare(steps: list[GNNStep], shared: set[int]) -> list[tuple[nn.Module, str, nn.Module]]:
    """Gives every step but the first holding it its own copy of each shared (stateless) module."""
    copies: list[tuple[nn.Module, str, nn.Module]] = []
    keeper: dict[int, int] = {}

    def visit(parent: nn.Module, index: int) -> None:
        for key, child in list(parent._modules.items()):
            if child is None:
                continue
            if id(child) in shared and keeper.setdefault(id(child), index) != index:
                parent._modules[key] = copy.deepcopy(child)
                copies.append((parent, key, child))
            else:
                visit(child, index)

    for index, step in enumerate(steps):
        visit(step, index)
    return copies
