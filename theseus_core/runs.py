"""Forwards of a model that leave no trace, watched: what `replace_` runs to verify a surgery (`theseus_core.verify`).

An `ExampleRun` runs the model on one example batch in one mode and puts back every parameter, buffer, submodule,
attribute and module mode afterwards, recording in a `Trace` what the run wrote in place and what it rebuilt; hooks
(`watch`) record, at the entries they are given (a group's first and last module, or a site), the first call's
arguments and output, the torch RNG state as it started, and each layer's call.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

Batch = tuple[tuple[Any, ...], dict[str, Any]]
"""One example batch: the model's positional and keyword arguments."""


def copied(value: Any) -> Any:
    """``value`` with its tensors cloned and its tuples, lists and mappings rebuilt, so that nothing the
    model does later (in-place ops, a list that grows: DenseNet) changes it."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(copied(item) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(copied(item) for item in value)
    if isinstance(value, Mapping):
        result = copy.copy(value)
        for key, item in value.items():
            result[key] = copied(item)
        return result
    return value


def tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in an output, in order (tuples, lists, mappings; other objects are skipped; a nested tensor, as
    ``nn.TransformerEncoder``'s fast path hands its layers, by its components)."""
    if isinstance(value, torch.Tensor):
        return list(value.unbind()) if value.is_nested else [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors(item)]
    if isinstance(value, Mapping):
        return [t for item in value.values() for t in tensors(item)]
    return []


def difference(actual: Any, expected: Any) -> str | None:
    """How ``actual`` differs from ``expected`` (exactly, NaN equal to NaN), or ``None``."""
    actual, expected = tensors(actual), tensors(expected)
    if len(actual) != len(expected):
        return f"returns {len(actual)} tensors instead of {len(expected)}"
    for position, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"tensor {position} is {tuple(a.shape)} {a.dtype} instead of {tuple(e.shape)} {e.dtype}"
        same = a == e
        if a.is_floating_point() or a.is_complex():
            same |= a.isnan() & e.isnan()
        if not bool(same.all()):
            if a.is_floating_point():
                gap = (a.double() - e.double()).abs().nan_to_num(nan=float("inf")).max().item()
                return f"differs by up to {gap:.3g} (tensor {position})"
            return f"differs (tensor {position})"
    return None


@dataclass
class Trace:
    """What one run showed at the entries it watched (groups in the original, sites after the surgery)."""

    output: Any = None
    inputs: dict[int, Batch] = field(default_factory=dict)  # per entry: its first call's arguments
    outputs: dict[int, Any] = field(default_factory=dict)  # per entry: its first output
    rng: dict[int, torch.Tensor] = field(default_factory=dict)  # per entry: the torch RNG state as it started
    order: list[int] = field(default_factory=list)  # entries in the order they first ran
    running: list[int] = field(default_factory=list)  # entries entered and not yet left
    layer_calls: dict[int, list[tuple[Batch, Any]]] = field(default_factory=dict)  # per group: each layer's call
    layer_rng: dict[int, list[torch.Tensor]] = field(default_factory=dict)  # per group: the RNG as each layer started
    written: list[tuple[nn.Module, str]] = field(default_factory=list)  # tensors the run changed in place
    rebuilt: list[str] = field(default_factory=list)  # submodules or parameters the run replaced


