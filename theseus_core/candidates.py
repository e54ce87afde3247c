"""The two candidates every group has in a budget search (`theseus_core.search`), and how they leave the model.

``keep`` (`keep_specs`) is the group's own layers, copied (`Kept` when there are several); ``skip`` (`skip_specs`)
is the identity (`Skip`), refused by `replace_` where the group changes shapes. After a searched model is finalized,
`splice_` puts a kept group's layers back where the group sat and removes a skipped one, so that the model is an
ordinary stack of its family's layers: a family's finalize hook calls it on the container its groups sit in.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from torch import nn

from .site import PredecessorChain
from .spec import ModuleSpec


def keep_specs(plan: Sequence[ModuleSpec]) -> list[ModuleSpec]:
    """For each group of ``plan``, the ``keep`` candidate: a copy of the group's own layers, in order (`Kept`)."""
    return [ModuleSpec(spec.path, successor=_copy_group) for spec in plan]


def skip_specs(plan: Sequence[ModuleSpec]) -> list[ModuleSpec]:
    """For each group of ``plan``, the ``skip`` candidate: `Skip`, the identity (refused where the group changes
    shapes)."""
    return [ModuleSpec(spec.path, successor=_identity) for spec in plan]


class Kept(PredecessorChain):
    """The ``keep`` candidate of a group of several modules: copies of them, run in order as the group ran (the
    primary input threaded through, every other input to each). A family's finalize hook splices ``layers`` back
    into the model."""


def splice_(container: nn.Module) -> None:
    """In place: in ``container`` (an ``nn.Sequential`` or ``nn.ModuleList``, kept as the same object), every `Kept`
    replaced by its layers and every `Skip` removed: what a family's finalize hook does where its groups sat, so
    that a searched model is an ordinary stack of the family's layers."""
    flat: list[nn.Module] = []
    for module in container.children():
        if isinstance(module, Skip):
            continue
        flat.extend(module.layers if isinstance(module, Kept) else [module])
    for key in list(container._modules):
        del container._modules[key]
    for index, module in enumerate(flat):
        container.add_module(str(index), module)


def _copy_group(group: list[nn.Module]) -> nn.Module:
    return copy.deepcopy(group[0]) if len(group) == 1 else Kept(copy.deepcopy(group))


class Skip(nn.Module):
    """The ``skip`` candidate: the group's primary input, unchanged, whatever else the group is called with (a
    GNN layer's ``edge_index``, a block's mask). A family's finalize hook removes it from the model."""

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        return x


def _identity(group: list[nn.Module]) -> nn.Module:
    return Skip()
