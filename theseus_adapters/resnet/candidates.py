"""What a budget search (`theseus_core.search`) may put in place of each group of a ResNet plan.

`candidates` gives, per group of ``plan(model, blocks)``: ``keep`` (the group's own blocks), ``skip`` (the identity,
where the group keeps its shape: `theseus_core.replace_` refuses it elsewhere), ``basic`` (the registry's default:
one block of the predecessor's kind started from the group's first) and each light block of `LIGHT_SUCCESSORS`
(at the group's widths and stride: fresh, but ``narrow_basic``, started from the group's first block, which a group
of Bottlenecks refuses: the search records that in `theseus_core.search.CandidateLibrary.refused`).
`flatten_stages`, the hook the search's plan finalizes with, leaves an ordinary ResNet: a kept group's blocks spliced
into its stage, a skipped group gone.
"""

from __future__ import annotations

from torch import nn

import theseus_core as th
from theseus_core.candidates import splice_

from .planning import BlocksPerStage, plan, stage_names
from .successors import LIGHT_SUCCESSORS


def candidates(model: nn.Module, blocks: BlocksPerStage = (2, 2, 2, 2)) -> dict[str, list[th.ModuleSpec]]:
    """Name -> one spec per group of ``plan(model, blocks)`` (module doc); ``model`` is only read."""
    base = plan(model, blocks)
    found = {"keep": th.keep_specs(base), "skip": th.skip_specs(base), "basic": list(base)}
    for name in LIGHT_SUCCESSORS:
        found[name] = list(plan(model, blocks, successor=name))
    return found


def flatten_stages(model: nn.Module) -> None:
    """In place: every stage's kept groups spliced in and its skipped ones removed (`theseus_core.candidates.splice_`),
    so that the stages hold blocks only, as `successor_blocks.export_config` reads them."""
    for name in stage_names(model):
        splice_(getattr(model, name))
