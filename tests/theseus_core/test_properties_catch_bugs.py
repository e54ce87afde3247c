"""Each property test must fail when the property it states is broken.

Every case plants one bug in the engine with monkeypatch and runs the property
test that guards against it; the property test has to fail. A property test
that passed here would be one that cannot fail.
"""

import pytest
import torch
from hypothesis import Phase, settings

import theseus_core.engine as engine
import theseus_core.schedule as schedule
from theseus_core.site import Router

from . import test_engine, test_schedule

settings.register_profile(
    "planted-bugs",
    parent=settings.get_profile("default"),
    max_examples=60,
    phases=[Phase.generate],  # no shrinking: only whether it fails matters
    database=None,
    derandomize=True,  # the same examples every run
)


@pytest.fixture
def planted_bug_profile():
    previous = settings.get_current_profile_name()
    settings.load_profile("planted-bugs")
    yield
    settings.load_profile(previous)


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
original_build = engine._build_successor

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
        (engine, "_build_successor", mutate_then_validate),
        [test_engine.test_random_invalid_specs_raise_before_any_mutation],
    ),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_the_property_fails_when_broken(bug, monkeypatch, planted_bug_profile):
    (owner, name, replacement), tests = BUGS[bug]
    monkeypatch.setattr(owner, name, replacement)
    for test in tests:
        with pytest.raises(AssertionError):
            test()


def test_the_frequency_check_catches_biased_draws(monkeypatch):
    monkeypatch.setattr(Router, "choose", biased_draws)
    with pytest.raises(AssertionError):
        test_engine.test_replacement_frequency_matches_the_rate(0.5)
