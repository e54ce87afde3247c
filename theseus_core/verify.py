"""Trust by running: with example batches, `replace_` runs the model before the surgery and after it at rate 0,
and accepts only when the runs agree exactly.

Every example batch runs in training mode and in eval mode (a model may use its layers differently in
eval mode, RWKV rescales their weights there). Training-mode runs are forwards without grad from the same torch
RNG state (the same dropout masks); at rate 0 in eval mode the sites run their predecessors. Each run is on fresh
copies of the batch, and leaves no trace: every parameter, buffer, submodule, attribute and module mode is put
back after it. The original runs with its parameters frozen as `replace_` will freeze them: whether a weight
requires grad can change how torch computes a matmul (``at::matmul`` folds batch dimensions depending on it;
nn.MultiheadAttention then differs by an ulp), which is no fault of the sites.

Before blaming the sites, the original is checked against itself: run twice from the same RNG state it must give
the same output (else it draws randomness outside torch's RNG, such as numpy's), it must not rebuild its modules
for the input (BigBird switching to full attention) nor write its own weights (RWKV's ``rescale_every``). When a
group then differs at rate 0, the original's own calls of the group's layers say why: a layer called with other
arguments than the group's first (a per-layer mask, T5's ``position_bias``), hidden states changed between two
layers (a residual or a convolution in the loop), or the torch RNG advanced differently before the group (a loop
that draws per layer: LayerDrop).

`Theseus.finalize` keeps what was verified: it runs the finalized model on the same batches in eval mode and
accepts only an output equal to the model's at rate 1 (`check_finalized`); otherwise it undoes itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .runs import Batch, ExampleRun, Trace, difference, hooks, tensors, watch
from .runs import copied as copied  # re-exported: theseus_core.testing compares outputs with these
from .site import ReplacementSite, primary_output, primary_parameter_name, split_primary
from .spec import ResolvedGroup


class VerificationError(ValueError):
    """`replace_` ran the model on the example batches and could not show that the sites at rate 0 give the
    original back (or the original itself cannot be compared run to run), or `Theseus.finalize` could not show that
    the finalized model computes what the model at rate 1 did; the model was left as it was."""


def _argument_difference(first: Any, other: Any) -> str | None:
    """How an argument a layer got differs from the one the group's first layer got, or ``None``."""
    if isinstance(first, torch.Tensor) != isinstance(other, torch.Tensor) or (first is None) != (other is None):
        return f"{_kind(other)} instead of {_kind(first)}"
    if tensors(first) or tensors(other):
        return difference(other, first)
    try:
        return None if bool(first == other) else f"{other!r} instead of {first!r}"
    except Exception:  # an object without a usable ==
        return None


def _kind(value: Any) -> str:
    return "None" if value is None else f"a {type(value).__name__}"


@dataclass
class Reference:
    """What the original model did on the example batches: per (batch, mode) run, its `Trace`."""

    runs: list[tuple[int, bool, Trace]]  # (batch index, training, trace)

    @property
    def group_inputs(self) -> list[Batch]:
        """Per group, its first module's first call in the first batch's training run."""
        first = self.runs[0][2]
        return [first.inputs[i] for i in range(len(first.inputs))]

    @property
    def group_outputs(self) -> list[Any]:
        first = self.runs[0][2]
        return [first.outputs[i] for i in range(len(first.outputs))]


def _mode(training: bool) -> str:
    return "training" if training else "eval"


def _where(run: ExampleRun, index: int, training: bool) -> str:
    batch = f"example batch {index}" if len(run.batches) > 1 else "the example batch"
    return f"{batch} in {_mode(training)} mode"


