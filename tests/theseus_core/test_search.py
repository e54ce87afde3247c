"""theseus_core.search: candidates per group, blockwise distillation, scores, measured costs, an exact solver."""

import copy
import math
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import theseus_core as th
from tests.hypothesis_profiles import examples
from theseus_core import budget as core_budget
from theseus_core.candidates import keep_specs, skip_specs
from theseus_core.search import KEEP, CandidateLibrary
from theseus_core.testing import ToyStack
from theseus_core.testing.toys import ToyBlock

pytest.importorskip("scipy")

GROUPS = ["blocks[0:2]", "blocks[2:4]", "blocks[4:6]"]


def forward(model, batch):
    return model(batch)


def narrow(group):
    return ToyBlock(8, hidden=8, dropout=0.0)


def toy_library():
    """A ToyStack of 6 blocks in 3 groups, its candidates (keep, skip, one, narrow) and 3 batches."""
    torch.manual_seed(0)
    model = ToyStack(in_features=8, width=16, num_blocks=6, num_classes=3, dropout=0.0).eval()
    plan = [th.ModuleSpec(path) for path in GROUPS]
    candidates = {
        KEEP: keep_specs(plan),
        "skip": skip_specs(plan),
        "one": [th.ModuleSpec(path, successor=th.copy_module(0)) for path in GROUPS],
        "narrow": [th.ModuleSpec(path, successor=narrow, in_proj="linear", out_proj="linear") for path in GROUPS],
    }
    batches = [torch.randn(32, 8, generator=torch.Generator().manual_seed(seed)) for seed in range(3)]
    library = CandidateLibrary(model, candidates, example_inputs=[(batches[0],)])
    return model, library, batches


@pytest.fixture
def setup():
    return toy_library()


def test_distillation_moves_only_candidate_parameters_and_lowers_their_error(setup):
    model, library, batches = setup
    before = copy.deepcopy(model.state_dict())
    reference = copy.deepcopy(library.reference.state_dict())
    keep = {
        key: [p.detach().clone() for p in m.parameters()] for key, m in library.successors.items() if key[1] == KEEP
    }
    candidates = {id(p) for p in library.trainable()}
    snapshot = {id(p): p.detach().clone() for p in library.trainable()}
    losses = library.distill_(batches, forward, steps=30, lr=3e-3)
    assert losses[-1] < losses[0]
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())  # the user's model is only read
    assert all(torch.equal(library.reference.state_dict()[k], v) for k, v in reference.items())
    for key, params in keep.items():
        assert all(torch.equal(p, q) for p, q in zip(library.successors[key].parameters(), params, strict=True))
    moved = {id(p) for p in library.trainable() if not torch.equal(p, snapshot[id(p)])}
    assert moved and moved <= candidates


def hooked_calls(library):
    """What runs, in order, from now on: ``("original", path)`` for a group's own layers in the reference, ``(path,
    name)`` for a candidate."""
    calls = []
    for path in GROUPS:
        site = library._reference.sites[library._site_of[path]]
        site.predecessor.register_forward_hook(lambda *args, path=path: calls.append(("original", path)))
    for key, successor in library.successors.items():
        if key[1] != KEEP:
            successor.register_forward_hook(lambda *args, key=key: calls.append(key))
    return calls


def test_each_score_runs_its_candidate_with_every_other_group_original(setup):
    _, library, batches = setup
    calls = hooked_calls(library)
    library.scores(batches[:1], forward)
    references = len(GROUPS)  # the reference pass: every group original
    runs = [calls[i : i + len(GROUPS)] for i in range(references, len(calls), len(GROUPS))]
    assert calls[:references] == [("original", path) for path in GROUPS]
    assert len(runs) == len([key for key in library.successors if key[1] != KEEP])
    for run in runs:
        (candidate,) = [path for path, name in run if path != "original"]
        assert sorted(path for kind, path in run if kind == "original") == sorted(set(GROUPS) - {candidate})


def test_keep_scores_zero_and_a_candidate_that_equals_its_group_too(setup):
    _, library, batches = setup
    scores = library.scores(batches, forward)
    assert all(scores[(path, KEEP)] == 0.0 for path in GROUPS)
    assert all(value <= 1e-9 for value in scores.values())
    assert scores[(GROUPS[0], "skip")] < 0  # a group that does something is missed


