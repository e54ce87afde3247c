"""theseus_quant.distill: the two-stage distillation losses of BinaryBERT."""

import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from theseus_quant import distill

from .helpers import bert_batch, tiny_bert


def run(model):
    return distill.intermediates(model(**bert_batch(), output_hidden_states=True, output_attentions=True))


def perturbed(model, scale=0.05):
    other = copy.deepcopy(model)
    with torch.no_grad():
        for param in other.parameters():
            param.add_(scale * torch.randn_like(param))
    return other


def test_losses_are_zero_for_identical_models_and_positive_otherwise():
    teacher = tiny_bert(classifier=True, attention="eager")
    ours, theirs = run(copy.deepcopy(teacher)), run(teacher)
    assert ours.num_layers == 2 and len(ours.hidden_states) == 3 and ours.logits.shape == (3, 3)
    assert distill.intermediate_loss(ours, theirs).item() == 0
    for temperature in (0.5, 1.0, 4.0):
        assert distill.prediction_loss(ours.logits, theirs.logits, temperature).item() == pytest.approx(0, abs=1e-7)
    different = run(perturbed(teacher))
    assert distill.intermediate_loss(different, theirs).item() > 0
    assert distill.prediction_loss(different.logits, theirs.logits, 2.0).item() > 0


def test_gradients_reach_the_student_only():
    teacher = tiny_bert(classifier=True, attention="eager")
    student = perturbed(teacher)
    ours, theirs = run(student), run(teacher)  # the teacher ran with autograd on
    loss = distill.intermediate_loss(ours, theirs) + distill.prediction_loss(ours.logits, theirs.logits)
    loss.backward()
    assert all(p.grad is None for p in teacher.parameters()), "the teacher must not learn"
    grads = [p.grad for name, p in student.named_parameters() if not name.startswith(("classifier", "bert.pooler"))]
    assert all(g is not None and g.abs().sum() > 0 for g in grads), "every encoder parameter must learn"


@given(st.integers(1, 4), st.integers(2, 5), st.floats(0.5, 4.0), st.integers(0, 100))
def test_prediction_loss_has_the_gradient_of_the_soft_cross_entropy(batch, classes, temperature, seed):
    generator = torch.Generator().manual_seed(seed)
    student = torch.randn(batch, classes, generator=generator, requires_grad=True)
    teacher = torch.randn(batch, classes, generator=generator)
    # BinaryBERT's soft_cross_entropy (summed over classes, averaged over examples), scaled by T², in float64: the
    # KL form is cross-entropy minus entropy, and subtracting the two in float32 cancels digits (1.6e-6 off at T = 3).
    targets = torch.softmax(teacher.double() / temperature, dim=-1)
    reference = (-targets * torch.log_softmax(student.double() / temperature, dim=-1)).sum(-1).mean() * temperature**2
    entropy = (-targets * targets.log()).sum(-1).mean() * temperature**2
    ours = distill.prediction_loss(student, teacher, temperature)
    # ours is computed in float32: log-probabilities of a few units, T² up to 16, summed, leave ~1e-6 absolute error
    # (seen: 0.0191468 against 0.0191481 at T near 4), so the value is held to 1e-5 absolute, the gradient as before.
    torch.testing.assert_close(ours.double(), reference - entropy, rtol=1e-5, atol=1e-5)
    (grad_ours,) = torch.autograd.grad(ours, student)
    (grad_reference,) = torch.autograd.grad(reference, student)
    torch.testing.assert_close(grad_ours, grad_reference.float(), rtol=1e-5, atol=1e-6)


def test_regression_heads_use_the_squared_error():
    student, teacher = torch.tensor([[1.0], [2.0]]), torch.tensor([[0.0], [4.0]])
    assert distill.prediction_loss(student, teacher).item() == pytest.approx(2.5)


def test_layer_map_is_identity_at_equal_depth_and_uniform_otherwise():
    assert distill.layer_map(6, 6) == (0, 1, 2, 3, 4, 5)
    assert distill.layer_map(3, 6) == (1, 3, 5)
    assert distill.layer_map(1, 4) == (3,)
    for bad in ((4, 6), (0, 6), (7, 6)):
        with pytest.raises(ValueError, match="cannot map"):
            distill.layer_map(*bad)


def test_a_shallower_student_learns_from_the_mapped_teacher_layers():
    teacher = tiny_bert(layers=4, classifier=True, attention="eager")
    theirs = run(teacher)
    # A student whose two layers compute exactly teacher layers 1 and 3: zero loss under the uniform map.
    fake = distill.Intermediates(
        (theirs.hidden_states[0], theirs.hidden_states[2], theirs.hidden_states[4]),
        (theirs.attentions[1], theirs.attentions[3]),
        theirs.logits,
    )
    assert distill.intermediate_loss(fake, theirs).item() == 0
    assert distill.intermediate_loss(fake, theirs, mapping=[0, 2]).item() > 0
    with pytest.raises(ValueError, match="mapping"):
        distill.intermediate_loss(fake, theirs, mapping=[0, 4])


def test_intermediates_explain_what_is_missing():
    sdpa = tiny_bert(attention="sdpa")
    with pytest.raises(ValueError, match="set_attn_implementation"):
        distill.intermediates(sdpa(**bert_batch(), output_hidden_states=True, output_attentions=True))
    with pytest.raises(ValueError, match="output_hidden_states=True"):
        distill.intermediates(sdpa(**bert_batch()))
    narrow = run(tiny_bert(attention="eager", hidden_size=8))
    with pytest.raises(ValueError, match="shape"):
        distill.intermediate_loss(narrow, run(tiny_bert(attention="eager")))
    with pytest.raises(ValueError, match="temperature"):
        distill.prediction_loss(torch.zeros(2, 3), torch.zeros(2, 3), 0.0)
    as_dict = distill.intermediates({"hidden_states": narrow.hidden_states, "attentions": narrow.attentions})
    assert as_dict.logits is None and as_dict.num_layers == 2