def run_original(run: ExampleRun, groups: Sequence[ResolvedGroup], predecessor_eval: bool) -> Reference:
    """Runs the model before the surgery on every batch in both modes, records each group's first input and
    output, and checks that the original can be compared with itself; raises `VerificationError` if not."""

    def predecessors_in_eval() -> None:
        if predecessor_eval:
            for group in groups:
                for module in group.modules:
                    module.eval()

    with run.one_copy():  # between the runs, only checks that read
        entries = [(group.modules[0], group.modules[-1]) for group in groups]
        runs: list[tuple[int, bool, Trace]] = []
        for index, batch in enumerate(run.batches):
            for training in (True, False):
                trace = Trace()
                with hooks(watch(trace, entries, [group.modules for group in groups])):
                    try:
                        run(trace, batch, training, predecessors_in_eval)
                    except Exception as error:
                        raise VerificationError(
                            f"the original model raised {type(error).__name__} on {_where(run, index, training)}, "
                            f"before any change: {error}. Check example_inputs / example_kwargs (replace_ runs the "
                            f"model on them in training and in eval mode). The model is unchanged."
                        ) from error
                _check_original(run, trace, index, training)
                runs.append((index, training, trace))
        _check_layers_ran(run, groups, runs)
        again = Trace()
        run(again, run.batches[0], True, predecessors_in_eval)
        gap = difference(again.output, runs[0][2].output)
        if gap is not None:
            raise VerificationError(
                f"two training-mode runs of the original model on the same example batch from the same torch RNG "
                f"state differ (the second {gap}): the model draws randomness outside torch's RNG (numpy or Python's "
                f"random, e.g. SpecAugment's masks), so no run can be compared with another; make its training "
                f"forward deterministic under torch.manual_seed (turn that augmentation off while replacing). "
                f"The model is unchanged."
            )
        return Reference(runs)


def _check_layers_ran(run: ExampleRun, groups: Sequence[ResolvedGroup], runs: list[tuple[int, bool, Trace]]) -> None:
    """Every group ran in every training-mode run of the original, each of its layers as in eval mode."""
    for index, training, trace in runs:
        if not training:
            continue
        evaluated = next(other for i, t, other in runs if i == index and not t)
        for position, group in enumerate(groups):
            ran, ran_in_eval = len(trace.layer_calls.get(position, [])), len(evaluated.layer_calls.get(position, []))
            if ran < ran_in_eval:
                raise VerificationError(
                    f"in training mode the original model skipped layer {ran} of group {group.path!r} on "
                    f"{_where(run, index, training)[: -len(' in training mode')]}, which ran in eval mode: the model "
                    f"skips layers at random (LayerDrop); set its layer-drop probability to 0 while replacing (a "
                    f"transformers config's layerdrop / encoder_layerdrop / decoder_layerdrop). The model is unchanged."
                )
            if position not in trace.inputs or position not in trace.outputs:
                raise VerificationError(
                    f"group {group.path!r} did not run when the model ran on {_where(run, index, training)}; check "
                    f"the path. The model is unchanged."
                )


def _check_original(run: ExampleRun, trace: Trace, index: int, training: bool) -> None:
    if trace.rebuilt:
        raise VerificationError(
            f"running the original model on {_where(run, index, training)} replaced its own "
            f"{', '.join(trace.rebuilt[:3])}{' ...' if len(trace.rebuilt) > 3 else ''}: the model rebuilds itself "
            f"for this input (BigBird switches to full attention when the sequence is too short for its blocks), "
            f"so the successors, built before, would not match it; give an example batch for which it keeps its "
            f"modules (longer sequences), or configure it that way. The model is unchanged."
        )
    names = run.names
    weights = [(m, key) for m, key in trace.written if key in m._parameters]
    if weights:
        module, key = weights[0]
        raise VerificationError(
            f"running the original model on {_where(run, index, training)} wrote into its own weights "
            f"({names.get(id(module), '?')}.{key}, in place): a model that rescales or rewrites its parameters in "
            f"a forward (RWKV's rescale_every) cannot keep its frozen predecessors frozen, and what it reaches "
            f"through a site is only the group's first layer; turn that behaviour off (e.g. config.rescale_every=0)"
            f" to replace it. The model is unchanged."
        )


