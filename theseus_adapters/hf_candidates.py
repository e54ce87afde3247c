"""What a budget search (`theseus_core.search`) may put in place of each group of a transformers model's plan.

`candidates` gives, per group of `theseus_adapters.hf.plan`: ``keep`` (the group's own layers), ``skip`` (the
identity: the layer is dropped, where the model's layers take and give the hidden states alone) and ``one`` (the
plan's successor: a copy of one of the group's layers, or its slim or quantized form as the plan is asked). The hook
the chosen plan finalizes with splices the stack (`theseus_core.search.splice_`) and then makes the config agree
with it (`theseus_adapters.hf_stack.sync_config`: the layer count, each layer's ``layer_idx`` renumbered from its
own), so the export reloads in plain transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

import theseus_core as th
from theseus_core.search import splice_

from .hf_stack import layer_stack, sync_config


def candidates(
    model: nn.Module, base: th.Plan, stack: str | None = None
) -> tuple[dict[str, list[th.ModuleSpec]], Callable[[nn.Module], Any]]:
    """Name -> one spec per group of ``base`` (the family's `theseus_adapters.hf.plan` of ``model``), and the hook a
    chosen plan finalizes with (module doc). ``model`` is only read."""
    found = layer_stack(model, stack)
    slim = any(spec.options.get("heads") or spec.options.get("intermediate_size") for spec in base)
    one_finalize = base.on_finalize

    def finalize(model: nn.Module) -> Any:
        splice_(model.get_submodule(found.path))
        if slim:  # the slim successors' widths go into the config as the plan's own hook writes them
            return one_finalize(model) if one_finalize is not None else None
        return sync_config(model, stack=found)

    return {"keep": th.keep_specs(base), "skip": th.skip_specs(base), "one": list(base)}, finalize
