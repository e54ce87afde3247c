"""What a budget search (`theseus_core.search`) may put in place of each group of a transformers model's plan.

`candidates` gives, per group of `theseus_adapters.hf.plan`:

- ``keep``: the group's own layers; ``skip``: the identity (the layers dropped, where the model's layers take and
  give the hidden states alone); ``one``: the plan's successor (a copy of one of the group's layers, or its slim or
  quantized form as the plan is asked), given as the plan itself, so that the search verifies every candidate, and
  finalizes the chosen model, on the plan's `theseus_core.Plan.more_examples` too (tokens past any attention window).
- `LAYER_FORMS`, one layer started from the group's first layer (`theseus_adapters.slim`): ``no_attention`` and
  ``no_ffn`` (the sublayer taken out with what only it uses, `slim.remove_sublayer_`: the layer computes what it
  computed with that sublayer's residual branch set to 0), ``ffn_half`` and ``ffn_quarter`` (the FFN neurons of
  largest weight-magnitude importance kept, `slim.prune_layer_`). Offered for every group; a layer whose layout
  cannot take that form (`slim.SLIM_LAYOUTS` knows BERT-like and Llama-like layers) refuses it in one line, and the
  search leaves it out of the group (`theseus_core.search.CandidateLibrary.refused`).

The hook the chosen plan finalizes with splices the stack (`theseus_core.candidates.splice_`) and makes the config
agree with it (`theseus_adapters.hf_stack.sync_config`: the layer count; each layer's ``layer_idx`` renumbered from
its own; the per-layer config entries of the layer each stands for, a kept layer its own and any other, where layers
carry no index (DistilBERT, ViT), its group's last, whose entries `theseus_adapters.hf.plan` checked the group
shares; and `slim.sync_slim`: the layers' sizes). A choice whose layers all have one shape, attention and FFN each
(``keep``, ``skip`` and ``one``, slim or not, or one FFN width for every layer), writes those sizes into the config's
own fields and reloads in plain transformers; a choice of mixed shapes or with a sublayer removed writes one form per
layer into ``config.theseus_layers``, and `theseus_adapters.hf.load_pretrained` rebuilds it.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

import theseus_core as th
from theseus_core.candidates import Kept, Skip, splice_

from .hf import _sync_undoably
from .hf_stack import index_attributes, layer_stack
from .slim import prune_layer_, remove_sublayer_, slim_layout

LAYER_FORMS: dict[str, Callable[[nn.Module], nn.Module]] = {
    "no_attention": functools.partial(remove_sublayer_, sublayer="attention"),
    "no_ffn": functools.partial(remove_sublayer_, sublayer="ffn"),
    "ffn_half": lambda layer: _narrow_ffn(layer, 2),
    "ffn_quarter": lambda layer: _narrow_ffn(layer, 4),
}
"""The one-layer candidates beside ``keep``, ``skip`` and ``one``: name -> what is done, in place, to a copy of the
group's first layer."""


def _narrow_ffn(layer: nn.Module, divisor: int) -> nn.Module:
    width = layer.get_submodule(slim_layout(layer).ffn_out).in_features
    return prune_layer_(layer, intermediate_size=max(1, width // divisor))


def layer_form_successor(form: str) -> th.spec.SuccessorFactory:
    """The successor factory of the candidate ``form`` (a key of `LAYER_FORMS`): a copy of the group's first layer
    in that form. Raises `ValueError` in one line when the layer cannot take it (`slim.SLIM_LAYOUTS`)."""
    shape = LAYER_FORMS[form]

    def successor(group: list[nn.Module]) -> nn.Module:
        return shape(copy.deepcopy(group[0]))

    return successor


def candidates(
    model: nn.Module, base: th.Plan, stack: str | None = None
) -> tuple[dict[str, Sequence[th.ModuleSpec]], Callable[[nn.Module], Any]]:
    """Name -> one spec per group of ``base`` (the family's `theseus_adapters.hf.plan` of ``model``), and the hook a
    chosen plan finalizes with (module doc). ``model`` is only read."""
    found = layer_stack(model, stack)
    position = {id(layer): index for index, layer in enumerate(model.get_submodule(found.path))}
    groups = [[position[id(layer)] for layer in th.spec.resolve(model, spec.path).modules] for spec in base]

    def finalize(model: nn.Module) -> Any:
        stack = model.get_submodule(found.path)
        sources = []  # the predecessor layer each layer left stands for, which `sync_config` renumbers it from
        for chosen, indices in zip(stack.children(), groups, strict=True):  # one successor per group
            if isinstance(chosen, Kept):
                sources.extend(indices)
            elif not isinstance(chosen, Skip):  # its own layer_idx where it has one, else its group's last layer
                sources.append(index_attributes(chosen)[0][2] if index_attributes(chosen) else indices[-1])
        splice_(stack)
        return _sync_undoably(model, stack=found, sources=sources)

    offered = {"keep": th.keep_specs(base), "skip": th.skip_specs(base), "one": base}  # the plan: its more_examples
    for form in LAYER_FORMS:
        offered[form] = [th.ModuleSpec(spec.path, successor=layer_form_successor(form)) for spec in base]
    return offered, finalize