def _container(groups: Sequence[ResolvedGroup], index: int) -> str:
    return f"`{groups[index].container_name or 'the model'}`"


def verify(run: ExampleRun, sites: Sequence[ReplacementSite], groups: Sequence[ResolvedGroup], reference: Reference):
    """Runs the model with its sites at rate 0 (in eval mode, on their predecessors) on every batch in both modes
    and raises `VerificationError` unless each run reproduces the original's exactly and leaves every frozen
    tensor as it was."""
    router = sites[0]._router if sites else None
    with run.one_copy():  # between the runs, only the router's eval route is set and put back
        for index, training, expected in reference.runs:
            trace = Trace()
            eval_route = router.eval_route if router is not None else None
            if router is not None:
                router.eval_route = "predecessor"
            try:
                layers = [site.predecessor.layers for site in sites]
                with hooks(watch(trace, [(site, site) for site in sites], layers)):
                    try:
                        run(trace, run.batches[index], training, lambda: None)
                    except Exception as error:
                        raise _raised(run, groups, trace, error, index, training) from error
            finally:
                if router is not None:
                    router.eval_route = eval_route
            _compare(run, groups, trace, expected, index, training)


def eval_outputs(run: ExampleRun) -> list[Any]:
    """The model's output on every example batch in eval mode, each run leaving no trace."""
    with run.one_copy():
        return [run(Trace(), batch, False, lambda: None).output for batch in run.batches]


def check_finalized(run: ExampleRun, expected: Sequence[Any]) -> None:
    """Runs the finalized model on every example batch in eval mode and raises `VerificationError`, in one line,
    unless each output is exactly ``expected``'s, the model's at rate 1 before `Theseus.finalize`."""
    undo = "finalize undid itself: the model is as it was, still replacing (restore() gives the original back)"
    with run.one_copy():  # between the runs, only comparisons
        for index, batch in enumerate(run.batches):
            where = _where(run, index, False)
            try:
                output = run(Trace(), batch, False, lambda: None).output
            except Exception as error:
                cause = " ".join(str(error).split())[:300] or "no message"  # one line
                raise VerificationError(
                    f"the finalized model raised {type(error).__name__} on {where}, which the model at rate 1 ran: "
                    f"{cause}; {undo}"
                ) from error
            gap = difference(output, expected[index])
            if gap is not None:
                raise VerificationError(
                    f"on {where} the finalized model's output {gap} from the model's at rate 1 (the successors in "
                    f"place); {undo}"
                )


def _raised(
    run: ExampleRun, groups: Sequence[ResolvedGroup], trace: Trace, error: Exception, index: int, training: bool
) -> VerificationError:
    if trace.running:
        position = trace.running[-1]
        where = f"inside the site for group {groups[position].path!r}"
        cause = (
            f"the group's modules cannot be called one after another with the arguments of the first (the loop "
            f"around {_container(groups, position)} calls them differently); use groups of size 1 there, or an "
            f"adapter"
            if len(groups[position].keys) > 1
            else f"the loop around {_container(groups, position)} calls the module in a way the site does not "
            f"reproduce; an adapter is needed"
        )
    else:
        last = f"after group {groups[trace.order[-1]].path!r} ran" if trace.order else "before any group ran"
        position = trace.order[-1] if trace.order else 0
        where = f"outside the sites, {last}"
        cause = (
            f"the code around {_container(groups, position)} reads its modules (indexes the container, counts its "
            f"layers, or reads a layer's attributes), which the sites changed; use an adapter"
        )
    return VerificationError(
        f"replace_ ran the model at rate 0 ({_where(run, index, training)}) with the sites in place and it raised "
        f"{type(error).__name__} {where}: {error}. Likely cause: {cause}. The model is unchanged."
    )


