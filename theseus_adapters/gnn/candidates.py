"""What a budget search (`theseus_core.search`) may put in place of each group of a stepped GNN's plan.

`candidates` gives, per group of ``plan(model, num_layers)``: ``keep`` (the group's own layers), ``skip`` (the
identity, where the group keeps the width: `theseus_core.replace_` refuses it elsewhere, e.g. on the group that ends
in the output layer) and ``one`` (the plan's default successor: one layer copied from the group's). `flatten_steps`
runs before the plan's own finalize hook, so that any choice converts back into an ordinary GNN: a kept group's
layers spliced into the stack, a skipped group gone.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

import theseus_core as th
from theseus_core.search import splice_

from .planning import plan
from .steps import GNNStack


def candidates(
    model: nn.Module, num_layers: int = 2, group_sizes: list[int] | None = None
) -> tuple[dict[str, list[th.ModuleSpec]], Callable[[nn.Module], object]]:
    """Name -> one spec per group of ``plan(model, num_layers, group_sizes=group_sizes)`` (module doc) and the hook
    a chosen plan finalizes with. ``model`` must be stepped (`to_steps_`); it is only read."""
    base = plan(model, num_layers, group_sizes=group_sizes)
    found = {"keep": th.keep_specs(base), "skip": th.skip_specs(base), "one": list(base)}
    convert_back = base.on_finalize

    def finalize(model: nn.Module) -> object:
        flatten_steps(model)
        return convert_back(model) if convert_back is not None else None

    return found, finalize


def flatten_steps(model: nn.Module) -> None:
    """In place: in every `GNNStack` of ``model``, kept groups spliced in and skipped ones removed
    (`theseus_core.search.splice_`)."""
    for stack in [module for module in model.modules() if isinstance(module, GNNStack)]:
        splice_(stack)