@dataclass
class ExampleRun:
    """Forwards of a model on example batches that leave no trace."""

    model: nn.Module
    batches: list[Batch]
    seed: int
    frozen: Sequence[nn.Module]  # the modules whose parameters stay frozen while replacing, submodules included
    names: dict[int, str] = field(init=False, repr=False)  # by id, as named when the run was set up (before a surgery)
    _copies: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.names = {id(module): name or "the model" for name, module in self.model.named_modules()}

    @contextmanager
    def one_copy(self) -> Iterator[None]:
        """Runs inside share one copy of each tensor's values (taken by the first run that meets the tensor)
        instead of copying every tensor again per run: each run puts back every value it changed, so the copy
        still holds for the next, provided nothing else writes into the model between them (what the caller does
        between runs only reads)."""
        self._copies = {}
        try:
            yield
        finally:
            self._copies = None

    def __call__(self, trace: Trace, batch: Batch, training: bool, set_modes: Callable[[], None]) -> Trace:
        """Runs the model on ``batch`` in the given mode and fills ``trace`` with its output, the tensors the
        run changed in place and the modules it rebuilt; puts everything back afterwards."""
        modules = list(self.model.named_modules(remove_duplicate=True))  # named as the messages name them
        saved = [
            _ModuleState(self.names.get(id(module), name), module, copies=self._copies) for name, module in modules
        ]
        flags = [(param, param.requires_grad) for param in self.model.parameters()]
        devices = cuda_devices(self.model)
        try:
            self.model.train(training)
            set_modes()
            for module in self.frozen:  # closed under submodules (`engine.frozen_modules`): each its own parameters
                for param in module.parameters(recurse=False):
                    param.requires_grad_(False)
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                torch.manual_seed(self.seed)
                inputs, kwargs = batch
                trace.output = copied(self.model(*copied(inputs), **copied(kwargs)))
        finally:
            try:
                for state in saved:
                    state.compare(trace)
            finally:  # whatever a comparison raises, everything is put back
                for state in saved:
                    state.restore()
                for param, requires_grad in flags:
                    param.requires_grad_(requires_grad)
        return trace


@contextmanager
def evaluating(modules: Iterable[nn.Module]) -> Iterator[None]:
    """Within: every module in eval mode (dropout off, batch norm on its running statistics, which stay as they
    are); afterwards each submodule's mode is as it was."""
    modules = list(modules)
    modes = [(inner, inner.training) for module in modules for inner in module.modules()]
    try:
        for module in modules:
            module.eval()  # through eval(): a module that overrides train() is told as it expects
        yield
    finally:
        for module, training in modes:
            module.training = training


def cuda_devices(module: nn.Module) -> list[int]:
    """The CUDA devices ``module``'s tensors are on, for `torch.random.fork_rng` to save and put back."""
    return sorted({t.device.index or 0 for t in (*module.parameters(), *module.buffers()) if t.is_cuda})


