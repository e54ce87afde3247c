"""Each property test must fail when the property it states is broken.

Every case plants one bug in theseus_quant with monkeypatch and runs the property tests that guard
against it, with fixed examples and no shrinking; each of them has to fail.
"""

import inspect

import pytest
import torch
from hypothesis import Phase, settings

from tests.hypothesis_profiles import examples
from theseus_quant import adaptive, bert, convert, export, quantizers, tws

from . import test_adaptive, test_bert, test_convert, test_export, test_quantizers, test_tws

PLANTED_BUG_SETTINGS = settings(
    parent=settings.get_profile("default"),
    max_examples=examples(60),
    phases=[Phase.generate],  # no shrinking: only whether it fails matters
    database=None,
    derandomize=True,  # the same examples every run
)


def with_planted_bug_settings(test, monkeypatch):
    """@given binds its settings when the test is decorated, so swap the bound settings instead."""
    assert hasattr(test, "_hypothesis_internal_use_settings"), "hypothesis changed where @given keeps its settings"
    monkeypatch.setattr(test, "_hypothesis_internal_use_settings", PLANTED_BUG_SETTINGS)
    return test


def sign_of_zero_is_zero(flat):
    codes, alpha = original_binary(flat)
    return torch.where(flat == 0, 0.0, codes), alpha


def ternary_in_float32(flat):
    magnitude = flat.abs()
    kept = magnitude > 0.7 * magnitude.mean(dim=1, keepdim=True)
    alpha = (magnitude * kept).sum(dim=1, keepdim=True) / kept.sum(dim=1, keepdim=True).clamp(min=1)
    return torch.sign(flat) * kept, alpha.double()


def clipped_straight_through(value, source):
    """The hardtanh variant: no gradient where |w| > 1."""
    clipped = source.clamp(-1, 1)
    return value.detach() + (clipped - clipped.detach())


class PlainStraightThrough:
    """Rounds with a straight-through gradient everywhere: leaks gradient outside the clip."""

    @staticmethod
    def apply(x, step, qmax):
        quantized = torch.round((x / step).clamp(-qmax, qmax)) * step
        return x + (quantized - x).detach()


def bias_not_halved(layers):
    splits = original_split_layers(layers)
    for split in splits.values():
        if split.second.bias is not None:
            with torch.no_grad():
                split.second.bias.mul_(2)
    return splits


def mutate_then_validate(module):
    with torch.no_grad():
        for param in module.parameters():
            param.add_(1.0)
    return original_children(module)


def greedy_knapsack(sensitivities, costs, budget):
    chosen, spent = [], 0
    for name in sorted(sensitivities, key=lambda n: -sensitivities[n] / (costs[n] + 1e-9)):
        if sensitivities[name] > 0 and spent + costs[name] <= budget:
            chosen.append(name)
            spent += costs[name]
    return adaptive.SplitChoice(tuple(chosen), sum(sensitivities[n] for n in chosen), spent, budget)


def big_end_first(packed, bits, shape):
    per_byte = 8 // bits
    codes = original_unpack(packed, bits, (packed.numel() * per_byte,))
    codes = codes.reshape(-1, per_byte).flip(1).reshape(-1)
    numel = int(torch.tensor(shape).prod()) if len(shape) else 1
    return codes[:numel].reshape(tuple(shape))


def boolean_mask_ignored(mask, dtype):
    return None if mask is not None and mask.dtype == torch.bool else original_additive_mask(mask, dtype)


original_binary = quantizers._binary
original_additive_mask = bert.additive_mask
original_split_layers = tws._split_layers
original_children = convert._children
original_unpack = export.unpack_codes

BUGS = {
    "TWN threshold 0.5·mean|w|": (
        (quantizers, "TERNARY_THRESHOLD", 0.5),
        [test_quantizers.test_ternary_weights_take_exactly_minus_alpha_zero_alpha_per_group],
    ),
    "sign(0) = 0 in BWN": (
        (quantizers, "_binary", sign_of_zero_is_zero),
        [test_quantizers.test_binary_weights_are_plus_or_minus_alpha_per_group],
    ),
    "scales in float32": (
        (quantizers, "_ternary", ternary_in_float32),
        [lambda: test_quantizers.test_quantizers_are_idempotent_at_realistic_sizes(2)],
    ),
    "no straight-through gradient": (
        (quantizers, "straight_through", clipped_straight_through),
        [test_quantizers.test_weight_gradient_is_straight_through],
    ),
    "activation gradient leaks outside the clip": (
        (quantizers, "_FakeQuantize", PlainStraightThrough),
        [test_quantizers.test_activation_gradient_is_identity_inside_the_clip_and_zero_outside],
    ),
    "TWS without the fallback for skewed groups": (
        (tws, "_carrying_half", lambda flat, rest, sum_inner: flat >= 0),
        [test_tws.test_binary_halves_sum_to_the_ternary_weight],
    ),
    "TWS decides I in float64": (
        (tws, "_ternary", lambda flat: quantizers._ternary(flat.double())),
        [test_tws.test_an_element_at_the_threshold_falls_on_the_same_side_as_in_the_forward_pass],
    ),
    "TWS keeps the whole bias in one half": (
        (tws, "_split_layers", bias_not_halved),
        [test_tws.test_split_model_computes_what_the_ternary_model_computed],
    ),
    "quantize_ changes the model before validating": (
        (convert, "_children", mutate_then_validate),
        [test_convert.test_quantize_rejects_bad_input_before_any_change],
    ),
    "greedy knapsack": (
        (adaptive, "choose_splits", greedy_knapsack),
        [test_adaptive.test_choose_splits_is_an_exact_knapsack],
    ),
    "packed codes read in the wrong order": (
        (export, "unpack_codes", big_end_first),
        [test_export.test_pack_unpack_round_trips_codes, test_export.test_export_then_load_round_trips_bit_for_bit],
    ),
    "quantized attention ignores sdpa's boolean mask": (
        (bert, "additive_mask", boolean_mask_ignored),
        [test_bert.test_quantized_attention_with_quantizers_off_is_the_original_attention],
    ),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_the_property_fails_when_broken(bug, monkeypatch, tmp_path_factory):
    (owner, name, replacement), tests = BUGS[bug]
    monkeypatch.setattr(owner, name, replacement)
    for test in tests:
        kwargs = (
            {"tmp_path_factory": tmp_path_factory} if "tmp_path_factory" in inspect.signature(test).parameters else {}
        )
        with pytest.raises(AssertionError):
            with_planted_bug_settings(test, monkeypatch)(**kwargs)
