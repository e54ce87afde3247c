"""Testing helpers for users of theseus_core as much as for its own tests.

- `assert_replacement_equivalence`: the contract of a replacement, checked on
  copies of your model (yours is never touched).
- Toy models with ``example_inputs()``: `ToyStack` (residual MLP blocks, in an
  ``nn.Sequential`` or in an ``nn.ModuleList`` whose blocks take an extra
  argument and return tuples, like Hugging Face layers) and `ToyConvNet`.
- Hypothesis strategies: `toy_stacks`, `groupings`, `replacement_cases`.

Requires ``hypothesis`` (``pip install 'theseus-compression[testing]'``).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

try:
    from hypothesis import strategies as st
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("theseus_core.testing needs hypothesis: pip install 'theseus-compression[testing]'") from error

from .engine import replace_
from .registry import copy_module
from .spec import ModuleSpec, Plan

# ------------------------------------------------------------------ toy models


class ToyBlock(nn.Module):
    """Pre-norm residual MLP block: ``x + scale · dropout(W2 relu(W1 LN(x))))``.

    Args:
        width: Feature width in and out.
        hidden: Width of the inner layer. (default: ``2 * width``)
        dropout: Dropout probability. (default: ``0.1``)
        tuple_output: Return ``(x,)`` instead of ``x``, as Hugging Face layers do.
    """

    def __init__(self, width: int, hidden: int | None = None, dropout: float = 0.1, tuple_output: bool = False):
        super().__init__()
        self.width = width
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden or 2 * width)
        self.fc2 = nn.Linear(hidden or 2 * width, width)
        self.dropout = nn.Dropout(dropout)
        self.tuple_output = tuple_output

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor]:
        update = self.dropout(self.fc2(torch.relu(self.fc1(self.norm(x)))))
        out = x + (update if scale is None else scale * update)
        return (out,) if self.tuple_output else out


class ToyStack(nn.Module):
    """``embed → blocks → head`` over ``[batch, in_features]`` inputs.

    With ``container="sequential"`` the blocks sit in an ``nn.Sequential``; with
    ``"list"`` they sit in an ``nn.ModuleList`` and are called in a loop with an
    extra ``scale`` argument and tuple outputs, like a transformer encoder.
    """

    def __init__(
        self,
        in_features: int = 8,
        width: int = 16,
        num_blocks: int = 4,
        num_classes: int = 3,
        dropout: float = 0.1,
        container: str = "sequential",
    ):
        super().__init__()
        if container not in ("sequential", "list"):
            raise ValueError(f"container must be 'sequential' or 'list', got {container!r}")
        self.in_features = in_features
        self.container = container
        self.embed = nn.Linear(in_features, width)
        blocks = [ToyBlock(width, dropout=dropout, tuple_output=container == "list") for _ in range(num_blocks)]
        self.blocks = nn.Sequential(*blocks) if container == "sequential" else nn.ModuleList(blocks)
        self.head = nn.Linear(width, num_classes)
        self.register_buffer("scale", torch.tensor(0.75))  # an extra argument for every block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(x)
        if self.container == "sequential":
            hidden = self.blocks(hidden)
        else:
            for block in self.blocks:
                hidden = block(hidden, scale=self.scale)[0]
        return self.head(hidden)

    def example_inputs(self, batch_size: int = 4, seed: int = 0) -> tuple[torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        return (torch.randn(batch_size, self.in_features, generator=generator),)


class ToyConvBlock(nn.Module):
    """Residual ``conv3×3 → batch norm → relu`` block on ``[batch, channels, H, W]``."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.bn(self.conv(x)))


class ToyConvNet(nn.Module):
    """``stem → blocks → pool → head`` over ``[batch, 3, size, size]`` images."""

    def __init__(self, channels: int = 8, num_blocks: int = 4, num_classes: int = 3, size: int = 8):
        super().__init__()
        self.size = size
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.Sequential(*(ToyConvBlock(channels) for _ in range(num_blocks)))
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))

    def example_inputs(self, batch_size: int = 4, seed: int = 0) -> tuple[torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        return (torch.randn(batch_size, 3, self.size, self.size, generator=generator),)


# ----------------------------------------------------------------- equivalence


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, Mapping):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def _assert_outputs(actual: Any, expected: Any, message: str, rtol: float, atol: float) -> None:
    actual, expected = _tensors(actual), _tensors(expected)
    if len(actual) != len(expected):
        raise AssertionError(f"{message}: {len(actual)} output tensors instead of {len(expected)}")
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, msg=lambda detail: f"{message}\n{detail}")