def test_an_assembled_score_runs_every_chosen_candidate_at_once_and_one_group_scores_as_alone(setup):
    _, library, batches = setup
    chosen = {GROUPS[0]: "one", GROUPS[1]: KEEP, GROUPS[2]: "narrow"}
    calls = hooked_calls(library)
    whole = library.assembled_score(chosen, batches[:1], forward)
    references = [("original", path) for path in GROUPS]
    assert calls == [*references, (GROUPS[0], "one"), ("original", GROUPS[1]), (GROUPS[2], "narrow")]
    scores = library.scores(batches, forward)
    alone = {GROUPS[0]: "one", GROUPS[1]: KEEP, GROUPS[2]: KEEP}
    assert library.assembled_score(alone, batches, forward) == pytest.approx(scores[(GROUPS[0], "one")], abs=1e-9)
    assert library.assembled_score(dict.fromkeys(GROUPS, KEEP), batches, forward) == pytest.approx(0.0, abs=1e-9)
    assert whole < 0
    assert library.scores(batches, forward) == scores  # every site was put back
    with pytest.raises(ValueError, match="one candidate for each group"):
        library.assembled_score({GROUPS[0]: "one"}, batches, forward)


def test_uniform_choices_are_the_names_every_group_has_but_keep():
    model, library, batches = toy_library()
    assert library.uniform_choices() == [dict.fromkeys(GROUPS, name) for name in ("skip", "one", "narrow")]
    plan = [th.ModuleSpec(path) for path in GROUPS]
    only_first = {"skip": skip_specs(plan), "one": [th.ModuleSpec(GROUPS[0], successor=th.copy_module(0))]}
    partial = CandidateLibrary(model, only_first, example_inputs=[(batches[0],)])
    assert partial.uniform_choices() == [dict.fromkeys(GROUPS, "skip")]


def test_measured_alternatives_and_an_assessment_reach_the_choice(setup_once):
    """choose_measured hands the uniform choices and the assembled score on: an alternative the summed scores
    never pick is measured, and wins when it fits and assesses best; a malformed alternative is refused first."""
    library, scores, costs = setup_once
    measured = []

    def measure(chosen):
        measured.append(chosen)
        return 0.3

    uniform = dict.fromkeys(GROUPS, "one")
    choice, trail = library.choose_measured(
        scores, costs, 0.6, measure, "params", also=[uniform], assess=lambda chosen: float(chosen == uniform)
    )
    assert choice.chosen == uniform and choice.assessed == 1.0 and choice.budget == 0.6
    assert trail[-1]["budget_given"] is None and trail[-1]["chosen"] == uniform
    assert choice.predicted_ratio == library.priced(uniform, scores, costs, "params").predicted_ratio
    skipped = dict.fromkeys(GROUPS, "skip")  # nothing to train: never measured, never the fallback
    measured.clear()
    over = lambda chosen: measured.append(chosen) or 9.0  # noqa: E731 - none fits: the cheapest measured is taken
    fallback, trail = library.choose_measured(scores, costs, 0.6, over, "params", also=[skipped, uniform])
    assert skipped not in measured and skipped not in [entry["chosen"] for entry in trail] and uniform in measured
    assert fallback.chosen != skipped
    measured.clear()
    with pytest.raises(ValueError, match="has no candidate 'wide'"):
        library.choose_measured(scores, costs, 0.6, measure, "params", also=[dict.fromkeys(GROUPS, "wide")])
    assert measured == []


