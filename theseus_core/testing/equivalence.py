"""`assert_replacement_equivalence`: the contract of a replacement, checked on copies of a model."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ..engine import frozen_modules, replace_
from ..prepare import check_arguments, example_batches
from ..spec import ModuleSpec, Plan, resolve
from ..verify import copied, tensors


def _assert_outputs(actual: Any, expected: Any, message: str, rtol: float, atol: float) -> None:
    actual, expected = tensors(actual), tensors(expected)
    if len(actual) != len(expected):
        raise AssertionError(f"{message}: {len(actual)} output tensors instead of {len(expected)}")
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, msg=lambda detail: f"{message}\n{detail}")


def _run(
    model: nn.Module,
    training: bool,
    seed: int,
    inputs: tuple,
    kwargs: dict,
    grad: bool = False,
    what: str = "the model",
    in_eval: Sequence[nn.Module] = (),
) -> Any:
    """One forward with the global RNG seeded (same dropout masks), without disturbing the caller's RNG, with the
    modules ``in_eval`` in eval mode whatever ``training`` is; an exception becomes an `AssertionError` that names
    ``what`` ran, in which mode, and the cause."""
    model.train(training)
    for module in in_eval:
        module.eval()
    with torch.random.fork_rng(devices=[]), torch.set_grad_enabled(grad):
        torch.manual_seed(seed)
        try:
            return model(*copied(inputs), **copied(kwargs))
        except Exception as error:
            mode = "training" if training else "eval"
            raise AssertionError(
                f"{what} raised {type(error).__name__} in {mode} mode on the example inputs: {error}"
            ) from error


def _run_frozen(model: nn.Module, specs: Sequence[ModuleSpec], options: Mapping[str, Any], *args: Any) -> Any:
    """`_run` with the parameters frozen as `replace_` will freeze them (a weight that requires grad can
    change torch's matmul path by an ulp; see theseus_core.verify), and the groups in eval mode if the
    `replace_` ``options`` keep them there (``predecessor_eval``)."""
    groups = [module for spec in specs for module in resolve(model, spec.path).modules]
    flags = [(param, param.requires_grad) for param in model.parameters()]
    for module in frozen_modules(model, groups, bool(options.get("train_others"))):
        module.requires_grad_(False)
    try:
        return _run(model, *args, in_eval=groups if options.get("predecessor_eval") else ())
    finally:
        for param, requires_grad in flags:
            param.requires_grad_(requires_grad)


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def assert_replacement_equivalence(
    model: nn.Module,
    specs: Sequence[ModuleSpec] | Plan,
    example_inputs: tuple[Any, ...] | list[tuple[Any, ...] | Mapping[str, Any]],
    example_kwargs: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    rtol: float = 1.3e-6,
    atol: float = 1e-5,
    draws: int = 8,
    **replace_options: Any,
) -> None:
    """Checks that replacing ``specs`` in ``model`` behaves as Theseus compression must.

    On deep copies of ``model`` (the model itself is never changed):

    1. rate 0 in training mode reproduces the original model exactly (same
       torch seed, so the same dropout masks; with ``predecessor_eval=True``,
       the original with its groups in eval mode); `replace_` verifies this
       itself, and it is checked again here;
    2. rate 1 in training mode equals the finalized model in training mode;
    3. eval mode, with the successors on the eval route (whatever
       ``eval_route`` says), equals the finalized model in eval mode;
    4. at rate 0.5, over ``draws`` training forwards and backwards (so that
       predecessors run, behind and in front of successors), only successor and
       projection parameters (and, with ``train_others=True``, parameters
       outside the groups) require and receive gradients;
    5. after those forwards, `Theseus.restore` gives back the original
       state_dict exactly, buffers such as batch-norm statistics included
       (without ``train_others``: with it, the modules outside the groups train).

    Args:
        model: The model to check; left untouched.
        specs: What `replace_` would get.
        example_inputs, example_kwargs: What `replace_` takes: one batch, ``model(*example_inputs,
            **example_kwargs)``, or a list of batches (tuples of positional arguments or dicts of keyword
            arguments, ``example_kwargs`` merged into each); checks 1-3 hold on every batch, checks 4-5 take the
            batches in turn.
        seed: Seeds both the routes and the global RNG for dropout. (default: ``0``)
        rtol, atol: Tolerances for checks 2 and 3 (check 1 is exact).
        draws: Training forwards at rate 0.5 for checks 4 and 5. (default: ``8``)
        **replace_options: Passed to `replace_` (e.g. ``train_others=True``).

    Raises:
        AssertionError: Naming the property that failed, or the model that raised (at which rate, or
            finalized), in which mode, on which batch when there are several, and its error.
        VerificationError: `replace_` or `Theseus.finalize` refused, naming the cause.
        TypeError, ValueError: ``example_inputs`` or ``example_kwargs`` are not what `replace_` takes (a bare
            tensor is not a tuple of arguments), before anything runs.
    """
    check_arguments(model, specs, seed, "successor", False, example_inputs, example_kwargs)
    if example_inputs is None:
        raise TypeError("example_inputs: the properties are checked on example batches; give at least one")
    batches = example_batches(example_inputs, example_kwargs, None)  # the caller's: `replace_` adds a plan's
    at = [f" (example batch {index})" if len(batches) > 1 else "" for index in range(len(batches))]

    work = copy.deepcopy(model)
    originals = [_run_frozen(work, specs, replace_options, True, seed, *batch) for batch in batches]
    theseus = replace_(
        work, specs, seed=seed, example_inputs=example_inputs, example_kwargs=example_kwargs, **replace_options
    )
    theseus.rate = 0.0
    for batch, original, where in zip(batches, originals, at, strict=True):
        at_zero = _run(work, True, seed, *batch, what="the model at rate 0" + where)
        _assert_outputs(at_zero, original, "rate 0 differs from the original model" + where, 0, 0)
    theseus.rate = 1.0
    theseus.eval_route = "successor"  # check 3 compares the successors, whichever route eval_route= gives in eval
    all_successors, evaluated = [], []
    for batch, where in zip(batches, at, strict=True):
        all_successors.append(_run(work, True, seed, *batch, what="the model at rate 1" + where))
        evaluated.append(_run(work, False, seed, *batch, what="the model at rate 1" + where))
    compact = theseus.finalize()
    for batch, expected, where in zip(batches, evaluated, at, strict=True):
        finalized = _run(compact, False, seed, *batch, what="the finalized model" + where)
        _assert_outputs(finalized, expected, "eval mode differs from finalized" + where, rtol, atol)
    for batch, expected, where in zip(batches, all_successors, at, strict=True):
        finalized = _run(compact, True, seed, *batch, what="the finalized model" + where)
        _assert_outputs(finalized, expected, "rate 1 differs from finalized" + where, rtol, atol)

    work = copy.deepcopy(model)
    before = _state(work)
    theseus = replace_(work, specs, seed=seed, **replace_options)
    names = {id(p): name for name, p in work.named_parameters()}
    allowed = {id(p) for p in theseus.successor_parameters()}
    if replace_options.get("train_others"):
        inside = {id(p) for site in theseus.sites for p in site.predecessor.parameters()}
        allowed |= {id(p) for p in work.parameters() if id(p) not in inside}
    for param in work.parameters():
        if param.requires_grad and id(param) not in allowed:
            raise AssertionError(f"frozen parameter {names[id(param)]} requires grad")
    theseus.rate = 0.5
    for draw in range(draws):
        for param in work.parameters():
            param.grad = None
        batch, where = batches[draw % len(batches)], at[draw % len(batches)]
        output = _run(work, True, seed + draw, *batch, grad=True, what="the model at rate 0.5" + where)
        loss = sum(t.float().sum() for t in tensors(output) if t.requires_grad)
        if isinstance(loss, torch.Tensor):
            loss.backward()
        for param in work.parameters():
            if param.grad is not None and id(param) not in allowed:
                raise AssertionError(
                    f"frozen parameter {names[id(param)]} received a gradient (routes {theseus.last_routes})"
                )
    if not replace_options.get("train_others"):
        theseus.restore()
        after = work.state_dict()
        if list(after) != list(before):
            raise AssertionError(f"restore() changed the state_dict keys: {sorted(set(after) ^ set(before))}")
        for name, tensor in before.items():
            if not torch.equal(after[name], tensor):
                raise AssertionError(f"training at rate 0.5 then restore() changed {name}")
