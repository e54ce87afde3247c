"""Hypothesis strategies over toy models: `toy_stacks`, `groupings`, `replacement_cases`.

Requires ``hypothesis`` (``pip install -e '.[testing]'`` in the clone).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import nn

try:
    from hypothesis import strategies as st
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "theseus_core.testing's strategies need hypothesis: pip install -e '.[testing]' in the clone"
    ) from error

from ..planning import copy_module
from ..spec import ModuleSpec
from .toys import ToyBlock, ToyStack


@st.composite
def toy_stacks(draw: st.DrawFn, max_blocks: int = 6, dropout: bool = True) -> ToyStack:
    """Random `ToyStack` models: 1..``max_blocks`` blocks, either container kind, random width."""
    num_blocks = draw(st.integers(1, max_blocks))
    width = draw(st.sampled_from([4, 8, 12]))
    container = draw(st.sampled_from(["sequential", "list"]))
    rate = draw(st.sampled_from([0.0, 0.2])) if dropout else 0.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(draw(st.integers(0, 2**16)))
        return ToyStack(in_features=5, width=width, num_blocks=num_blocks, dropout=rate, container=container)


@st.composite
def groupings(draw: st.DrawFn, num_modules: int, cover: bool = False) -> list[tuple[int, int]]:
    """Disjoint contiguous ``(start, stop)`` groups of ``range(num_modules)``, in order, at least one;
    with ``cover=True`` they partition the whole range."""
    cuts = draw(st.sets(st.integers(1, num_modules - 1))) if num_modules > 1 else set()
    bounds = [0, *sorted(cuts), num_modules]
    segments = list(itertools.pairwise(bounds))
    if cover:
        return segments
    keep = draw(st.lists(st.booleans(), min_size=len(segments), max_size=len(segments)).filter(any))
    return [segment for segment, kept in zip(segments, keep, strict=True) if kept]


def _narrower_block(width: int, tuple_output: bool):
    def factory(group: list[nn.Module]) -> nn.Module:
        return ToyBlock(width, dropout=group[0].dropout.p, tuple_output=tuple_output)

    return factory


@dataclass
class ReplacementCase:
    """A model, specs for it, and one batch: what `assert_replacement_equivalence` takes."""

    model: ToyStack
    specs: list[ModuleSpec]
    example_inputs: tuple[torch.Tensor, ...]


@st.composite
def replacement_cases(draw: st.DrawFn, max_blocks: int = 6, dropout: bool = True) -> ReplacementCase:
    """A random `ToyStack`, a random grouping of its blocks, and per group a successor that
    copies one of its blocks or a narrower block behind ``"linear"`` projections."""
    model = draw(toy_stacks(max_blocks=max_blocks, dropout=dropout))
    specs = []
    for start, stop in draw(groupings(len(model.blocks))):
        path = f"blocks[{start}:{stop}]"
        if draw(st.booleans()):
            specs.append(ModuleSpec(path, successor=copy_module(draw(st.integers(0, stop - start - 1)))))
        else:
            narrow = _narrower_block(draw(st.sampled_from([2, 3])), model.container == "list")
            specs.append(ModuleSpec(path, successor=narrow, in_proj="linear", out_proj="linear"))
    return ReplacementCase(model, specs, model.example_inputs(seed=draw(st.integers(0, 100))))