def test_the_choice_respects_the_budget_and_assembles_a_plan_replace_verifies(setup):
    model, library, batches = setup
    library.distill_(batches, forward, steps=20, lr=3e-3)
    scores = library.scores(batches, forward)
    costs = library.costs(batches[0], forward, rounds=3)
    per_key, rest = costs
    choice = library.choose(scores, costs, budget=0.7, kind="params")
    total = rest.params + sum(per_key[(path, KEEP)].params for path in GROUPS)
    used = rest.params + sum(per_key[(path, name)].params for path, name in choice.chosen.items())
    assert used <= 0.7 * total and choice.predicted_ratio == pytest.approx(used / total)
    assert set(choice.chosen) == set(GROUPS) and choice.predicted_ratio <= 0.7
    compressed = copy.deepcopy(model)
    theseus = th.replace_(compressed, library.plan(choice), example_inputs=[(batches[0],)])  # verified at rate 0
    theseus.eval_route = "successor"
    with torch.no_grad():
        assembled = compressed.eval()(batches[0])
    # the assembled model at rate 1 runs the distilled candidates as the library scored them, all together
    for path, name in choice.chosen.items():
        site = theseus.sites[GROUPS.index(path)]
        distilled = library.successors[(path, name)]
        assert all(torch.equal(p, q) for p, q in zip(site.successor.parameters(), distilled.parameters(), strict=True))
    assert torch.isfinite(assembled).all()


def test_a_budget_out_of_range_or_below_the_cheapest_choice_is_refused_in_one_line(setup):
    _, library, batches = setup
    scores, costs = library.scores(batches[:1], forward), library.costs(batches[0], forward, rounds=1)
    for bad in (0, 1, 1.5, -0.2, "half"):
        with pytest.raises(ValueError, match=r"in \(0, 1\)"):
            library.choose(scores, costs, budget=bad)
    with pytest.raises(ValueError, match="below what the cheapest candidates reach") as refused:
        library.choose(scores, costs, budget=0.01, kind="params")
    assert "\n" not in str(refused.value)


def test_scores_or_costs_of_another_library_or_shape_are_refused_in_one_line(setup):
    _, library, batches = setup
    scores, costs = library.scores(batches[:1], forward), library.costs(batches[0], forward, rounds=1)
    partial = {key: value for key, value in scores.items() if key[1] != "narrow"}
    with pytest.raises(ValueError, match="scores has no entry for candidate 'narrow' of the group at blocks"):
        library.choose(partial, costs, budget=0.5)
    with pytest.raises(ValueError, match=r"costs: pass the pair library\.costs"):
        library.choose(scores, costs[0], budget=0.5)  # the per-candidate half alone
    with pytest.raises(ValueError, match=r"scores: pass library\.scores"):
        library.choose_measured(list(scores.values()), costs, 0.5, lambda chosen: 0.1)


def test_check_budget_refuses_what_choose_refuses_and_solves_nothing(setup, monkeypatch):
    _, library, batches = setup
    costs = library.costs(batches[0], forward, rounds=1)
    scores = {key: 0.0 for key in library.successors}
    per_key, rest = costs
    total = rest.params + sum(per_key[(path, KEEP)].params for path in GROUPS)
    cheapest = rest.params + sum(min(per_key[(path, name)].params for name in library.names(path)) for path in GROUPS)
    for budget in (0, 1.5, "half", cheapest / total * 0.99, cheapest / total * 1.01, 0.5, 0.99):
        with monkeypatch.context() as patched:
            patched.setattr(core_budget, "solve", lambda *args: pytest.fail("check_budget solved"))
            try:
                library.check_budget(costs, budget, "params")
            except ValueError as refused:
                with pytest.raises(ValueError) as also:
                    library.choose(scores, costs, budget, "params")
                assert str(also.value) == str(refused) and "\n" not in str(refused)
                continue
        assert library.choose(scores, costs, budget, "params").predicted_ratio <= budget
    with pytest.raises(ValueError, match="below what the cheapest"):
        library.check_budget(costs, cheapest / total * 0.99, "params")


def test_a_candidate_replace_refuses_is_left_out_of_its_group_and_said_so():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.Linear(8, 2)).eval()
    groups = ["[0:2]", "[2:3]"]
    library = CandidateLibrary(
        model, {"skip": skip_specs([th.ModuleSpec(path) for path in groups])}, example_inputs=[(torch.randn(3, 4),)]
    )
    assert library.names("[2:3]") == [KEEP, "skip"]  # 8 -> 8: the identity fits
    assert library.names("[0:2]") == [KEEP] and ("[0:2]", "skip") in library.refused  # 4 -> 8: it does not


