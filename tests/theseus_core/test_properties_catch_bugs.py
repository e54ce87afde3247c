"""Each property test must fail when the property it states is broken.

Every case plants one bug in the engine with monkeypatch and runs the property
test that guards against it; the property test has to fail. A property test
that passed here would be one that cannot fail.
"""

import pytest
import torch
from hypothesis import Phase, settings

import theseus_core.engine as engine
import theseus_core.prepare as prepare
import theseus_core.schedule as schedule
from theseus_core.site import Router

from . import test_engine, test_schedule

PLANTED_BUG_SETTINGS = settings(
    parent=settings.get_profile("default"),
    max_examples=60,
    phases=[Phase.generate],  # no shrinking: only whether it fails matters
    database=None,
    derandomize=True,  # the same examples every run
)


def with_planted_bug_settings(test, monkeypatch):
    """@given binds its settings when the test is decorated, so a profile loaded now would not
    reach it; swap the bound settings for the duration of this test instead."""
    assert hasattr(test, "_hypothesis_internal_use_settings"), "hypothesis changed where @given keeps its settings"
    monkeypatch.setattr(test, "_hypothesis_internal_use_settings", PLANTED_BUG_SETTINGS)
    return test


def draw_from_global_rng(self, site_index, training):
    if not training and self.eval_route != "hybrid":
        return self.eval_route == "successor"
    self.last_routes[site_index] = torch.rand(()).item() < self.rate
    return self.last_routes[site_index]


def predecessor_in_eval(self, site_index, training):
    return original_choose(self, site_index, training) if training else False


def biased_draws(self, site_index, training):
    use = torch.rand((), generator=self.generator).item() < 0.8 * self.rate
    self.calls[site_index] += 1
    self.successor_calls[site_index] += use
    self.last_routes[site_index] = use
    return use


def unseeded_router(self, seed, num_sites):
    original_init(self, seed, num_sites)
    self.generator.seed()


def forget_generator_state(self, state):
    original_load(self, state)
    self._router.generator.manual_seed(self._router.seed)


def mutate_then_validate(model, spec, group, registry):
    for param in model.parameters():
        param.requires_grad_(False)
    return original_build(model, spec, group, registry)


original_choose = Router.choose
original_init = Router.__init__
original_load = engine.Theseus.load_state_dict
original_build = prepare._build_successor

BUGS = {
    "routes drawn from the global RNG": (
        (Router, "choose", draw_from_global_rng),
        [
            test_engine.test_rate_zero_reproduces_the_original_in_training_mode,
            test_engine.test_assert_replacement_equivalence_accepts_every_random_case,
        ],
    ),
    "eval runs the predecessor": (
        (Router, "choose", predecessor_in_eval),
        [
            test_engine.test_rate_one_and_eval_equal_the_finalized_model,
            test_engine.test_assert_replacement_equivalence_accepts_every_random_case,
        ],
    ),
    "predecessors left trainable": (
        (engine, "_freeze", lambda model, predecessors, train_others: None),
        [
            test_engine.test_only_successor_parameters_get_gradients,
            test_engine.test_optimizer_steps_leave_predecessors_unchanged,
        ],
    ),
    "finalize keeps the predecessors": (
        (engine.Theseus, "finalize", lambda self: self._model),
        [test_engine.test_finalize_leaves_no_predecessor_parameter],
    ),
    "restore forgets requires_grad": (
        (engine.Theseus, "_restore_requires_grad", lambda self: None),
        [test_engine.test_restore_round_trips_the_state_dict_and_the_modules],
    ),
    "the seed is ignored": (
        (Router, "__init__", unseeded_router),
        [test_engine.test_same_seed_takes_the_same_routes],
    ),
    "the generator state is not restored": (
        (engine.Theseus, "load_state_dict", forget_generator_state),
        [test_engine.test_resuming_from_the_state_dict_takes_the_same_routes],
    ),
    "the curriculum overshoots 1": (
        (schedule.LinearSchedule, "_curriculum", lambda self, step: self.k * step + self.base),
        [test_schedule.test_every_schedule_stays_in_the_unit_interval],
    ),
    "mutation before validation": (
        (prepare, "_build_successor", mutate_then_validate),
        [test_engine.test_random_invalid_specs_raise_before_any_mutation],
    ),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_the_property_fails_when_broken(bug, monkeypatch):
    (owner, name, replacement), tests = BUGS[bug]
    monkeypatch.setattr(owner, name, replacement)
    for test in tests:
        with pytest.raises(AssertionError):
            with_planted_bug_settings(test, monkeypatch)()


def test_the_frequency_check_catches_biased_draws(monkeypatch):
    monkeypatch.setattr(Router, "choose", biased_draws)
    with pytest.raises(AssertionError):
        test_engine.test_replacement_frequency_matches_the_rate(0.5)
