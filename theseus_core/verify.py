"""Trust by running: with example inputs, `replace_` runs the model once before the surgery and once after
it at rate 0, and accepts only when the two agree exactly.

Both runs are training-mode forwards without grad from the same torch RNG state (the same dropout masks),
on fresh copies of the example inputs; every buffer and module mode is put back after each run, so the
runs leave no trace. The original runs with its parameters frozen as `replace_` will freeze them: whether
a weight requires grad can change how torch computes a matmul (``at::matmul`` folds batch dimensions
depending on it; nn.MultiheadAttention then differs by an ulp), which is no fault of the sites.

At rate 0 every site runs its predecessor group, so any difference comes from what the sites change around
the groups: a loop that hands state from one layer to the next, or a container that indexes or inspects
its layers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .site import ReplacementSite
from .spec import ResolvedGroup


class VerificationError(ValueError):
    """`replace_` ran the model with its sites at rate 0 and did not get the original back; the model was
    restored before this was raised."""


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
    """The tensors in an output, in order (tuples, lists, mappings; other objects are skipped)."""
    if isinstance(value, torch.Tensor):
        return [value]
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
class Reference:
    """What the original model did on the example inputs."""

    output: Any
    group_inputs: list[tuple[tuple[Any, ...], dict[str, Any]]]  # per group: its first module's first call
    group_outputs: list[Any]  # per group: its last module's first output


@dataclass
class ExampleRun:
    """One training-mode forward of a model on example inputs that leaves no trace."""

    model: nn.Module
    inputs: tuple[Any, ...]
    kwargs: dict[str, Any]
    seed: int
    frozen: Sequence[nn.Module]  # the modules whose parameters do not require grad while replacing

    def __call__(self, set_modes: Callable[[], None] = lambda: None) -> tuple[Any, list[tuple[nn.Module, str]]]:
        """Runs the model; returns its output and the (module, buffer name) pairs the run changed."""
        buffers = [
            (module, name, tensor, tensor.detach().clone())
            for module in self.model.modules()
            for name, tensor in module._buffers.items()
            if tensor is not None
        ]
        modes = [(module, module.training) for module in self.model.modules()]
        flags = [(param, param.requires_grad) for param in self.model.parameters()]
        devices = sorted({t.device.index or 0 for t in (*self.model.parameters(), *self.model.buffers()) if t.is_cuda})
        try:
            self.model.train()
            set_modes()
            for module in self.frozen:
                module.requires_grad_(False)
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                torch.manual_seed(self.seed)
                output = copied(self.model(*copied(self.inputs), **copied(self.kwargs)))
            changed = [
                (module, name)
                for module, name, tensor, saved in buffers
                if module._buffers.get(name) is not tensor or difference(tensor, saved) is not None
            ]
        finally:
            with torch.no_grad():
                for module, name, tensor, saved in buffers:
                    tensor.copy_(saved)
                    module._buffers[name] = tensor
            for module, training in modes:
                module.training = training
            for param, requires_grad in flags:
                param.requires_grad_(requires_grad)
        return output, changed


@contextmanager
def _hooks(register: Iterator[Any]) -> Iterator[None]:
    handles = list(register)
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def run_original(run: ExampleRun, groups: Sequence[ResolvedGroup], predecessor_eval: bool) -> Reference:
    """Runs the model before the surgery and records each group's first input and output."""
    inputs: dict[int, Any] = {}
    outputs: dict[int, Any] = {}

    def record_input(index: int, args: tuple, kwargs: dict) -> None:  # a hook returning something would
        inputs.setdefault(index, (copied(args), copied(kwargs)))  # replace the input, so these return None

    def record_output(index: int, output: Any) -> None:
        outputs.setdefault(index, copied(output))

    def register():
        for index, group in enumerate(groups):
            yield group.modules[0].register_forward_pre_hook(
                lambda m, a, k, i=index: record_input(i, a, k), with_kwargs=True
            )
            yield group.modules[-1].register_forward_hook(lambda m, a, out, i=index: record_output(i, out))

    def predecessors_in_eval():
        if predecessor_eval:
            for group in groups:
                for module in group.modules:
                    module.eval()

    with _hooks(register()):
        output, _ = run(predecessors_in_eval)
    for index, group in enumerate(groups):
        if index not in inputs or index not in outputs:
            raise ValueError(f"group {group.path!r} did not run when the model ran on example_inputs; check the path")
    return Reference(output, [inputs[i] for i in range(len(groups))], [outputs[i] for i in range(len(groups))])