def test_batches_may_be_any_iterable_read_once(setup):
    _, library, batches = setup
    from_list = library.scores(batches, forward)
    assert library.scores(iter(batches), forward) == from_list  # a loader's one epoch: both passes see the same
    chosen = dict.fromkeys(GROUPS, "narrow")
    assert library.assembled_score(chosen, iter(batches), forward) == library.assembled_score(chosen, batches, forward)
    assert len(library.distill_(iter(batches), forward, steps=2)) == 2


def _linear_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.Linear(8, 2)).eval()


def test_keep_is_the_librarys_own_and_a_bad_candidate_list_is_refused_before_the_model_is_touched():
    model = _linear_model()
    before = copy.deepcopy(model.state_dict())
    plan = [th.ModuleSpec("[2:3]")]
    examples = {"example_inputs": [(torch.randn(3, 4),)]}
    for candidates, message in [
        ({KEEP: [th.ModuleSpec("[2:3]", successor=th.copy_module(0))], "skip": skip_specs(plan)}, "library's own"),
        ({"skip": skip_specs(plan) * 2}, "more than one spec for the group at \\[2:3\\]"),
        ({"skip": []}, "a non-empty list of ModuleSpec"),
        ([skip_specs(plan)], "a mapping of candidate name"),
        ({KEEP: keep_specs(plan)}, "a candidate besides 'keep'"),
    ]:
        with pytest.raises(ValueError, match=message):
            CandidateLibrary(model, candidates, **examples)
        assert all(torch.equal(before[key], value) for key, value in model.state_dict().items())
        assert [type(module) for module in model] == [nn.Linear, nn.ReLU, nn.Linear, nn.Linear]
    library = CandidateLibrary(model, {KEEP: keep_specs(plan), "skip": skip_specs(plan)}, **examples)  # as families do
    assert library.names("[2:3]") == [KEEP, "skip"]


def test_a_library_whose_every_candidate_is_refused_says_why_and_a_factorys_own_error_names_it():
    model = _linear_model()
    examples = {"example_inputs": [(torch.randn(3, 4),)]}
    with pytest.raises(ValueError, match="every candidate but 'keep' was refused \\(candidate 'skip' for the group at"):
        CandidateLibrary(model, {"skip": skip_specs([th.ModuleSpec("[0:2]")])}, **examples)  # 4 -> 8: no identity

    def broken(group):
        return group[0].no_such_attribute

    with pytest.raises(AttributeError) as caught:
        CandidateLibrary(model, {"broken": [th.ModuleSpec("[2:3]", successor=broken)]}, **examples)
    assert any("candidate 'broken'" in note for note in caught.value.__notes__)


def test_a_named_successor_is_found_in_the_registry_given():
    registry = th.SuccessorRegistry()

    @registry.register(nn.Linear, "thin")
    def thin(group):
        return nn.Linear(group[0].in_features, group[-1].out_features)

    model = _linear_model()
    specs = [th.ModuleSpec("[2:3]", successor="thin")]
    with pytest.raises(LookupError, match=r"no successor 'thin' registered for torch\.nn\.modules\.linear\.Linear"):
        CandidateLibrary(model, {"thin": specs}, example_inputs=[(torch.randn(3, 4),)])  # not in the global one
    library = CandidateLibrary(model, {"thin": specs}, example_inputs=[(torch.randn(3, 4),)], registry=registry)
    assert library.names("[2:3]") == [KEEP, "thin"]


def one_candidate_library(name, build, training=False):
    """A library of one candidate, ``build()``, for the two blocks of a ToyStack (with dropout when ``training``, the
    mode the model is in)."""
    torch.manual_seed(0)
    model = ToyStack(in_features=8, width=16, num_blocks=2, num_classes=3, dropout=0.1 if training else 0.0)
    return CandidateLibrary(
        model.train(training),
        {name: [th.ModuleSpec("blocks[0:2]", successor=lambda group: build())]},
        example_inputs=[(torch.randn(4, 8),)],
    )


