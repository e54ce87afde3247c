"""Weight and activation quantizers: values, scales, straight-through gradients, idempotence."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from theseus_quant import quantizers
from theseus_quant.quantizers import LSQQuantizer, UniformQuantizer

from .helpers import weights

GRANULARITY = st.sampled_from(["tensor", "row"])


def groups(weight: torch.Tensor, granularity: str) -> list[torch.Tensor]:
    return [weight.reshape(-1)] if granularity == "tensor" else list(weight)


@given(weights(), GRANULARITY)
def test_ternary_weights_take_exactly_minus_alpha_zero_alpha_per_group(weight, granularity):
    quantized = quantizers.ternarize(weight, granularity)
    for w, q in zip(groups(weight, granularity), groups(quantized, granularity), strict=True):
        w64 = w.double()
        delta = 0.7 * w64.abs().mean()  # TWN, independently of the library
        kept = w64.abs() > delta
        alpha = w64.abs()[kept].mean() if kept.any() else torch.tensor(0.0, dtype=torch.float64)
        values = set(q.unique().tolist())
        a = q.abs().max()
        assert values <= {-a.item(), 0.0, a.item()}, values
        assert torch.allclose(a.double(), alpha, rtol=1e-6), (a, alpha)
        assert torch.equal(q != 0, kept), "zeroed where |w| > Δ or kept where |w| ≤ Δ"
        assert torch.equal(torch.sign(q), torch.sign(w) * kept), "sign differs from the latent weight"


@given(weights(), GRANULARITY)
def test_binary_weights_are_plus_or_minus_alpha_per_group(weight, granularity):
    quantized = quantizers.binarize(weight, granularity)
    for w, q in zip(groups(weight, granularity), groups(quantized, granularity), strict=True):
        alpha = w.double().abs().mean()
        assert torch.allclose(q.abs().double(), alpha.expand(q.shape), rtol=1e-6), "not ±α with α = mean|w|"
        expected_sign = torch.where(w >= 0, 1.0, -1.0)
        if alpha > 0:
            assert torch.equal(torch.sign(q), expected_sign), "sign(0) must be +1 and signs follow w"


@given(weights(), GRANULARITY, st.sampled_from([1, 2]))
def test_quantizers_are_idempotent_bit_for_bit(weight, granularity, bits):
    once = quantizers.quantize_weight(weight, bits, granularity)
    assert torch.equal(quantizers.quantize_weight(once, bits, granularity), once)


@given(weights(), GRANULARITY, st.sampled_from([1, 2]), st.integers(0, 2**16))
def test_weight_gradient_is_straight_through(weight, granularity, bits, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(4, weight.shape[1], generator=generator)
    target = torch.randn(4, weight.shape[0], generator=generator)
    latent = weight.clone().requires_grad_(True)
    ((x @ quantizers.quantize_weight(latent, bits, granularity).T - target) ** 2).sum().backward()
    # The full-precision gradient of the same loss, taken at the quantized weight.
    at_quantized = quantizers.quantize_weight(weight, bits, granularity).detach().requires_grad_(True)
    ((x @ at_quantized.T - target) ** 2).sum().backward()
    assert latent.grad is not None, "no gradient reached the latent weight"
    assert torch.equal(latent.grad, at_quantized.grad)


def _quantizer(kind: str, clip: float, x: torch.Tensor):
    if kind == "uniform":
        return UniformQuantizer(8, clip=clip)
    quantizer = LSQQuantizer(4)
    quantizer(x)  # initialise the step from this batch
    return quantizer


@given(st.sampled_from(["uniform", "lsq"]), st.floats(0.1, 5.0), st.integers(0, 2**16), st.integers(1, 40))
def test_activation_gradient_is_identity_inside_the_clip_and_zero_outside(kind, clip, seed, size):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, generator=generator) * 3
    quantizer = _quantizer(kind, clip, x)
    bound = (quantizer.clip if kind == "uniform" else quantizer.step * quantizer.qmax).detach().abs()
    margin = (x.abs() - bound).abs() > 1e-4 * bound  # away from the clip's edge
    latent = x.clone().requires_grad_(True)
    upstream = torch.randn(size, generator=generator)
    (quantizer(latent) * upstream).sum().backward()
    inside = x.abs() < bound
    assert torch.equal(latent.grad[inside & margin], upstream[inside & margin]), "not the identity inside the clip"
    assert torch.all(latent.grad[~inside & margin] == 0), "gradient leaks outside the clip"
    learned = quantizer.clip if kind == "uniform" else quantizer.step
    assert learned.grad is not None and torch.isfinite(learned.grad).all(), "the clip / step does not learn"


@given(st.sampled_from(["uniform", "lsq"]), st.floats(0.1, 5.0), st.integers(0, 2**16))
def test_activations_land_on_the_grid_within_half_a_step(kind, clip, seed):
    x = torch.randn(64, generator=torch.Generator().manual_seed(seed)) * 3
    quantizer = _quantizer(kind, clip, x)
    with torch.no_grad():
        q = quantizer(x)
        step = quantizer.step() if kind == "uniform" else quantizer.step.abs()
        levels = q / step
    assert torch.allclose(levels, levels.round(), atol=1e-4), "off the grid"
    assert levels.abs().max() <= quantizer.qmax + 1e-4, "beyond the clip"
    bound = step * quantizer.qmax
    assert torch.all((q - x.clamp(-bound, bound)).abs() <= step / 2 * (1 + 1e-5) + 1e-7), "not the nearest level"


def test_lsq_initialises_once_from_the_first_batch():
    quantizer = LSQQuantizer(4)
    x = torch.full((10,), 2.0)
    quantizer(x)
    expected = 2 * 2.0 / 7**0.5
    assert quantizer.step.item() == pytest.approx(expected) and bool(quantizer.initialized)
    quantizer(x * 100)
    assert quantizer.step.item() == pytest.approx(expected), "re-initialised on a later batch"


def test_lsq_passes_an_empty_batch_through_and_initialises_on_the_first_non_empty_one():
    quantizer = LSQQuantizer(4)
    empty = torch.empty(0, 8, requires_grad=True)
    out = quantizer(empty)
    assert out.shape == (0, 8) and not bool(quantizer.initialized)
    out.sum().backward()
    x = torch.full((10,), 2.0)
    quantizer(x)
    assert quantizer.step.item() == pytest.approx(2 * 2.0 / 7**0.5) and bool(quantizer.initialized)
    assert quantizer(torch.empty(0)).shape == (0,), "an empty batch after initialisation"
    assert torch.isfinite(quantizer(x)).all()


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="granularity"):
        quantizers.ternarize(torch.ones(2, 2), "column")
    with pytest.raises(ValueError, match="weight bits"):
        quantizers.quantize_weight(torch.ones(2, 2), 3)
    with pytest.raises(ValueError, match="activation_bits"):
        quantizers.activation_quantizer(6)
    with pytest.raises(ValueError, match="activation_bits"):
        quantizers.activation_quantizer(8.0)
    with pytest.raises(ValueError, match="activation bits"):
        UniformQuantizer(1)


@pytest.mark.parametrize("bits", [1, 2])
def test_quantizers_are_idempotent_at_realistic_sizes(bits):
    # Float32 scales would break this on most matrices of this size (sums of many equal values round).
    generator = torch.Generator().manual_seed(0)
    for granularity in ("tensor", "row"):
        for _ in range(4):
            weight = torch.randn(256, 300, generator=generator)
            once = quantizers.quantize_weight(weight, bits, granularity)
            assert torch.equal(quantizers.quantize_weight(once, bits, granularity), once)
