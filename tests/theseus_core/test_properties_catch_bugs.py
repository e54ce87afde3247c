"""Each property test must fail when the property it states is broken.

Every case plants one bug in the engine with monkeypatch and runs the property
test that guards against it, with the hypothesis settings CI uses (the profile
tests/conftest.py loads); the property test has to fail. A property test that
passed here would be one that cannot fail.
"""

import pytest
import torch
from hypothesis import Phase, settings
from hypothesis.errors import FlakyFailure

import theseus_core as th
import theseus_core.engine as engine
import theseus_core.prepare as prepare
import theseus_core.schedule as schedule
import theseus_core.verify as verify_module
from theseus_core.site import Router
from theseus_core.testing import ToyConvNet, ToyStack, assert_replacement_equivalence

from . import test_engine, test_schedule, test_verify


def without_shrinking(test, monkeypatch):
    """The settings CI runs the test with (the loaded profile: as many examples, random ones), but no
    shrinking and no example database: only whether the planted bug is found matters, and a failure
    remembered from an earlier run must not find it for the test. @given binds its settings when the test
    is decorated, so swap the bound settings for the duration of this test."""
    if not hasattr(test, "hypothesis"):
        return test
    assert hasattr(test, "_hypothesis_internal_use_settings"), "hypothesis changed where @given keeps its settings"
    ci = settings.default
    monkeypatch.setattr(test, "_hypothesis_internal_use_settings", settings(ci, phases=[Phase.generate], database=None))
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


def mutate_first(model, specs, registry):
    for param in model.parameters():
        param.requires_grad_(False)
    return original_prepare(model, specs, registry)


def freeze_parameters_only(frozen):
    for module in frozen:
        for param in module.parameters(recurse=False):
            param.requires_grad_(False)
    return []


def no_freezing(frozen):
    return []


original_choose = Router.choose
original_init = Router.__init__
original_load = engine.Theseus.load_state_dict
original_build = prepare._build_successor
original_prepare = engine.prepare
original_verify = engine.verify
original_batches = engine.example_batches


def verify_training_mode_only(run, sites, groups, reference):
    training = verify_module.Reference([entry for entry in reference.runs if entry[1]])
    return original_verify(run, sites, groups, training)


def the_users_batches_only(example_inputs, example_kwargs, specs):
    return original_batches(example_inputs, example_kwargs, list(specs))  # a list has no more_examples


def assert_equivalence_on_toys():
    """The test kit on a stack with dropout and a conv net with batch norms."""
    torch.manual_seed(0)
    stack = ToyStack(num_blocks=4, container="list", dropout=0.2)
    assert_replacement_equivalence(
        stack, th.plan(stack, "blocks", num_groups=2, successor=th.copy_module(0)), stack.example_inputs()
    )
    convnet = ToyConvNet()
    assert_replacement_equivalence(convnet, [th.ModuleSpec("blocks[1:3]", th.copy_module(0))], convnet.example_inputs())


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
        (engine, "_freeze", no_freezing),
        [
            test_engine.test_only_successor_parameters_get_gradients,
            test_engine.test_optimizer_steps_leave_predecessors_unchanged,
            assert_equivalence_on_toys,
        ],
    ),
    "frozen batch norms keep writing their statistics": (
        (engine, "_freeze", freeze_parameters_only),
        [
            test_verify.test_frozen_batch_norms_compute_with_batch_statistics_but_never_write_them,
            assert_equivalence_on_toys,
        ],
    ),
    "finalize keeps the predecessors": (
        (engine.Theseus, "finalize", lambda self: self._model),
        [test_engine.test_finalize_leaves_no_predecessor_parameter],
    ),
    "restore forgets requires_grad": (
        (engine.Theseus, "_unfreeze", lambda self: None),
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
    "mutation while building successors": (
        (prepare, "_build_successor", mutate_then_validate),
        [test_engine.test_random_invalid_specs_raise_before_any_mutation],
    ),
    "mutation before validation": (
        (engine, "prepare", mutate_first),
        [test_engine.test_random_invalid_specs_raise_before_any_mutation],
    ),
    "replace_ accepts without verifying": (
        (engine, "verify", lambda *args: None),
        [test_verify.test_a_container_that_does_more_than_call_its_layers_is_refused_and_left_untouched],
    ),
    "verification in training mode only": (
        (engine, "verify", verify_training_mode_only),
        [test_verify.test_eval_mode_is_verified_as_well_as_training_mode],
    ),
    "the plan's own example batches ignored": (
        (engine, "example_batches", the_users_batches_only),
        [test_verify.test_a_plan_adds_batches_of_its_own],
    ),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_the_property_fails_when_broken(bug, monkeypatch):
    (owner, name, replacement), tests = BUGS[bug]
    monkeypatch.setattr(owner, name, replacement)
    for test in tests:
        for args in _arguments(test):
            # replace_'s own verification (VerificationError) may be the first to notice; a planted bug that draws
            # unseeded randomness fails the property, then may pass hypothesis' replay of that example (FlakyFailure,
            # which holds the failure)
            failures = (AssertionError, pytest.fail.Exception, th.VerificationError)
            with pytest.raises((*failures, FlakyFailure)) as caught:
                without_shrinking(test, monkeypatch)(*args)
            if isinstance(caught.value, FlakyFailure):
                assert caught.value.subgroup(failures) is not None


def _arguments(test):
    """A parametrized test runs with each of its parameter sets; any other with none."""
    marks = [mark for mark in getattr(test, "pytestmark", []) if mark.name == "parametrize"]
    if not marks:
        return [()]
    return [values if isinstance(values, tuple) else (values,) for values in marks[0].args[1]]


def test_the_frequency_check_catches_biased_draws(monkeypatch):
    monkeypatch.setattr(Router, "choose", biased_draws)
    with pytest.raises(AssertionError):
        test_engine.test_replacement_frequency_matches_the_rate(0.5)