def test_costs_leave_out_what_a_candidate_waits(threads):
    """A candidate that sleeps costs what it computes: the measured latency is the process's work on one thread."""

    class Sleepy(nn.Module):
        def forward(self, x):
            time.sleep(0.02)
            return x

    threads(1)
    library = one_candidate_library("sleepy", Sleepy)
    costs, _ = library.costs(torch.randn(4, 8), forward, rounds=3)
    assert costs[("blocks[0:2]", "sleepy")].latency < 0.01


def test_candidates_are_measured_in_eval_mode_whatever_mode_the_model_was_in():
    """Costs are eval-mode costs (dropout off, batch norm statistics untouched), for a library built from a model
    in training mode too; each candidate's mode is put back after."""

    class Modes(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.BatchNorm1d(16)
            self.seen: set[bool] = set()

        def forward(self, x):
            self.seen.add(self.training)
            return self.norm(x)

    library = one_candidate_library("modes", Modes, training=True)
    candidate = library.successors[("blocks[0:2]", "modes")]
    candidate.inner.seen.clear()
    statistics = candidate.inner.norm.running_mean.clone()
    library.costs(torch.randn(4, 8), forward, rounds=2)
    assert candidate.inner.seen == {False}
    assert torch.equal(candidate.inner.norm.running_mean, statistics)
    candidate.train()
    library.costs(torch.randn(4, 8), forward, rounds=1)
    assert candidate.inner.seen == {False} and all(module.training for module in candidate.modules())


def test_adding_a_candidate_changes_neither_the_start_nor_the_distillation_of_the_others():
    """Each column builds, and each candidate distils (its dropout), from a stream of its own: a library with one
    more candidate, put first, gives the others the same weights before and after `distill_`."""

    def noisy(group):  # fresh weights and dropout: both draw from the random stream
        return ToyBlock(16, hidden=8, dropout=0.3)

    columns = {
        "one": [th.ModuleSpec(path, successor=th.copy_module(0)) for path in GROUPS],
        "noisy": [th.ModuleSpec(path, successor=noisy) for path in GROUPS],
    }
    batches = [torch.randn(32, 8, generator=torch.Generator().manual_seed(seed)) for seed in range(3)]

    def weights(extra):
        torch.manual_seed(0)
        model = ToyStack(in_features=8, width=16, num_blocks=6, num_classes=3, dropout=0.1).eval()
        torch.manual_seed(1)
        library = CandidateLibrary(model, {**extra, **columns}, example_inputs=[(batches[0],)])
        start = {key: copy.deepcopy(library.successors[key].state_dict()) for key in library.successors}
        library.distill_(batches, forward, steps=4)
        return library, start, {key: library.successors[key].state_dict() for key in library.successors}

    _, start, after = weights({})
    library, start_more, after_more = weights({"first": [th.ModuleSpec(path, successor=noisy) for path in GROUPS]})
    assert set(library.names(GROUPS[0])) == {KEEP, "first", "one", "noisy"}
    for key in start:
        for name, tensor in start[key].items():
            assert torch.equal(tensor, start_more[key][name]), (key, name)
            assert torch.equal(after[key][name], after_more[key][name]), (key, name)
    # and the streams are the candidates' own: two columns of the same factory start differently
    assert not torch.equal(
        start_more[(GROUPS[0], "first")]["inner.fc1.weight"], start_more[(GROUPS[0], "noisy")]["inner.fc1.weight"]
    )


@pytest.fixture(scope="module")
def setup_once():
    """The toy library, synthetic scores and the costs, built once for a property test."""
    _, library, batches = toy_library()
    generator = torch.Generator().manual_seed(1)
    scores = {key: 0.0 if key[1] == KEEP else -float(torch.rand(1, generator=generator)) for key in library.successors}
    return library, scores, library.costs(batches[0], forward, rounds=1)


def measured_choices(setup, factor, budget=0.6):
    """choose_measured on the toy library with synthetic scores and a measurement that is the predicted parameters
    ratio times ``factor`` (a cost model off by that much)."""
    library, scores, costs = setup
    per_key, rest = costs
    total = rest.params + sum(per_key[(path, KEEP)].params for path in GROUPS)
    calls = []

    def measure(chosen):
        calls.append(chosen)
        return factor * (rest.params + sum(per_key[(path, name)].params for path, name in chosen.items())) / total

    choice, trail = library.choose_measured(scores, costs, budget, measure, kind="params")
    return library.choose(scores, costs, budget, "params"), choice, trail, calls, measure


@pytest.mark.parametrize("factor", [0.5, 0.8, 1.0, 1.25, 1.6])
def test_a_measured_choice_fits_the_budget_by_measurement_and_scores_at_least_the_predicted_one(setup_once, factor):
    plain, choice, trail, calls, measure = measured_choices(setup_once, factor)
    assert trail[0]["chosen"] == plain.chosen and len(trail) <= 6  # one entry per solver call
    distinct = {tuple(sorted(entry["chosen"].items())) for entry in trail}
    assert len(calls) == len(distinct)  # a choice met again is not measured again
    assert choice.chosen in [entry["chosen"] for entry in trail]
    if any(entry["measured_ratio"] <= 0.6 for entry in trail):
        assert measure(choice.chosen) <= 0.6
        if measure(plain.chosen) <= 0.6:  # the solver's own choice fitted: correction only ever adds score
            assert choice.score >= plain.score
    if factor == 1.0:  # an exact prediction: the first choice stands, measured once
        assert len(trail) == 1 and choice.chosen == plain.chosen
    if factor < 1:  # measurements under the predictions: the correction gives the solver more room
        assert len(trail) > 1 and trail[1]["budget_given"] > 0.6
    if factor > 1 and trail[0]["measured_ratio"] > 0.6:  # over: the solver is given less
        assert len(trail) > 1 and trail[1]["budget_given"] < 0.6


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(st.floats(0.3, 3.0), min_size=1, max_size=12), st.floats(0.2, 0.9))
def test_a_measured_choice_is_the_best_scoring_one_it_measured_within_the_budget(setup_once, factors, budget):
    """Whatever the measurements (a factor per choice, in the order met), the choice is the best-scoring one of
    those measured within the budget, or the one measured cheapest when none was; every choice measured once."""
    library, scores, costs = setup_once
    per_key, rest = costs
    total = rest.params + sum(per_key[(path, KEEP)].params for path in GROUPS)
    cheapest = rest.params + sum(min(per_key[(path, name)].params for name in library.names(path)) for path in GROUPS)
    if cheapest / total > budget:
        return
    met = {}

    def measure(chosen):
        key = tuple(sorted(chosen.items()))
        assert key not in met  # measured once
        met[key] = (
            factors[len(met) % len(factors)]
            * (rest.params + sum(per_key[(path, name)].params for path, name in chosen.items()))
            / total
        )
        return met[key]

    choice, trail = library.choose_measured(scores, costs, budget, measure, kind="params")
    assert all(entry["measured_ratio"] == met[tuple(sorted(entry["chosen"].items()))] for entry in trail)
    fits = budget * (1 + core_budget.RATIO_TOLERANCE)  # within, up to the last bits of a sum
    within = [entry for entry in trail if entry["measured_ratio"] <= fits]
    if within:
        assert (
            choice.score == max(entry["score"] for entry in within)
            and met[tuple(sorted(choice.chosen.items()))] <= fits
        )
    else:
        assert met[tuple(sorted(choice.chosen.items()))] == min(met.values())


