"""`replace_`: in-place Theseus surgery on any ``nn.Module``, and the `Theseus` handle.

Everything is validated before the first mutation: on any error the model is
untouched. The handle undoes the surgery (`Theseus.restore`) or makes it
permanent (`Theseus.finalize`).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from .checks import check_probability, is_integral
from .prepare import (
    Prepared,
    check_arguments,
    check_eval_route,
    check_examples,
    check_successors,
    example_batches,
    prepare,
)
from .registry import SuccessorRegistry
from .runs import ModelState
from .site import PredecessorChain, ReplacementSite, Router, boundary_width
from .spec import ModuleSpec, Plan
from .verify import ExampleRun, check_finalized, eval_outputs, run_original, verify


def replace_(
    model: nn.Module,
    specs: Sequence[ModuleSpec] | Plan,
    *,
    seed: int = 0,
    train_others: bool = False,
    eval_route: str = "successor",
    predecessor_eval: bool = False,
    example_inputs: tuple[Any, ...] | list[tuple[Any, ...] | Mapping[str, Any]] | None = None,
    example_kwargs: Mapping[str, Any] | None = None,
    compile: bool | Mapping[str, Any] = False,
    registry: SuccessorRegistry | None = None,
) -> Theseus:
    """Replaces each spec's predecessor group in ``model`` by a routing site, in place.

    Frozen means frozen: the parameters of the predecessor groups (and, unless
    ``train_others``, of everything outside the groups) stop requiring grad, and
    their batch norms stop updating their running statistics: in training mode
    they normalise with the batch's statistics, as the original's training
    forward does, but never write them (``track_running_stats`` is off while
    replacing; eval mode uses the running statistics as always). So `Theseus.restore`
    gives back a state_dict bit-identical to the one that went in, whatever was trained.

    Args:
        model: Any ``nn.Module``; it is modified in place.
        specs: The groups and their successors (a `Plan` or a list of `ModuleSpec`);
            groups must not overlap, and each appears once.
        seed: Seed of the handle's own generator for route draws, and of the torch
            RNG for the verification runs. Ranks of a data-parallel job with the
            same seed take the same routes. (default: ``0``)
        train_others: Leave modules outside the groups (embeddings, heads)
            trainable, batch-norm statistics included; by default they are frozen,
            as in the paper. A parameter a group shares with a module outside it
            (tied weights) stays frozen either way. (default: ``False``)
        eval_route: What runs in eval mode: ``"successor"`` (the paper),
            ``"predecessor"``, or ``"hybrid"`` (random routes at the current rate, from
            a generator apart from training's: evaluating never changes the training
            routes). (default: ``"successor"``)
        predecessor_eval: Keep predecessor groups in eval mode even while the
            model trains (no dropout in them, batch norm uses its running
            statistics). Off by default, so that rate 0 reproduces the original
            model in training mode. (default: ``False``)
        example_inputs, example_kwargs: Example batches. ``example_inputs`` is one
            batch's positional arguments (a tuple, ``model(*example_inputs,
            **example_kwargs)``) or a list of batches, each a tuple of positional
            arguments or a dict of keyword arguments; ``example_kwargs`` goes to
            every batch. A plan may add batches of its own (`Plan.more_examples`:
            `theseus_adapters.hf` adds one longer than any attention window of the
            config). With them, `replace_` verifies before it accepts: it runs the
            original on every batch in training mode (no grad, a fixed torch seed)
            and in eval mode, checks that it gives the same output twice, neither
            rebuilds its modules nor writes its weights, and checks every successor
            against its group's real input and output shapes; after the surgery it
            runs the model again at rate 0 (in eval mode the sites run their
            predecessors), and unless every output is exactly the original's and
            every frozen parameter and buffer is as it was, it undoes the surgery
            and raises `VerificationError` naming the group and the cause. Without
            them nothing is verified: a model whose code hands state between the
            layers of a group (T5's position_bias) or indexes its layers would be
            accepted and then be wrong. Verification sees only the batches it gets:
            a sliding window longer than their sequences changes nothing, so give
            one batch longer than any window; the example checks adapters register
            (`register_example_check`; `theseus_adapters.hf`: every window, chunk or
            bucket size the model's config names) refuse batches that do not,
            naming the config field. The runs leave the model, its buffers and the
            RNG as they were.
        compile: ``True`` or a dict of ``torch.compile`` options: compile the model
            and each branch of each site separately, so that changing routes never
            recompiles. Shapes are static (``dynamic=False``) and each compiled module
            counts its own recompilations (``isolate_recompiles=True``) unless the dict
            says otherwise. Options are checked before anything changes. (default: ``False``)
        registry: A private `SuccessorRegistry` where specs without a factory
            look theirs up first; the default registry (`register_successor`,
            where adapters put their defaults) comes after it. (default: ``None``,
            the default registry only)

    Returns:
        The `Theseus` handle that sets the rate, gives the successor parameters,
        and finalizes or restores the model.

    Raises:
        TypeError, ValueError, LookupError: Bad specs or arguments, with the
            path at fault and what to do; the model is then unchanged.
        VerificationError: (a ``ValueError``) the verification run did not
            reproduce the original, or a registered example check refused the
            batches; the model is then unchanged.
    """
    compile_options = check_arguments(model, specs, seed, eval_route, compile, example_inputs, example_kwargs)
    if registry is not None and not isinstance(registry, SuccessorRegistry):
        raise TypeError(f"registry must be a theseus_core.SuccessorRegistry, got {type(registry).__name__}")
    prepared = prepare(model, specs, registry)
    frozen = frozen_modules(model, [m for item in prepared for m in item.group.modules], train_others)
    run = None
    batches = example_batches(example_inputs, example_kwargs, specs)
    if batches:
        check_examples(model, batches)
        run = ExampleRun(model, batches, int(seed), frozen)
        reference = run_original(run, [item.group for item in prepared], predecessor_eval)
        check_successors(prepared, reference.group_inputs, reference.group_outputs)
    modes = [(module, module.training) for module in model.modules()]
    # --- nothing above this line changes the model ---
    theseus = Theseus._install(
        model,
        prepared,
        frozen,
        seed=int(seed),
        eval_route=eval_route,
        predecessor_eval=predecessor_eval,
        on_finalize=specs.on_finalize if isinstance(specs, Plan) else None,
        examples=run,
    )
    if run is not None:
        try:
            verify(run, theseus._sites, [item.group for item in prepared], reference)
        except BaseException:
            theseus.restore()
            for module, training in modes:
                module.training = training
            raise
        theseus._router.reset()
    if compile_options is not None:
        theseus._compile(compile_options)
    return theseus


_ROUTING_STATE = ("paths", "seed", "rate", "eval_route", "generator_state", "calls", "successor_calls")
"""The entries of `Theseus.state_dict`."""


class Theseus:
    """Handle on a model under Theseus replacement, returned by `replace_`.

    Set `rate` every step (from a schedule), optimise `successor_parameters`,
    then `finalize` to keep the successors or `restore` to undo everything.
    """

    def __init__(self) -> None:
        raise TypeError("a Theseus handle is created by theseus_core.replace_(model, specs)")

    @classmethod
    def _install(
        cls,
        model: nn.Module,
        prepared: list[Prepared],
        frozen: list[nn.Module],
        *,
        seed: int,
        eval_route: str,
        predecessor_eval: bool,
        on_finalize: Any,
        examples: ExampleRun | None = None,
    ) -> Theseus:
        self = object.__new__(cls)
        self._model = model
        self._on_finalize = on_finalize
        self._examples = examples  # what finalize checks the finalized model on
        self._state = "active"
        self._router = Router(seed, len(prepared))
        self._router.eval_route = eval_route
        self._requires_grad = [(p, p.requires_grad) for p in model.parameters()]
        self._saved_children = {}  # id(container) -> (container, its children before surgery)
        self._compiled = False
        self._held_norms = _freeze(frozen)
        self._sites: list[ReplacementSite] = []
        for index, item in enumerate(prepared):
            item.successor.requires_grad_(True)
            chain = PredecessorChain(list(item.group.modules))
            chain.train(item.group.modules[0].training)
            self._sites.append(
                ReplacementSite(
                    item.spec.path,
                    index,
                    chain,
                    item.successor,
                    self._router,
                    predecessor_eval,
                )
            )
        sites_by_container: dict[int, dict[tuple[str, ...], ReplacementSite]] = {}
        for item, site in zip(prepared, self._sites, strict=True):
            container = item.group.container
            self._saved_children.setdefault(id(container), (container, OrderedDict(container._modules)))
            sites_by_container.setdefault(id(container), {})[item.group.keys] = site
        for container, _ in self._saved_children.values():
            _swap_children(container, sites_by_container[id(container)])
        return self

    def _eager(self) -> contextlib.AbstractContextManager:
        """Within: a compiled model runs eagerly, so that the model at rate 1 and the finalized one (compiled into
        graphs of other bounds, which may round differently) are compared exactly, as eager models are."""
        return torch.compiler.set_stance("force_eager") if self._compiled else contextlib.nullcontext()

    def _compile(self, options: dict[str, Any]) -> None:
        self._model.compile(**options)
        for site in self._sites:
            site.predecessor.compile(**options)
            site.successor.compile(**options)
        self._compiled = True

    # ------------------------------------------------------------------ routing
    @property
    def rate(self) -> float:
        """Probability that a group runs its successor in a training forward, in [0, 1]; set only while the
        handle is active (`RuntimeError` once finalized or restored: nothing routes any more)."""
        return self._router.rate

    @rate.setter
    def rate(self, value: float) -> None:
        self._require("active")  # a finalized or restored model has no sites left to route
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        self._router.rate = check_probability("Theseus.rate", value)

    @property
    def eval_route(self) -> str:
        """What runs in eval mode: ``"successor"``, ``"predecessor"`` or ``"hybrid"``."""
        return self._router.eval_route

    @eval_route.setter
    def eval_route(self, value: str) -> None:
        self._require("active")
        check_eval_route(value)
        self._router.eval_route = value

    @property
    def model(self) -> nn.Module:
        return self._model

    @property
    def sites(self) -> tuple[ReplacementSite, ...]:
        return tuple(self._sites)

    @property
    def last_routes(self) -> dict[str, bool | None]:
        """Per group path, whether its latest draw chose the successor (``None``: no draw yet)."""
        return {site.path: route for site, route in zip(self._sites, self._router.last_routes, strict=True)}

    @property
    def route_counts(self) -> dict[str, tuple[int, int]]:
        """Per group path, (training calls, of which took the successor)."""
        router = self._router
        return {s.path: (router.calls[s.index], router.successor_calls[s.index]) for s in self._sites}

    def share_routes(self, copy: nn.Module) -> None:
        """Makes ``copy``, a `copy.deepcopy` of the handle's model, route through this handle: its sites draw from
        this handle's generator at this handle's rate, so that the routes `rate` sets, `state_dict` saves and
        `last_routes` reports are those ``copy`` takes (a data-parallel wrapper that trains a sharded copy, as
        FSDP2 does in `theseus_zoo.training.sharding`). Nothing else is shared: `finalize` and `restore` act on the
        handle's own model.

        Raises:
            ValueError: ``copy`` does not hold sites at this handle's paths, in order.
        """
        self._require("active")
        sites = [module for module in copy.modules() if isinstance(module, ReplacementSite)]
        paths = [site.path for site in self._sites]
        if [site.path for site in sites] != paths:
            raise ValueError(
                f"share_routes: the copy's sites are at {[site.path for site in sites]}, this handle's at {paths}; "
                f"give a copy.deepcopy of the handle's model"
            )
        for site in sites:
            site._router = self._router

    # --------------------------------------------------------------- parameters
    def successor_parameters(self) -> Iterator[nn.Parameter]:
        """Parameters of the successors and their projections: what the optimizer trains."""
        self._require("active")  # when called: a generator would check only once iterated
        return (param for site in self._sites for param in site.successor.parameters())

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        """Every parameter with ``requires_grad`` (successors, plus the rest with ``train_others``)."""
        self._require("active")
        return (p for p in self._model.parameters() if p.requires_grad)

    # ------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Routing state (generator, counters, rate), so a resumed run takes the same routes."""
        router = self._router
        return {
            "paths": [site.path for site in self._sites],
            "seed": router.seed,
            "rate": router.rate,
            "eval_route": router.eval_route,
            "generator_state": router.generator.get_state(),
            "calls": list(router.calls),
            "successor_calls": list(router.successor_calls),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores what `state_dict` saved, or raises and changes nothing: every entry is checked first (the group
        paths must match this handle's; rate, eval route, seed, the generator state, and the per-group counters,
        one per group)."""
        paths = [site.path for site in self._sites]
        if not isinstance(state, Mapping):
            raise TypeError(f"load_state_dict takes what Theseus.state_dict returned, got {type(state).__name__}")
        missing = [key for key in _ROUTING_STATE if key not in state]
        if missing:
            raise ValueError(f"this routing state has no {', '.join(map(repr, missing))}: give what state_dict saved")
        if list(state["paths"]) != paths:
            raise ValueError(f"this routing state is for groups {state['paths']}, this handle has {paths}")
        rate = check_probability("this routing state's rate", state["rate"])
        check_eval_route(state["eval_route"])
        if not is_integral(state["seed"]):
            raise ValueError(f"this routing state's seed must be an integer, got {state['seed']!r}")
        counters = {}
        for key in ("calls", "successor_calls"):
            values = state[key]
            if not isinstance(values, Sequence) or len(values) != len(paths) or not all(map(is_integral, values)):
                raise ValueError(
                    f"this routing state's {key} must be {len(paths)} integers (one per group), got {values!r}"
                )
            counters[key] = [int(value) for value in values]
        generator = torch.Generator()
        try:  # torch checks the state's size and type: on a scratch generator, so that a bad one writes nothing
            generator.set_state(state["generator_state"])
        except (TypeError, RuntimeError, ValueError) as error:
            raise ValueError(
                f"this routing state's generator_state is not a torch generator's state: {error}"
            ) from error
        router = self._router  # written directly: a finished handle still takes its state (a checkpoint's callback)
        router.rate, router.eval_route = rate, state["eval_route"]
        router.seed = int(state["seed"])
        router.generator.set_state(generator.get_state())
        router.calls, router.successor_calls = counters["calls"], counters["successor_calls"]

    # -------------------------------------------------------------- finishing
    def finalize(self) -> nn.Module:
        """Makes the replacement permanent and returns the model (the same object), or refuses and changes nothing.

        Every site becomes its successor (with its projections, where it has
        any, as a `Projected` that passes attribute reads through to the
        successor; a `Projected` without projections too where the model
        passed the group its input by a keyword the successor does not take,
        or positionally to a successor that takes it only by keyword); the
        predecessor modules leave the model. Parameters outside
        the groups get back the ``requires_grad`` they had before `replace_`;
        successors stay trainable. The plan's ``on_finalize`` hook runs last.

        When `replace_` had example batches, the finalized model runs them in
        eval mode and must return exactly what the model at rate 1 returned on
        them just before (the successors in place, eval mode; both run eagerly
        when the handle compiled the model); otherwise, or if
        the hook raises, finalize undoes itself (the model's structure and
        ``requires_grad`` as they were, and whatever the hook's returned undo
        callable puts back) and raises.

        Raises:
            VerificationError: The finalized model raised or differs from the
                model at rate 1 on an example batch (one line); the handle stays
                active.
        """
        self._require("active")
        expected = None
        if self._examples is not None:
            eval_route, self._router.eval_route = self._router.eval_route, "successor"
            try:
                with self._eager():
                    expected = eval_outputs(self._examples)
            finally:
                self._router.eval_route = eval_route
        before = ModelState(self._model)
        flags = [(param, param.requires_grad) for param in self._model.parameters()]
        finals = {id(site): _final(site) for site in self._sites}
        undo = None
        try:
            for container, _ in self._saved_children.values():
                for key, child in container._modules.items():
                    if id(child) in finals:
                        container._modules[key] = finals[id(child)]
            self._unfreeze()
            if self._on_finalize is not None:
                undo = self._on_finalize(self._model)
            if expected is not None:
                with self._eager():
                    check_finalized(self._examples, expected)
        except BaseException:
            if callable(undo):
                undo()
            before.restore()
            for param, requires_grad in flags:
                param.requires_grad_(requires_grad)
            for norm in self._held_norms:
                norm.track_running_stats = False
            raise
        self._state = "finalized"
        self._examples = None
        return self._model

    def restore(self) -> nn.Module:
        """Undoes `replace_`: the original modules return to their places and get back
        their ``requires_grad``; the successors are dropped. Returns the model."""
        self._require("active")
        for container, children in self._saved_children.values():
            container._modules.clear()
            container._modules.update(children)
        for site in self._sites:  # the group's modules take their site's mode; the others keep theirs
            for layer in site.predecessor.layers:
                layer.train(site.training)
        self._unfreeze()
        if self._compiled:
            self._model._compiled_call_impl = None  # undo nn.Module.compile()
        self._state = "restored"
        return self._model

    def _unfreeze(self) -> None:
        """Gives parameters their ``requires_grad`` back and batch norms their statistics tracking."""
        for param, requires_grad in self._requires_grad:
            param.requires_grad_(requires_grad)
        for norm in self._held_norms:
            norm.track_running_stats = True

    def _require(self, state: str) -> None:
        if self._state != state:
            now = (
                "the model keeps its successors for good; it is .model (a copy of the original taken before replace_ "
                "is the way back)"
                if self._state == "finalized"
                else "the model is the original again; call replace_ again to start over"
            )
            raise RuntimeError(f"this Theseus handle was already {self._state}: {now}")

    def __repr__(self) -> str:
        lines = [
            f"Theseus(rate={self.rate:g}, eval_route={self.eval_route!r}, seed={self._router.seed}, "
            f"state={self._state!r}, sites=["
        ]
        for site, (calls, successor_calls) in zip(self._sites, self.route_counts.values(), strict=True):
            layers = site.predecessor.layers
            names = sorted({type(m).__name__ for m in layers})
            successor = site.successor
            described = f"{type(successor.inner).__name__} ({_count(successor.inner):,} params)"
            for side in ("in_proj", "out_proj"):
                projection = getattr(successor, side)
                if projection is not None:
                    described += f" + {side} {_describe_projection(projection)}"
            lines.append(
                f"  {site.path!r}: {len(layers)} × {'/'.join(names)} ({_count(site.predecessor):,} params) "
                f"→ {described}; {calls} training calls, {successor_calls} to the successor"
            )
        lines.append("])")
        return "\n".join(lines)


def _final(site: ReplacementSite) -> nn.Module:
    """What a site becomes: its bare successor, or the `Projected` around it when it has projections or takes its
    input otherwise than callers passed the group's (another name, or only by keyword)."""
    ways = site.primary_passed or {"positionally"}  # a site never called: as the group is usually called
    bare = site.successor.stands_bare("positionally" in ways, "by_keyword" in ways)
    return site.successor.inner if bare else site.successor


def _describe_projection(projection: nn.Module) -> str:
    widths = boundary_width(projection, "in"), boundary_width(projection, "out")
    if None in widths:
        return type(projection).__name__
    return f"{type(projection).__name__}({widths[0][0]}→{widths[1][0]})"


def frozen_modules(model: nn.Module, predecessors: list[nn.Module], train_others: bool) -> list[nn.Module]:
    """The modules that must not change while replacing: the predecessor groups, and the rest of the model
    unless ``train_others`` (the successors are not in the model yet)."""
    inside = {id(m) for module in predecessors for m in module.modules()}
    return [m for m in model.modules() if id(m) in inside or not train_others]


def _freeze(frozen: list[nn.Module]) -> list[_BatchNorm]:
    """Frozen means frozen, parameters and buffers, in this one place.

    Parameters stop requiring grad, so no gradient is even computed for them (the reference code only left
    them out of the optimizer). Batch norms stop tracking statistics: in training mode they normalise with
    the batch's statistics, exactly as in the original's training forward, but never write their running
    statistics or ``num_batches_tracked``; in eval mode they use the running statistics as before. Returns
    the batch norms to give their tracking back to."""
    for module in frozen:
        for param in module.parameters(recurse=False):
            param.requires_grad_(False)
    held = [m for m in frozen if isinstance(m, _BatchNorm) and m.track_running_stats and m.running_mean is not None]
    for norm in held:
        norm.track_running_stats = False
    return held


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _swap_children(container: nn.Module, sites: dict[tuple[str, ...], ReplacementSite]) -> None:
    """Puts each site in place of its group's children; consecutive numeric keys are renumbered
    so that the container reads as if it had been built with the sites."""
    first_keys = {keys[0]: (keys, site) for keys, site in sites.items()}
    skipped: set[str] = set()
    children: list[tuple[str, nn.Module | None]] = []
    for key, child in container._modules.items():
        if key in skipped:
            continue
        if key in first_keys:
            keys, site = first_keys[key]
            skipped.update(keys[1:])
            children.append((key, site))
        else:
            children.append((key, child))
    if isinstance(container, (nn.ModuleList, nn.Sequential)) and all(key.isdigit() for key, _ in children):
        children = [(str(index), child) for index, (_, child) in enumerate(children)]
    container._modules.clear()
    container._modules.update(children)