class _ModuleState:
    """One module's class, tensors, children and attributes before a run, to compare with and to put back; with
    ``values=False`` its tensors' values are not copied (what `Theseus.finalize` changes is structure only); with
    ``copies`` (`ExampleRun.one_copy`'s, by tensor), a copy taken by an earlier run is used again."""

    def __init__(
        self,
        name: str,
        module: nn.Module,
        values: bool = True,
        copies: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> None:
        self.name, self.module, self.cls = name, module, type(module)
        self.attributes = dict(module.__dict__)
        self.children = dict(module._modules)
        self.parameters = dict(module._parameters)
        self.buffers = dict(module._buffers)
        self.values: dict[str, torch.Tensor] = {}
        for key, tensor in (*module._parameters.items(), *module._buffers.items()):
            if tensor is None or not values:
                continue
            kept = copies.get(id(tensor)) if copies is not None else None
            if kept is None or kept[0] is not tensor:
                kept = (tensor, tensor.detach().clone())
                if copies is not None:
                    copies[id(tensor)] = kept
            self.values[key] = kept[1]
        self.compared: dict[str, tuple[torch.Tensor | None, bool]] = {}  # by `compare`: what it found, per tensor

    def compare(self, trace: Trace) -> None:
        module, where = self.module, self.name or "the model"
        for table, before, kind in (
            (module._modules, self.children, "submodule"),
            (module._parameters, self.parameters, "parameter"),
        ):
            for key in sorted(set(table) | set(before)):
                if table.get(key) is not before.get(key):
                    trace.rebuilt.append(f"{kind} {key!r} of {where} ({type(module).__name__})")
        for key, saved in self.values.items():
            tensor = module._parameters.get(key, module._buffers.get(key))
            changed = tensor is not None and _changed(tensor, saved)
            self.compared[key] = (tensor, changed)
            if changed:
                trace.written.append((module, key))

    def restore(self) -> None:
        module = self.module
        if type(module) is not self.cls:
            module.__class__ = self.cls
        for key in [key for key in module.__dict__ if key not in self.attributes]:
            del module.__dict__[key]
        for key, value in self.attributes.items():
            if module.__dict__.get(key) is not value:
                module.__dict__[key] = value
        for table, before in (
            (module._modules, self.children),
            (module._parameters, self.parameters),
            (module._buffers, self.buffers),
        ):
            if table.keys() != before.keys() or any(table[key] is not value for key, value in before.items()):
                table.clear()
                table.update(before)
        with torch.no_grad():
            for key, saved in self.values.items():
                tensor = self.parameters.get(key, self.buffers.get(key))
                if tensor is None:
                    continue
                if not _same_layout(tensor, saved):
                    tensor.data = saved.clone()  # the run set ``.data`` to another tensor (the copy may serve again)
                    continue
                compared, changed = self.compared.get(key, (None, True))
                if changed or compared is not tensor:  # not compared (or raised), or the run swapped the tensor
                    tensor.copy_(saved)


def _same_layout(tensor: torch.Tensor, saved: torch.Tensor) -> bool:
    """Whether a tensor has a saved copy's shape, dtype and device (else a run set its ``.data`` to another)."""
    return (tensor.shape, tensor.dtype, tensor.device) == (saved.shape, saved.dtype, saved.device)


def _changed(tensor: torch.Tensor, saved: torch.Tensor) -> bool:
    """Whether a tensor's values differ from a saved copy (one pass when equal; NaN equals NaN)."""
    if not _same_layout(tensor, saved):
        return True
    return not torch.equal(tensor, saved) and difference(tensor, saved) is not None


class ModelState:
    """The structure of a model (every module's class, children, tensors and attributes), and with ``values`` its
    tensors' values too, put back by `restore`: what `Theseus.finalize` undoes when the finalized model fails its
    check (structure only), what `replace_`'s check of each successor on its group's input leaves as it found."""

    def __init__(self, model: nn.Module, values: bool = False) -> None:
        self.states = [_ModuleState(name, module, values=values) for name, module in model.named_modules()]

    def restore(self) -> None:
        for state in self.states:
            state.restore()


@contextmanager
def hooks(register: Iterator[Any]) -> Iterator[None]:
    handles = list(register)
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def watch(trace: Trace, entries: Sequence[tuple[nn.Module, nn.Module]], layers: Sequence[Sequence[nn.Module]] = ()):
    """Hooks filling ``trace``: each entry is (module where it starts, module where it ends); ``layers``, per
    entry, the modules whose every first call is recorded (the original's layers, to explain a difference)."""

    def enter(index: int, args: tuple, kwargs: dict) -> None:  # a hook returning something would replace
        trace.running.append(index)  # the input, so these return None
        if index not in trace.order:
            trace.order.append(index)
            trace.inputs[index] = (copied(args), copied(kwargs))
            trace.rng[index] = torch.get_rng_state()

    def leave(index: int, output: Any) -> None:
        if trace.running:
            trace.running.pop()
        trace.outputs.setdefault(index, copied(output))

    def called(index: int, position: int, args: tuple, kwargs: dict) -> None:
        calls = trace.layer_calls.setdefault(index, [])
        if len(calls) == position:
            calls.append(((copied(args), copied(kwargs)), None))
            trace.layer_rng.setdefault(index, []).append(torch.get_rng_state())

    def returned(index: int, position: int, output: Any) -> None:
        calls = trace.layer_calls.get(index, [])
        if len(calls) == position + 1 and calls[position][1] is None:
            calls[position] = (calls[position][0], copied(output))

    for index, (first, last) in enumerate(entries):
        yield first.register_forward_pre_hook(lambda m, a, k, i=index: enter(i, a, k), with_kwargs=True)
        yield last.register_forward_hook(lambda m, a, out, i=index: leave(i, out))
    for index, modules in enumerate(layers):
        for position, module in enumerate(modules):
            yield module.register_forward_pre_hook(
                lambda m, a, k, i=index, p=position: called(i, p, a, k), with_kwargs=True
            )
            yield module.register_forward_hook(lambda m, a, out, i=index, p=position: returned(i, p, out))