def test_when_no_choice_measures_within_the_budget_the_cheapest_measured_is_taken(setup_once):
    _, choice, trail, _, measure = measured_choices(setup_once, 100.0, budget=0.9)
    assert all(entry["measured_ratio"] > 0.9 for entry in trail)
    assert measure(choice.chosen) == min(entry["measured_ratio"] for entry in trail)


@pytest.mark.parametrize("first", [60.0, float("inf")])
def test_a_first_choice_far_over_or_not_assembling_sends_the_solver_down_to_the_cheapest_not_out(setup_once, first):
    """The correction of a choice measured far over the budget (or one that does not assemble: inf) would give the
    solver less than the cheapest candidates cost: it is given the cheapest instead, which fits here."""
    library, scores, costs = setup_once
    per_key, rest = costs
    total = rest.params + sum(per_key[(path, KEEP)].params for path in GROUPS)
    plain = library.choose(scores, costs, 0.6, "params")

    def measure(chosen):
        exact = (rest.params + sum(per_key[(path, name)].params for path, name in chosen.items())) / total
        return first if chosen == plain.chosen else exact

    choice, trail = library.choose_measured(scores, costs, 0.6, measure, kind="params")
    assert trail[0]["chosen"] == plain.chosen and len(trail) > 1
    assert choice.chosen != plain.chosen and measure(choice.chosen) <= 0.6


