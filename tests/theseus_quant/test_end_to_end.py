"""BinaryBERT on a tiny BERT, end to end: full-precision teacher → ternary student (weights 2-bit,
activations and attention 8-bit) → two-stage distillation → TWS → binary model → fine-tuning → export."""

import copy

import torch

from theseus_quant import (
    binarize_,
    distill,
    load_packed,
    quantize_,
    save_packed,
    split_ternary_,
)
from theseus_quant.bert import QuantBertSelfAttention, quantize_attention_
from theseus_quant.layers import BinarySplitLinear, QuantEmbedding, QuantLinear

from .helpers import bert_batch, tiny_bert

NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def run(model, batch):
    return distill.intermediates(model(**batch, output_hidden_states=True, output_attentions=True))


def ternary_student(teacher):
    student = copy.deepcopy(teacher).requires_grad_(True).train()
    quantize_(student, weight_bits=2, activation_bits=8)
    quantize_attention_(student, bits=8)
    return student


def distill_steps(student, theirs, batch, loss_of, steps, lr):
    optimizer = torch.optim.Adam(student.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = loss_of(run(student, batch), theirs)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def stage_1(ours, theirs):
    return distill.intermediate_loss(ours, theirs)


def stage_2(ours, theirs):
    return distill.prediction_loss(ours.logits, theirs.logits)


def binary_skeleton(names):
    model = ternary_student(tiny_bert(classifier=True, attention="eager", seed=1, **NO_DROPOUT))
    split_ternary_(model, names)
    binarize_(model)
    return model.eval()


def test_teacher_to_ternary_to_binary(tmp_path):
    batch = bert_batch()
    teacher = tiny_bert(classifier=True, attention="eager", **NO_DROPOUT).requires_grad_(False)
    with torch.no_grad():
        theirs = run(teacher, batch)
    student = ternary_student(teacher)
    assert len([m for m in student.modules() if isinstance(m, QuantBertSelfAttention)]) == 2

    # Two-stage distillation of the ternary student: hidden states and attentions, then logits.
    first = distill_steps(student, theirs, batch, stage_1, steps=10, lr=1e-4)
    assert first[-1] < 0.95 * first[0], f"stage 1 did not learn: {first}"
    second = distill_steps(student, theirs, batch, stage_2, steps=4, lr=1e-4)
    assert second[-1] < second[0], f"stage 2 did not learn: {second}"

    # TWS: the binary model starts exactly where the ternary one is. In float64, so that no activation
    # sits within rounding of a quantization boundary (in float32 one can move by a step: see docs/guides/quantized.md).
    ternary = copy.deepcopy(student).double().eval()
    batch_ids = {key: value for key, value in batch.items()}
    with torch.no_grad():
        before = ternary(**batch_ids, output_hidden_states=True)
        record = split_ternary_(ternary)
        after = ternary(**batch_ids, output_hidden_states=True)
    assert len(record.split) == 1 + 2 * 6 and not record.kept_ternary
    torch.testing.assert_close(after.logits, before.logits, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(after.hidden_states[-1], before.hidden_states[-1], rtol=1e-9, atol=1e-10)

    # Adaptive splitting's shape: split the encoder, binarize the word embeddings directly; then fine-tune.
    encoder = [name for name, m in student.named_modules() if isinstance(m, QuantLinear) and ".encoder." in name]
    split_ternary_(student, encoder)
    assert binarize_(student) == ("bert.embeddings.word_embeddings",)
    assert all(m.weight_bits == 1 for m in student.modules() if isinstance(m, (QuantLinear, QuantEmbedding)))
    query = student.bert.encoder.layer[0].attention.self.query
    assert isinstance(query, BinarySplitLinear)
    halves = [half.weight.detach().clone() for half in (query.first, query.second)]
    clip = student.bert.encoder.layer[0].attention.self.probs_quant.clip.detach().clone()
    tuned = distill_steps(student, theirs, batch, lambda o, t: stage_1(o, t) + stage_2(o, t), steps=2, lr=1e-4)
    assert all(torch.isfinite(torch.tensor(tuned)))
    assert not torch.equal(query.first.weight, halves[0]) and not torch.equal(query.second.weight, halves[1])
    assert not torch.equal(student.bert.encoder.layer[0].attention.self.probs_quant.clip, clip)

    # Export with packed weights, attention quantizers included; load into a model built the same way.
    student.eval()
    save_packed(student, tmp_path / "binary.safetensors")
    loaded = load_packed(lambda: binary_skeleton(encoder), tmp_path / "binary.safetensors")
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, student(**batch).logits)