def _compare(
    run: ExampleRun,
    groups: Sequence[ResolvedGroup],
    trace: Trace,
    expected: Trace,
    index: int,
    training: bool,
) -> None:
    """Raises `VerificationError` unless the run at rate 0 reproduced ``expected``, the original's run."""
    where = _where(run, index, training)
    if trace.rebuilt:
        raise VerificationError(
            f"at rate 0 ({where}) the model replaced its own {', '.join(trace.rebuilt[:3])} while the sites were in "
            f"place, which it did not do before; an adapter is needed. The model is unchanged."
        )
    for position in range(len(groups)):
        if position not in trace.order:
            raise VerificationError(
                f"at rate 0 ({where}) the site for group {groups[position].path!r} never ran, though the group "
                f"did in the original model: the code around {_container(groups, position)} does not call its "
                f"modules one by one (it indexes or counts them); use an adapter. The model is unchanged."
            )
    for position in trace.order:
        gap = difference(trace.outputs[position], expected.outputs[position])
        if gap is not None:
            raise VerificationError(
                f"at rate 0 ({where}) the output of group {groups[position].path!r} {gap} from the original's. "
                f"Likely cause: {_cause(groups, trace, expected, position, training)} The model is unchanged."
            )
    gap = difference(trace.output, expected.output)
    if gap is not None:
        first = trace.order[0] if trace.order else 0
        randomness = _rng_moved(groups, trace, expected, len(groups))
        extras = _extra_outputs(groups, expected)
        if randomness is None and extras is not None:
            randomness = (
                f"the model reads what the layers of group {groups[extras].path!r} return beside the tensor that "
                f"flows on (an output per layer, such as an auxiliary loss), which a site of several layers returns "
                f"for its last layer only; use groups of 1 there, or an adapter."
            )
        if len(tensors(trace.output)) != len(tensors(expected.output)):
            randomness = (
                f"the model returns something per layer of {_container(groups, first)} (a cache: mems, "
                f"past_key_values, or every layer's hidden states), which has one entry per site now; turn it off "
                f"in example_kwargs (use_cache=False, use_mems=False, output_hidden_states=False)."
            )
        raise VerificationError(
            f"at rate 0 ({where}) every group returns what it did in the original model, but the model's output "
            f"{gap}. Likely cause: "
            + (
                randomness
                or f"the code around {_container(groups, first)} uses its modules in a way the sites change (it "
                f"reads their attributes or counts them); an adapter is needed."
            )
            + " The model is unchanged."
        )
    frozen = {id(module) for module in run.frozen}
    predecessors = {id(inner) for group in groups for module in group.modules for inner in module.modules()}
    for module, key in trace.written:
        if id(module) in frozen and key not in module._non_persistent_buffers_set:
            kind = "parameter" if key in module._parameters else "buffer"
            remedy = (
                "keep the groups' modules in eval mode while replacing (predecessor_eval=True)"
                if id(module) in predecessors
                else "make that module trainable (train_others=True) or keep it in eval mode"
            )
            raise VerificationError(
                f"the frozen module {run.names.get(id(module), '?')} ({type(module).__name__}) changed its {kind} "
                f"{key!r} in a {_mode(training)}-mode forward at rate 0; theseus_core holds batch-norm statistics "
                f"still but nothing else: {remedy}. The model is unchanged."
            )


def _extra_outputs(groups: Sequence[ResolvedGroup], expected: Trace) -> int | None:
    """The first group of several layers whose layers returned more tensors than the one that flows on, or None."""
    for position, group in enumerate(groups):
        calls = expected.layer_calls.get(position, [])
        if len(group.keys) > 1 and any(len(tensors(output)) > 1 for _, output in calls[:-1]):
            return position
    return None