def test_when_no_choice_assembles_the_measured_choice_is_refused(setup_once):
    library, scores, costs = setup_once
    with pytest.raises(ValueError, match="assembled"):
        library.choose_measured(scores, costs, 0.6, lambda chosen: float("inf"), kind="params")


def test_a_budget_only_parameter_free_choices_fit_is_refused_and_none_is_ever_chosen(setup_once):
    """Every group skipped leaves the successors nothing to learn: a budget that only such choices fit is refused
    in one line, and under any other the solver keeps a candidate with parameters, even where skipping scores best."""
    library, _, costs = setup_once
    per_key, rest = costs
    total = rest.params + sum(per_key[(path, KEEP)].params for path in GROUPS)
    skipped = rest.params / total  # every group skipped: the embedding and the head alone
    with pytest.raises(ValueError, match="fits only choices without a parameter to train") as refused:
        library.check_budget(costs, skipped * 1.001, "params")
    assert "\n" not in str(refused.value)
    favours_skip = {key: 0.0 if key[1] == "skip" else -1.0 for key in library.successors}
    for budget in (0.5, 0.9):
        choice = library.choose(favours_skip, costs, budget, "params")
        assert any(per_key[(path, name)].params > 0 for path, name in choice.chosen.items())
        assert choice.predicted_ratio <= budget
        assert list(choice.chosen.values()).count("skip") == len(GROUPS) - 1  # the best such choice: one group kept


class _SmallBatchesOnly(nn.Linear):
    """A successor that runs on batches of up to 3 rows: right on the example batch, wrong on a longer one."""

    def forward(self, x):
        if x.shape[0] > 3:
            raise RuntimeError("this successor takes batches of up to 3 rows")
        return super().forward(x)


def test_more_examples_verify_the_library_and_the_model_its_plan_finalizes():
    model, examples, seen = _linear_model(), [(torch.randn(3, 4),)], []

    def longer(args, kwargs):  # the first example batch's positional and keyword arguments
        seen.append(args[0].shape[0])
        return [((torch.randn(5, 4),), {})]

    small = [th.ModuleSpec("[2:3]", successor=lambda group: _SmallBatchesOnly(8, 8))]
    plain = CandidateLibrary(model, {"small": small}, example_inputs=examples)
    th.replace_(copy.deepcopy(model), plain.plan({"[2:3]": "small"}), example_inputs=examples).finalize()
    for option in ({"more_examples": longer}, {}):  # given to the library, or to a candidate given as a plan
        seen.clear()
        column = small if option else th.Plan(small, more_examples=longer)
        library = CandidateLibrary(model, {"small": column}, example_inputs=examples, **option)
        assert library.more_examples is longer and seen  # asked for by the library's replace_
        plan = library.plan({"[2:3]": "small"})
        assert plan.more_examples is longer
        handle = th.replace_(copy.deepcopy(model), plan, example_inputs=examples)
        with pytest.raises(RuntimeError, match="up to 3 rows"):
            handle.finalize()  # checked on the longer batch too, which this successor cannot run


def test_a_plan_serves_several_replacements_each_with_its_own_copies_of_the_candidates_as_distilled_then():
    model, x = _linear_model(), torch.randn(4, 4)
    narrow = [th.ModuleSpec("[2:3]", successor=lambda group: nn.Linear(3, 3), in_proj="linear", out_proj="linear")]
    library = CandidateLibrary(model, {"narrow": narrow}, example_inputs=[(x,)])
    plan = library.plan({"[2:3]": "narrow"})
    library.distill_([x], forward, steps=3, lr=0.1)  # after the plan was made: the plan still takes these weights
    first, second = (th.replace_(copy.deepcopy(model), plan, example_inputs=[(x,)]) for _ in range(2))
    distilled = library.successors[("[2:3]", "narrow")]
    for handle in (first, second):
        successor = handle.sites[0].successor
        for part in ("inner", "in_proj", "out_proj"):
            ours, theirs = getattr(successor, part), getattr(distilled, part)
            assert ours is not theirs
            assert all(torch.equal(p, q) for p, q in zip(ours.parameters(), theirs.parameters(), strict=True))
    ids = [{id(p) for p in handle.successor_parameters()} for handle in (first, second)]
    assert not ids[0] & ids[1]  # training one replacement leaves the other as it was


