"""A successor per group, chosen under a budget: Puzzle's four stages (Bercovich et al., ICML 2025) for any model.

1. **Candidates**: for each group of a plan, named alternatives, each a `ModuleSpec` on the group's path (``keep``:
   the group's own layers, ``skip``: the identity (`theseus_core.candidates`), or any registered or hand-made
   successor). `CandidateLibrary` builds every one of them through `replace_` (verified at rate 0 like any
   replacement; one that `replace_` refuses is left out of its group, and said so in `CandidateLibrary.refused`).
2. **Blockwise local distillation** (`CandidateLibrary.distill_`): the predecessor runs once per batch, its groups'
   real inputs and outputs recorded, and every candidate of every group learns to map the one to the other (MSE),
   all in one pass; the predecessor never changes.
3. **Scores** (`CandidateLibrary.scores`): each candidate in the otherwise original predecessor, on held-out
   batches: minus the soft loss of its outputs against the predecessor's (KL, or MSE for a regression head:
   `theseus_core.distillation.prediction_loss`); ``keep`` scores 0.
   **Costs** (`CandidateLibrary.costs`): measured, not guessed: each candidate's latency on its group's real input
   (interleaved rounds, the median, read with `latency_clock`), its parameters and multiply-adds (`multiply_adds`);
   the rest of the model (outside the groups) is measured once.
4. **An exact solver** (`theseus_core.budget.solve`): one candidate per group maximising the summed score under a
   limit on the summed cost, as a mixed-integer program (``scipy.optimize.milp``); `CandidateLibrary.choose` turns a
   budget (a fraction of the predecessor's cost) into that limit and refuses, in one line, a budget outside (0, 1)
   or one that even the cheapest choice exceeds (`CandidateLibrary.check_budget`, which refuses without solving).
   Neither costs nor scores need add up over groups: `CandidateLibrary.choose_measured` assembles and measures each
   choice the solver makes (``measure(chosen)``), corrects the budget it gives the solver by what it measured, can
   measure alternatives beside them (`CandidateLibrary.uniform_choices`), and can compare those that fit by a score
   of the assembled choice (`CandidateLibrary.assembled_score`) instead of the summed one. Stage 4 is arithmetic
   over the numbers stage 3 measured, so it lives in `theseus_core.budget.CostTable` (no model needed): the
   library's stage-4 methods hand it their groups and costs.

`CandidateLibrary.plan` gives the chosen candidates as a `Plan` whose successors start from their distilled
weights: ``replace_(model, plan)`` then trains them like any successors (the global stage).

Example (``forward(model, batch) -> logits``; ``keep`` is added for every group; the hook splices the chosen
`Kept` and `Skip` out of the finalized model)::

    library = CandidateLibrary(
        model, {"skip": skip_specs(plan), "mine": plan}, example_inputs=[(x,)], on_finalize=lambda m: splice_(m.blocks)
    )
    library.distill_(batches, forward, steps=200, lr=1e-3)
    costs = library.costs(held_out[0], forward)
    choice = library.choose(library.scores(held_out, forward), costs, budget=0.5)
    theseus = replace_(model, library.plan(choice))
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .budget import Choice, Cost, CostTable, _check_choice, _check_range
from .candidates import _copy_group, keep_specs
from .checks import is_int
from .costs import latency_clock, multiply_adds
from .distillation import prediction_loss
from .engine import replace_
from .registry import SuccessorRegistry
from .runs import cuda_devices, evaluating
from .site import primary_output, split_primary
from .spec import ModuleSpec, Plan

Forward = Callable[[nn.Module, Any], torch.Tensor]
"""``forward(model, batch) -> logits``: how the model is run on a batch (a family's ``Task.logits``)."""

KEEP = "keep"


def _stream_seed(base: int, *names: str) -> int:
    """A seed of its own for what ``names`` name (a candidate column, a candidate), from one draw ``base``."""
    digest = hashlib.blake2b("\0".join([str(base), *names]).encode(), digest_size=8).digest()
    return int.from_bytes(digest) >> 1


class _Streams:
    """Random streams of their own, one per name, on the CPU and the given CUDA devices: what runs inside `use`
    draws from its name's stream alone (each stream goes on where it stopped), and the caller's stream is left as it
    was."""

    def __init__(self, base: int, devices: list[int]) -> None:
        self.base, self.devices = base, devices
        self.states: dict[tuple[str, ...], tuple[torch.Tensor, list[torch.Tensor]]] = {}

    @contextlib.contextmanager
    def use(self, *names: str) -> Iterator[None]:
        with torch.random.fork_rng(devices=self.devices):
            state = self.states.get(names)
            if state is None:
                torch.manual_seed(_stream_seed(self.base, *names))
            else:
                torch.set_rng_state(state[0])
                for device, device_state in zip(self.devices, state[1], strict=True):
                    torch.cuda.set_rng_state(device_state, device)
            try:
                yield
            finally:
                self.states[names] = (
                    torch.get_rng_state(),
                    [torch.cuda.get_rng_state(device) for device in self.devices],
                )


_KEPT = (_copy_group, None, None)
"""A `keep_specs` spec's successor and projections."""
_REFUSALS = (ValueError, TypeError, RuntimeError)
"""What `replace_` raises for a candidate it refuses (`CandidateLibrary`)."""


class CandidateLibrary:
    """Every candidate of every group, built beside a frozen reference copy of the model (module doc).

    Args:
        model: The predecessor; only read (every candidate lives in a copy of its own).
        candidates: Name -> specs, one per group the candidate exists for; a group is a path, and its candidates
            are the specs on that path. ``keep`` (each group's own layers: what the predecessor costs, and scores 0)
            is the library's own, added for every group: a ``keep`` given must be `keep_specs`'.
        example_inputs: Passed to `replace_`, which runs each candidate at rate 0 on them and refuses a wrong one.
        example_kwargs: Likewise. (default: none)
        on_finalize: The plan hook `plan` hands on: the family's (e.g. a config's layer count), or on a model of
            your own `splice_` of the container the groups sit in, so that no `Kept` or `Skip` stays in the
            finalized model. (default: none)
        registry: Passed to `replace_`: where specs that name their successor find it. (default: the global one)
        more_examples: More batches every candidate is verified on, as a plan's `Plan.more_examples` (a family's:
            `theseus_adapters.hf.plan`'s repeats the example tokens past any attention window); `plan` hands it on.
            (default: that of the first candidate given as a `Plan` with one, else none)

    A candidate that `replace_` refuses (a ``ValueError``, ``TypeError`` or ``RuntimeError``: it fails its
    verification, or cannot run on the group's input) is left out of its group and said in `refused` (a family's
    candidate may not fit some models: a narrow BasicBlock for a Bottleneck); when every candidate but ``keep`` is
    refused, the library raises. Any other error of a factory is raised, naming the candidate. The model is only
    read, whatever is raised.
    """

    def __init__(
        self,
        model: nn.Module,
        candidates: Mapping[str, Sequence[ModuleSpec]],
        *,
        example_inputs: Any = None,
        example_kwargs: Mapping[str, Any] | None = None,
        on_finalize: Callable[[nn.Module], None] | None = None,
        registry: SuccessorRegistry | None = None,
        more_examples: Callable[..., list[tuple[tuple, dict[str, Any]]]] | None = None,
    ) -> None:
        if not isinstance(candidates, Mapping) or not candidates:
            raise ValueError("candidates: a mapping of candidate name -> specs (one per group), with at least one")
        for name, specs in candidates.items():
            if not isinstance(specs, Sequence) or not specs or not all(isinstance(spec, ModuleSpec) for spec in specs):
                raise ValueError(f"candidate {name!r}: a non-empty list of ModuleSpec, one per group, got {specs!r}")
            paths_given = [spec.path for spec in specs]
            twice = sorted({path for path in paths_given if paths_given.count(path) > 1})
            if twice:
                raise ValueError(f"candidate {name!r} has more than one spec for the group at {', '.join(twice)}")
        own = [spec for spec in candidates.get(KEEP, ()) if (spec.successor, spec.in_proj, spec.out_proj) != _KEPT]
        if own:
            raise ValueError(
                f"{KEEP!r} is the library's own candidate (each group's layers, `keep_specs`), added for every group; "
                f"give yours another name (it has a spec for {own[0].path} of its own)"
            )
        paths = list(dict.fromkeys(spec.path for specs in candidates.values() for spec in specs))
        columns = {
            KEEP: keep_specs([ModuleSpec(path) for path in paths]),
            **{name: specs for name, specs in candidates.items() if name != KEEP},
        }
        if more_examples is None:
            given = (getattr(specs, "more_examples", None) for specs in candidates.values())
            more_examples = next((found for found in given if found is not None), None)
        self.paths, self.on_finalize, self.more_examples = paths, on_finalize, more_examples
        options = {"example_inputs": example_inputs, "example_kwargs": example_kwargs, "registry": registry}
        self.reference = copy.deepcopy(model).eval()
        self._reference = replace_(self.reference, self._verified(columns[KEEP]), eval_route="predecessor", **options)
        self._site_of = {site.path: index for index, site in enumerate(self._reference.sites)}
        self.successors: dict[tuple[str, str], nn.Module] = {}
        self.specs: dict[tuple[str, str], ModuleSpec] = {}
        self.refused: dict[tuple[str, str], str] = {}
        for spec in columns[KEEP]:
            site = self._reference.sites[self._site_of[spec.path]]
            self.successors[(spec.path, KEEP)], self.specs[(spec.path, KEEP)] = site.successor, spec
        # one draw from the caller's stream, whatever the candidates: each column builds (and each candidate later
        # distils, `distill_`) from a stream of its own, so adding or removing a candidate changes no other
        self.streams = _Streams(int(torch.randint(0, 2**62, ())), cuda_devices(model))
        for name, specs in columns.items():
            if name == KEEP:
                continue
            with self.streams.use("build", name):
                built = self._build(model, name, specs, options)
            for spec, successor in built:  # candidates rest in eval mode (`distill_` trains them, then puts them back)
                self.successors[(spec.path, name)], self.specs[(spec.path, name)] = successor.eval(), spec
        if all(name == KEEP for _, name in self.successors):
            if not self.refused:
                raise ValueError(f"a candidate library needs a candidate besides {KEEP!r}, which it adds itself")
            (path, name), reason = next(iter(self.refused.items()))
            raise ValueError(
                f"every candidate but {KEEP!r} was refused (candidate {name!r} for the group at {path}: {reason}); "
                f"CandidateLibrary.refused would list each"
            )

    def _build(
        self, model: nn.Module, name: str, specs: Sequence[ModuleSpec], options: dict[str, Any]
    ) -> list[tuple[ModuleSpec, nn.Module]]:
        """Column ``name``'s candidates, each with its spec; those `replace_` refuses go into `refused` (class doc)."""
        try:  # the whole column in one copy of the model; only its successors are kept, the copy goes
            handle = replace_(copy.deepcopy(model), self._verified(specs), **options)
            by_path = {site.path: site.successor for site in handle.sites}
            return [(spec, by_path[spec.path]) for spec in specs]
        except _REFUSALS:
            pass
        except Exception as error:
            error.add_note(f"while building candidate {name!r} of the candidate library")
            raise
        built = []
        for spec in specs:  # one at a time, so that one refusal costs one candidate
            try:
                handle = replace_(copy.deepcopy(model), self._verified([spec]), **options)
                built.append((spec, handle.sites[0].successor))
            except _REFUSALS as error:
                self.refused[(spec.path, name)] = str(error).splitlines()[0]
            except Exception as error:
                error.add_note(f"while building candidate {name!r} for the group at {spec.path}")
                raise
        return built

    def _verified(self, specs: Sequence[ModuleSpec]) -> Plan:
        """``specs`` as a plan for `replace_`, verified on the library's `more_examples` too."""
        return Plan(list(specs), more_examples=self.more_examples)

    def names(self, path: str) -> list[str]:
        """The candidates of group ``path``, in the order they were given (``keep`` first when added)."""
        return [name for (group, name) in self.successors if group == path]

    def trainable(self) -> list[nn.Parameter]:
        """The parameters `distill_` trains: every candidate's but ``keep``'s (an exact copy of its group)."""
        return [p for (path, name), module in self.successors.items() if name != KEEP for p in module.parameters()]

    # ------------------------------------------------------------------------------------------------ 2. BLD
    def record(self, batch: Any, forward: Forward) -> tuple[torch.Tensor, dict[str, tuple[tuple, dict, Any]]]:
        """One forward of the reference (every group original, eval mode, no gradient): its logits and each group's
        call (positional and keyword arguments) and output."""
        calls: dict[str, tuple[tuple, dict, Any]] = {}
        handles = [
            site.register_forward_hook(
                lambda module, args, kwargs, output, path=site.path: calls.__setitem__(path, (args, kwargs, output)),
                with_kwargs=True,
            )
            for site in self._reference.sites
        ]
        try:
            with torch.no_grad():
                logits = forward(self.reference, batch)
        finally:
            for handle in handles:
                handle.remove()
        return logits, calls

    def _run(self, key: tuple[str, str], call: tuple[tuple, dict, Any]) -> torch.Tensor:
        successor = self.successors[key]
        args, kwargs, _ = call
        primary, rest, named = split_primary(args, kwargs, successor.primary_name, f"the group at {key[0]}")
        return primary_output(successor(primary, *rest, **named))

    def distill_(
        self,
        batches: Iterable[Any],
        forward: Forward,
        *,
        steps: int,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        on_step: Callable[[int, float], None] | None = None,
    ) -> list[float]:
        """Blockwise local distillation of every candidate at once (module doc): ``steps`` AdamW steps over
        ``batches`` in turn (any iterable, read once: a ``DataLoader`` gives one epoch); returns the summed loss of each
        step. Only candidate parameters move. Each candidate draws its randomness (dropout) from a stream of its own,
        so that the others do not change what it learns. ``on_step(step, loss)``: called after each step (a progress
        bar)."""
        batches = list(batches)
        if not isinstance(steps, int) or steps < 1 or not batches:
            raise ValueError(f"distill_ needs steps >= 1 and batches, got steps={steps!r}, {len(batches)} batches")
        trained = self.trainable()
        if not trained:
            return []
        optimizer = torch.optim.AdamW(trained, lr=lr, weight_decay=weight_decay)
        keys = [key for key in self.successors if key[1] != KEEP]
        losses = []
        for step in range(steps):
            _, calls = self.record(batches[step % len(batches)], forward)
            for key in keys:
                self.successors[key].train()
            terms = []
            for key in keys:
                with self.streams.use("distill", *key):
                    output = self._run(key, calls[key[0]])
                terms.append(F.mse_loss(output, primary_output(calls[key[0]][2])))
            loss = torch.stack(terms).sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            if on_step is not None:
                on_step(step, losses[-1])
        for key in keys:
            self.successors[key].eval()
        return losses

    # ------------------------------------------------------------------------------------------------ 3. scores
    def scores(self, batches: Iterable[Any], forward: Forward) -> dict[tuple[str, str], float]:
        """Each candidate alone in the otherwise original reference, in eval mode: minus its mean soft loss against
        the reference's own logits over ``batches`` (0 is the best: the group's own output). ``batches``: any
        iterable, read once (every candidate sees the same batches)."""
        batches, references = self._references(batches, forward)
        return {
            key: 0.0 if key[1] == KEEP else self._soft_score({key[0]: key[1]}, batches, references, forward)
            for key in self.successors
        }

    def assembled_score(self, chosen: Mapping[str, str], batches: Iterable[Any], forward: Forward) -> float:
        """``chosen`` as a whole: every group running its chosen candidate at once in the reference (eval mode),
        minus the mean soft loss against the reference's own logits over ``batches``; what `scores` measures for one
        group at a time, so a choice of one candidate scores as that candidate does. Unlike a summed score, it sees
        what the groups do together. ``batches``: any iterable, read once."""
        self.check_choice(chosen)
        batches, references = self._references(batches, forward)
        return self._soft_score(chosen, batches, references, forward)

    def _references(self, batches: Iterable[Any], forward: Forward) -> tuple[list[Any], list[torch.Tensor]]:
        """``batches`` read once into a list (at least one), and the reference's logits on each."""
        batches = list(batches)
        if not batches:
            raise ValueError("scores need at least one batch")
        return batches, [self.record(batch, forward)[0] for batch in batches]

    def _soft_score(
        self, chosen: Mapping[str, str], batches: Sequence[Any], references: Sequence[torch.Tensor], forward: Forward
    ) -> float:
        """Minus the mean soft loss of the reference with each group of ``chosen`` running its candidate (the
        sites' predecessor branches swapped for them, then put back)."""
        self.reference.eval()
        with contextlib.ExitStack() as running, torch.no_grad():
            for path, name in chosen.items():
                if name != KEEP:
                    site = self._reference.sites[self._site_of[path]]
                    running.enter_context(site.running(self.successors[(path, name)].eval()))
            losses = [
                float(prediction_loss(forward(self.reference, batch), reference))
                for batch, reference in zip(batches, references, strict=True)
            ]
        return -statistics.mean(losses)

    def costs(self, batch: Any, forward: Forward, *, rounds: int = 11) -> tuple[dict[tuple[str, str], Cost], Cost]:
        """Each candidate's measured cost on its group's real input from ``batch`` (eval mode, no gradient; rounds
        interleaved across candidates, the first dropped, the median kept), and the cost of the model outside the
        groups: the median over rounds of the reference's latency minus its groups' (``keep``) in the same round
        (so that a load that comes and goes between rounds cancels), its parameters outside them, and its
        multiply-adds on ``batch`` minus its groups'. Times are read with `latency_clock` on the device of the
        reference's parameters; multiply-adds are counted once (`multiply_adds`: exact, they add up)."""
        if not is_int(rounds) or rounds < 1:
            raise ValueError(f"costs need rounds >= 1 (the first, a warm-up, is dropped besides), got {rounds!r}")
        _, calls = self.record(batch, forward)
        with evaluating(self.successors.values()), torch.no_grad():
            macs = {key: multiply_adds(lambda key=key: self._run(key, calls[key[0]])) for key in self.successors}
            whole_macs = multiply_adds(lambda: forward(self.reference, batch))
        timed = latency_clock(next(self.reference.parameters()).device)
        timings: dict[tuple[str, str], list[float]] = {key: [] for key in self.successors}
        whole: list[float] = []
        with evaluating(self.successors.values()), torch.no_grad():
            for round_index in range(rounds + 1):
                for key in self.successors:
                    seconds = timed(lambda key=key: self._run(key, calls[key[0]]))
                    if round_index:
                        timings[key].append(seconds)
                seconds = timed(lambda: forward(self.reference, batch))
                if round_index:
                    whole.append(seconds)
        costs = {
            key: Cost(statistics.median(values), sum(p.numel() for p in self.successors[key].parameters()), macs[key])
            for key, values in timings.items()
        }
        inside = {id(p) for site in self._reference.sites for p in site.parameters()}  # groups and keep copies
        outside = sum(p.numel() for p in self.reference.parameters() if id(p) not in inside)
        per_round = [
            total - sum(timings[(path, KEEP)][index] for path in self.paths) for index, total in enumerate(whole)
        ]
        inner_macs = sum(macs[(path, KEEP)] for path in self.paths)
        rest = Cost(max(0.0, statistics.median(per_round)), outside, max(0, whole_macs - inner_macs))
        return costs, rest

    # ------------------------------------------------------------------------------------------------ 4. choose
    def check_budget(
        self, costs: tuple[Mapping[tuple[str, str], Cost], Cost], budget: float, kind: str = "latency"
    ) -> None:
        """Raises `ValueError` in one line for a budget outside (0, 1), one that even the cheapest candidates (the
        cheapest of every group, with the rest of the model) exceed, or one that only choices without a parameter
        to train fit (every group skipped: the successors would have nothing to learn); solves nothing. `choose`
        refuses by it."""
        _check_range(budget, kind)  # the budget first, then the costs (`_table`)
        self._table(costs).check_budget(budget, kind)

    def _table(self, costs: tuple[Mapping[tuple[str, str], Cost], Cost]) -> CostTable:
        """``costs`` (the pair `costs` returns) as the `CostTable` stage 4 chooses by; raises `ValueError` in one
        line for costs of another library or shape."""
        self._check_entries("costs", costs[0] if isinstance(costs, tuple) and len(costs) == 2 else None)
        per_key, rest = costs
        candidates = {path: self.names(path) for path in self.paths}
        return CostTable(candidates, per_key, rest, keep=KEEP, refused=len(self.refused))

    def choose(
        self,
        scores: Mapping[tuple[str, str], float],
        costs: tuple[Mapping[tuple[str, str], Cost], Cost],
        budget: float,
        kind: str = "latency",
    ) -> Choice:
        """The candidates maximising the summed score with the whole model's cost within ``budget`` times the
        predecessor's (`CostTable.choose`), at least one of them with parameters to train. Raises `ValueError` in
        one line for a budget outside (0, 1), one that even the cheapest candidates exceed, or one that only
        parameter-free choices fit (`check_budget`)."""
        self._check_entries("scores", scores)  # the inputs first: what they say must not hang on measured costs
        _check_range(budget, kind)  # as `check_budget`: the budget, then the costs
        return self._table(costs).choose(scores, budget, kind)

    def cheapest(self, costs: tuple[Mapping[tuple[str, str], Cost], Cost], kind: str = "latency") -> Choice:
        """The choice of least summed cost that keeps a candidate with parameters to train: what a latency budget
        below it by the costs is measured against (candidates timed alone need not add up: `choose_measured`)."""
        return self._table(costs).cheapest(kind)

    def choose_measured(
        self,
        scores: Mapping[tuple[str, str], float],
        costs: tuple[Mapping[tuple[str, str], Cost], Cost],
        budget: float,
        measure: Callable[[dict[str, str]], float],
        kind: str = "latency",
        *,
        rounds: int = 6,
        tolerance: float = 0.01,
        also: Sequence[Mapping[str, str]] = (),
        assess: Callable[[dict[str, str]], float] | None = None,
    ) -> tuple[Choice, list[dict[str, Any]]]:
        """`choose`, corrected by measurement. Candidates timed alone need not add up to the assembled model's time
        (a small layer's fixed overhead, work that overlaps), so each choice is assembled and measured
        (``measure(chosen)``: the whole model's cost as a fraction of the predecessor's; ``inf`` for one that does
        not assemble), and the budget given to the solver is searched for the largest whose choice measures within
        ``budget``: from ``budget`` (from the cheapest choice with a parameter to train, `cheapest`, when ``budget``
        is below what it is predicted to cost: assembled, it may measure less), corrected by the last choice's
        predicted over measured ratio while every choice so far measured on one side of the budget (never below
        what the cheapest choice is predicted to cost), then halving the interval between the largest given budget
        that measured within and the smallest that measured over, until it is narrower than ``tolerance``, the
        measurement leaves no more room, the cheapest choice measured over, or ``rounds`` solver calls are made. A
        choice met again is not measured again. ``also``: choices to measure beside the solver's (e.g.
        `uniform_choices`); one without a parameter to train (every group skipped) is left out, as `choose` leaves
        it out.

        Scores taken one group at a time need not add up either (a GCN whose every layer stops propagating loses
        its receptive field, which no single group shows): with ``assess`` (e.g. `assembled_score` on held-out
        batches), the choices measured within ``budget`` are compared by ``assess(chosen)`` of the whole, not by
        their summed score.

        Returns the best choice measured within ``budget`` (none within: the one measured cheapest; its
        `Choice.predicted_ratio` may then exceed ``budget``, and the trail says so), and the trail (one entry per
        solver call, then per alternative: the budget given, the choice, its predicted and measured ratios, its
        summed score and, assessed, its ``assessed`` score; `theseus_core.budget.measured_choice`). Refuses before
        measuring anything what it cannot search: under ``kind="params"`` what `choose` refuses (parameters add
        up); under ``"latency"`` a budget outside (0, 1). An exact prediction measures one choice.

        Raises:
            ValueError: A budget outside (0, 1), a params budget below the cheapest candidates, or an ``also`` choice
                that does not name a candidate of this library for every group (before any measurement); or no
                choice assembled (every measurement ``inf``).
        """
        if kind == "latency":  # below the cheapest choice by the costs, that choice may still measure within
            _check_range(budget, kind)
        else:
            self.check_budget(costs, budget, kind)
        self._check_entries("scores", scores)
        return self._table(costs).choose_measured(
            scores, budget, measure, kind, rounds=rounds, tolerance=tolerance, also=also, assess=assess
        )

    def priced(
        self,
        chosen: Mapping[str, str],
        scores: Mapping[tuple[str, str], float],
        costs: tuple[Mapping[tuple[str, str], Cost], Cost],
        kind: str = "latency",
    ) -> Choice:
        """``chosen`` (a candidate name per group) as a `Choice`: its summed score and predicted cost ratio, its own
        summed cost as ``limit``, no budget. Raises `ValueError` for a choice that does not name a candidate of this
        library for every group."""
        self.check_choice(chosen)
        return self._table(costs).priced(chosen, scores, kind)

    def uniform_choices(self) -> list[dict[str, str]]:
        """One kind of candidate for every group, for each name every group has but ``keep`` (the alternatives a
        search should at least match: the uniform successors of a run without a budget)."""
        shared = [name for name in self.names(self.paths[0]) if all((p, name) in self.successors for p in self.paths)]
        return [dict.fromkeys(self.paths, name) for name in shared if name != KEEP]

    def _check_entries(self, what: str, given: Any) -> None:
        """``given`` (`scores`' or `costs`' per-candidate mapping) has an entry for every candidate of the library."""
        how = {"scores": "library.scores(batches, forward)", "costs": "the pair library.costs(batch, forward) returns"}
        if not isinstance(given, Mapping):
            raise ValueError(f"{what}: pass {how[what]}, got {type(given).__name__}")
        missing = [key for key in self.successors if key not in given]
        if missing:
            path, name = missing[0]
            raise ValueError(
                f"{what} has no entry for candidate {name!r} of the group at {path} ({len(missing)} missing): pass "
                f"{how[what]} of this library"
            )

    def check_choice(self, chosen: Mapping[str, str]) -> None:
        """Raises `ValueError` in one line unless ``chosen`` names a candidate of this library for every group."""
        _check_choice(chosen, {path: self.names(path) for path in self.paths})

    def plan(self, choice: Choice | Mapping[str, str]) -> Plan:
        """The chosen candidates as a `Plan` for `replace_`: each successor (and its projections) a copy of the
        candidate as distilled when `replace_` runs (a plan may serve several replacements, each its own copies),
        the library's ``on_finalize`` and ``more_examples`` kept."""
        chosen = choice.chosen if isinstance(choice, Choice) else dict(choice)
        self.check_choice(chosen)
        specs = []
        for path in self.paths:
            successor = self.successors[(path, chosen[path])]
            specs.append(
                ModuleSpec(
                    path,
                    successor=lambda group, inner=successor.inner: copy.deepcopy(inner),
                    in_proj=successor.in_proj,  # `replace_` copies a projection module, as the successor, each time
                    out_proj=successor.out_proj,
                )
            )
        return Plan(specs, on_finalize=self.on_finalize, more_examples=self.more_examples)