def verify(
    run: ExampleRun, sites: Sequence[ReplacementSite], groups: Sequence[ResolvedGroup], reference: Reference
) -> None:
    """Runs the model with its sites at rate 0 and raises `VerificationError` unless it reproduces
    ``reference`` exactly and leaves every frozen module's persistent buffers as they were."""
    outputs: dict[int, Any] = {}
    running: list[int] = []  # sites entered and not yet left
    order: list[int] = []  # sites in the order they first ran

    def enter(index: int) -> None:
        running.append(index)
        if index not in order:
            order.append(index)

    def leave(index: int, output: Any) -> None:
        running.pop()
        outputs.setdefault(index, copied(output))

    def register():
        for index, site in enumerate(sites):
            yield site.register_forward_pre_hook(lambda m, a, i=index: enter(i))
            yield site.register_forward_hook(lambda m, a, out, i=index: leave(i, out))

    def container(index: int) -> str:
        return f"`{groups[index].container_name or 'the model'}`"

    with _hooks(register()):
        try:
            output, changed = run()
        except Exception as error:
            if running:
                where = f"inside the site for group {groups[running[-1]].path!r}"
                cause = (
                    f"the group's modules cannot be called one after another with the arguments of the first "
                    f"(the loop around {container(running[-1])} calls them differently)"
                )
            else:
                last = f"after group {groups[order[-1]].path!r} ran" if order else "before any group ran"
                index = order[-1] if order else 0
                where = f"outside the sites, {last}"
                cause = (
                    f"the code around {container(index)} reads its modules (indexes the container, counts its "
                    f"layers, or reads a layer's attributes), which the sites changed"
                )
            raise VerificationError(
                f"replace_ ran the model at rate 0 with the sites in place and it raised {type(error).__name__} "
                f"{where}: {error}. Likely cause: {cause}; use groups of size 1 there, or an adapter. "
                f"The model is unchanged."
            ) from error

    for index in range(len(sites)):
        if index not in order:
            raise VerificationError(
                f"at rate 0 the site for group {groups[index].path!r} never ran, though the group did in the "
                f"original model: the code around {container(index)} does not call its modules one by one "
                f"(it indexes or counts them); use an adapter. The model is unchanged."
            )
    for index in order:
        gap = difference(outputs[index], reference.group_outputs[index])
        if gap is not None:
            several = len(groups[index].keys) > 1
            raise VerificationError(
                f"at rate 0 the output of group {groups[index].path!r} {gap} from the original's. Likely cause: "
                + (
                    f"the loop around {container(index)} passes state from one layer to the next or changes the "
                    f"hidden states between layers (position_bias? a convolution, dropout or a residual between "
                    f"layers?), which a site of several layers skips; group sizes of 1 there, or an adapter, are "
                    f"needed. "
                    if several
                    else f"the model calls the modules of {container(index)} in a way a site does not reproduce; "
                    f"an adapter is needed. "
                )
                + "The model is unchanged."
            )
    gap = difference(output, reference.output)
    if gap is not None:
        raise VerificationError(
            f"at rate 0 every group returns what it did in the original model, but the model's output {gap}. "
            f"Likely cause: the code around {container(order[0] if order else 0)} uses its modules in a way the "
            f"sites change (it reads their attributes or counts them); an adapter is needed. The model is unchanged."
        )
    frozen_ids = {id(module) for module in run.frozen}
    names = {id(module): name for name, module in run.model.named_modules()}
    for module, buffer in changed:
        if id(module) in frozen_ids and buffer not in module._non_persistent_buffers_set:
            raise VerificationError(
                f"the frozen module {names.get(id(module), '?')} ({type(module).__name__}) changed its buffer "
                f"{buffer!r} in a training forward; theseus_core holds batch-norm statistics still but nothing "
                f"else: make that module trainable (train_others=True) or keep it in eval mode. The model is "
                f"unchanged."
            )