class _ScaledLoop(nn.Module):
    """A model whose loop reads an attribute of each layer, as transformers' loops read a layer's attention type."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))
        for index, layer in enumerate(self.layers):
            layer.scale = 1.0 + index / 4

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x)) * layer.scale
        return x


def test_scores_run_models_that_read_their_layers_attributes_through_the_site():
    torch.manual_seed(0)
    model, x = _ScaledLoop().eval(), torch.randn(5, 4)
    plan = [th.ModuleSpec(path) for path in ("layers[0:1]", "layers[2:3]")]
    one = [th.ModuleSpec(spec.path, successor=th.copy_module(0)) for spec in plan]
    library = CandidateLibrary(model, {"skip": skip_specs(plan), "one": one}, example_inputs=[(x,)])
    scores = library.scores([x], forward)
    assert scores[("layers[0:1]", KEEP)] == 0 and all(math.isfinite(score) for score in scores.values())
    assert math.isfinite(library.assembled_score({"layers[0:1]": "skip", "layers[2:3]": "one"}, [x], forward))


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_a_latency_budget_below_the_cheapest_prediction_is_measured_from_the_cheapest_choice(setup_once, factor):
    """Candidates timed alone may over-predict the assembled model: a latency budget below the cheapest choice's
    prediction is not refused; the cheapest choice is measured first, and what fits by measurement is taken (none
    fits: the cheapest measured, not within its budget)."""
    library, scores, costs = setup_once
    cheapest = library.cheapest(costs, "latency")
    assert any(costs[0][key].params > 0 for key in cheapest.chosen.items())
    budget = cheapest.predicted_ratio * 0.8
    with pytest.raises(ValueError, match=r"below what the cheapest|fits only choices"):
        library.choose(scores, costs, budget, "latency")  # by the costs alone: refused
    predicted = {}

    def measure(chosen):
        predicted[tuple(sorted(chosen.items()))] = ratio = library.priced(
            chosen, scores, costs, "latency"
        ).predicted_ratio
        return factor * ratio

    choice, trail = library.choose_measured(scores, costs, budget, measure, "latency")
    # the first choice measured is a cheapest one (candidates of equal measured cost may tie)
    assert trail[0]["predicted_ratio"] == pytest.approx(cheapest.predicted_ratio, rel=1e-6)
    assert choice.within_budget == (factor < 1)
    if factor < 1:
        assert choice.measured_ratio <= budget
    else:
        assert choice.predicted_ratio == pytest.approx(cheapest.predicted_ratio, rel=1e-6)
        assert choice.measured_ratio > budget


def test_multiply_adds_of_the_candidates_and_the_rest_add_up_to_the_model(setup):
    """Counted, not timed: the groups' own (``keep``) and the rest sum to the predecessor's multiply-adds, and a
    choice's predicted ratio is what its assembled model counts."""
    model, library, batches = setup
    costs = library.costs(batches[0], forward, rounds=1)
    per_key, rest = costs
    whole = th.multiply_adds(lambda: model(batches[0]))
    assert rest.macs + sum(per_key[(path, KEEP)].macs for path in GROUPS) == whole
    assert per_key[(GROUPS[0], "skip")].macs == 0 and per_key[(GROUPS[0], "one")].macs > 0
    choice = library.choose({key: 0.0 for key in library.successors}, costs, 0.7, "macs")
    compact = th.replace_(copy.deepcopy(model), library.plan(choice), example_inputs=[(batches[0],)]).finalize()
    assert th.multiply_adds(lambda: compact(batches[0])) / whole == pytest.approx(choice.predicted_ratio, rel=1e-9)