def _rng_moved(
    groups: Sequence[ResolvedGroup], trace: Trace, expected: Trace, upto: int, layers: bool = False
) -> str | None:
    """The cause when the torch RNG had advanced differently before a group (or, with ``layers``, before one of
    its layers) than in the original, else None."""
    for position in trace.order:
        if position > upto:
            break
        states = [(trace.rng[position], expected.rng.get(position))]
        if layers:
            states += zip(trace.layer_rng.get(position, []), expected.layer_rng.get(position, []), strict=False)
        if any(theirs is not None and not torch.equal(ours, theirs) for ours, theirs in states):
            return (
                f"the torch RNG had drawn a different amount when group {groups[position].path!r} (or one of its "
                f"layers) started than in the original: the code around {_container(groups, position)} draws random "
                f"numbers per layer (LayerDrop, which skips layers at random), so a site of several layers changes "
                f"every later draw; set the layer-drop probability to 0 while replacing (a transformers config's "
                f"layerdrop / encoder_layerdrop / decoder_layerdrop)."
            )
    return None


def _arguments(
    module: nn.Module, args: tuple, kwargs: dict, primary_name: str | None, path: str
) -> tuple[Any, dict[str, Any]] | None:
    """(primary input, every other argument by name) of one call of a layer; positional arguments are named
    after the layer's signature (``#2`` where it has none)."""
    try:
        primary, rest, named = split_primary(args, kwargs, primary_name, path)
    except TypeError:
        return None
    try:
        names = list(inspect.signature(module.forward).parameters)[1:]
    except (TypeError, ValueError):
        names = []
    positional = {names[i] if i < len(names) else f"#{i + 1}": value for i, value in enumerate(rest)}
    return primary, {**positional, **named}


def _cause(groups: Sequence[ResolvedGroup], trace: Trace, expected: Trace, position: int, training: bool) -> str:
    """Why a group's output differs at rate 0, from how the original called the group's layers."""
    group = groups[position]
    container = _container(groups, position)
    randomness = _rng_moved(groups, trace, expected, position) if training else None
    if randomness is not None:
        return randomness
    if len(group.keys) > 1:
        layers = expected.layer_calls.get(position, [])
        primary_name = primary_parameter_name(group.modules[0])
        if layers and layers[0][1] is not None:
            first = _arguments(group.modules[0], *layers[0][0], primary_name, group.path)
            for layer, ((arguments, _), (_, before)) in enumerate(zip(layers[1:], layers, strict=False), 1):
                current = _arguments(group.modules[layer], *arguments, primary_name, group.path)
                if first is None or current is None:
                    continue
                for name in [*first[1], *(name for name in current[1] if name not in first[1])]:
                    gap = _argument_difference(first[1].get(name), current[1].get(name))
                    if gap is not None:
                        return (
                            f"the loop around {container} calls layer {layer} of the group with another {name!r} "
                            f"than layer 0 ({gap}: a per-layer mask such as a sliding window, or state one layer "
                            f"hands the next, such as T5's position_bias), but a site passes its first layer's "
                            f"arguments to every layer; use groups whose layers are called alike (groups of 1 "
                            f"there), or an adapter."
                        )
                try:
                    handed = primary_output(before) if before is not None else None
                except TypeError:
                    handed = None
                if handed is not None and difference(current[0], handed) is not None:
                    return (
                        f"the loop around {container} changes the hidden states between layers {layer - 1} and "
                        f"{layer} of the group (a residual, dropout, norm or convolution in the loop), which a "
                        f"site of several layers skips; use groups of 1 there, or an adapter."
                    )
        randomness = _rng_moved(groups, trace, expected, position, layers=True) if training else None
        if randomness is not None:
            return randomness
        return (
            f"the loop around {container} passes state from one layer to the next or changes the hidden states "
            f"between layers, which a site of several layers skips; group sizes of 1 there, or an adapter, are "
            f"needed."
        )
    if not training:
        return (
            f"the code around {container} uses its layers differently in eval mode (it reads or rewrites a layer's "
            f"attributes or weights, which a site passes through to its first layer only); an adapter is needed."
        )
    return f"the model calls the modules of {container} in a way a site does not reproduce; an adapter is needed."