def _run(model: nn.Module, training: bool, seed: int, inputs: tuple, kwargs: dict) -> Any:
    """One forward with the global RNG seeded (same dropout masks), without disturbing the caller's RNG."""
    model.train(training)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        return model(*inputs, **kwargs)


def assert_replacement_equivalence(
    model: nn.Module,
    specs: Sequence[ModuleSpec] | Plan,
    example_inputs: tuple[Any, ...],
    example_kwargs: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    rtol: float = 1.3e-6,
    atol: float = 1e-5,
    **replace_options: Any,
) -> None:
    """Checks that replacing ``specs`` in ``model`` behaves as Theseus compression must.

    On deep copies of ``model`` (the model itself is never changed):

    1. rate 0 in training mode reproduces the original model exactly (same
       torch seed, so the same dropout masks);
    2. rate 1 in training mode equals the finalized model in training mode;
    3. eval mode equals the finalized model in eval mode;
    4. after a backward pass, only successor and projection parameters (and,
       with ``train_others=True``, parameters outside the groups) have gradients;
    5. `Theseus.restore` gives back the original state_dict exactly.

    Args:
        model: The model to check; left untouched.
        specs: What `replace_` would get.
        example_inputs, example_kwargs: One batch for ``model(*example_inputs, **example_kwargs)``.
        seed: Seeds both the routes and the global RNG for dropout. (default: ``0``)
        rtol, atol: Tolerances for checks 2 and 3 (check 1 is exact).
        **replace_options: Passed to `replace_` (e.g. ``train_others=True``).

    Raises:
        AssertionError: Naming the property that failed.
    """
    kwargs = dict(example_kwargs or {})
    inputs = tuple(example_inputs)

    work = copy.deepcopy(model)
    original = _run(work, True, seed, inputs, kwargs)
    theseus = replace_(work, specs, seed=seed, example_inputs=inputs, example_kwargs=kwargs, **replace_options)
    theseus.rate = 0.0
    _assert_outputs(_run(work, True, seed, inputs, kwargs), original, "rate 0 differs from the original model", 0, 0)
    theseus.rate = 1.0
    all_successors = _run(work, True, seed, inputs, kwargs)
    evaluated = _run(work, False, seed, inputs, kwargs)
    compact = theseus.finalize()
    _assert_outputs(
        _run(compact, False, seed, inputs, kwargs), evaluated, "eval mode differs from finalized", rtol, atol
    )
    _assert_outputs(
        _run(compact, True, seed, inputs, kwargs), all_successors, "rate 1 differs from finalized", rtol, atol
    )

    work = copy.deepcopy(model)
    theseus = replace_(work, specs, seed=seed, **replace_options)
    predecessors = {id(p) for site in theseus.sites for p in site.predecessor.parameters()}
    for param in work.parameters():
        param.grad = None
    theseus.rate = 1.0
    work.train()
    output = work(*inputs, **kwargs)
    loss = sum(t.float().sum() for t in _tensors(output) if t.requires_grad)
    if isinstance(loss, torch.Tensor):
        loss.backward()
    names = {id(p): name for name, p in work.named_parameters()}
    for param in work.parameters():
        if param.grad is not None and (id(param) in predecessors or not param.requires_grad):
            raise AssertionError(f"frozen parameter {names[id(param)]} received a gradient")

    work = copy.deepcopy(model)
    before = {name: tensor.clone() for name, tensor in work.state_dict().items()}
    replace_(work, specs, seed=seed, **replace_options).restore()
    after = work.state_dict()
    if list(after) != list(before):
        raise AssertionError(f"restore() changed the state_dict keys: {sorted(set(after) ^ set(before))}")
    for name, tensor in before.items():
        if not torch.equal(after[name], tensor):
            raise AssertionError(f"restore() changed {name}")


# ------------------------------------------------------------------ strategies


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
