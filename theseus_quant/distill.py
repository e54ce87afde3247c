"""BinaryBERT's two-stage distillation losses (as TernaryBERT's ``quant_task_distill_glue.py``), torch only.

- Stage 1, `intermediate_loss`: Σ over layers of MSE(hidden states) + Σ over layers of
  MSE(attentions), between the student and a full-precision teacher (the embedding output
  counts as hidden state 0, as in the reference).
- Stage 2, `prediction_loss`: soft cross-entropy between the logits at a temperature (its one home is
  `theseus_core.distillation`, shared with the zoo's KD; re-exported here).

`intermediates` reads what the losses need from a Hugging Face output (a ``ModelOutput`` or a
dict) computed with ``output_hidden_states=True, output_attentions=True``. Teacher tensors are
detached inside the losses, so gradients reach the student only even when the teacher ran with
autograd on.

Two departures from the reference, both forced or harmless: the attentions compared are the
probabilities transformers returns (the reference compares pre-softmax scores, with masked
entries zeroed; probabilities need no such fix, masked entries being 0 in both models); and the
soft cross-entropy is taken in its KL form (minus the teacher's entropy, a constant for the
student: the same gradient, and 0 when the two agree).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from theseus_core.distillation import prediction_loss as prediction_loss  # re-exported: one soft loss for every KD


@dataclass(frozen=True)
class Intermediates:
    """A model's hidden states (embedding output first, then one per layer), attention
    probabilities (one ``[batch, heads, seq, seq]`` tensor per layer) and logits (or ``None``)."""

    hidden_states: tuple[torch.Tensor, ...]
    attentions: tuple[torch.Tensor, ...]
    logits: torch.Tensor | None

    @property
    def num_layers(self) -> int:
        return len(self.attentions)


def _field(outputs: object, name: str) -> object:
    if isinstance(outputs, Mapping):
        return outputs.get(name)
    return getattr(outputs, name, None)


def intermediates(outputs: object) -> Intermediates:
    """The hidden states, attentions and logits of a Hugging Face model's ``outputs``.

    Raises:
        ValueError: Hidden states or attentions missing (call the model with
            ``output_hidden_states=True, output_attentions=True``), or attentions empty because
            the model runs sdpa attention, which computes no probabilities (load it with
            ``attn_implementation="eager"`` or call ``model.set_attn_implementation("eager")``;
            `theseus_quant.bert.QuantBertSelfAttention` always returns them), or their counts
            disagree.
    """
    hidden_states, attentions = _field(outputs, "hidden_states"), _field(outputs, "attentions")
    if hidden_states is None or attentions is None:
        raise ValueError(
            "outputs lack hidden states or attentions; call the model with "
            "output_hidden_states=True, output_attentions=True"
        )
    hidden_states, attentions = tuple(hidden_states), tuple(attentions)
    if not attentions:
        raise ValueError(
            "the model returned no attentions: sdpa attention computes no probabilities; "
            'load it with attn_implementation="eager" or call model.set_attn_implementation("eager")'
        )
    if len(hidden_states) != len(attentions) + 1:
        raise ValueError(
            f"{len(hidden_states)} hidden states for {len(attentions)} attentions; expected the embedding "
            "output and one hidden state per layer (were some layers left out of output_hidden_states?)"
        )
    return Intermediates(hidden_states, attentions, _field(outputs, "logits"))


def layer_map(student_layers: int, teacher_layers: int) -> tuple[int, ...]:
    """The teacher layer each student layer learns from: itself for equal depth, else every
    ``teacher_layers / student_layers``-th one, ending at the top (TinyBERT's uniform mapping).

    Raises:
        ValueError: A depth below 1, a deeper student, or a teacher depth that is not a multiple
            of the student's.
    """
    if student_layers < 1 or teacher_layers < student_layers or teacher_layers % student_layers:
        raise ValueError(
            f"cannot map {student_layers} student layers onto {teacher_layers} teacher layers: "
            "the teacher must have a multiple of the student's depth"
        )
    step = teacher_layers // student_layers
    return tuple((i + 1) * step - 1 for i in range(student_layers))


def intermediate_loss(
    student: Intermediates, teacher: Intermediates, mapping: Sequence[int] | None = None
) -> torch.Tensor:
    """Stage 1: Σ MSE(hidden states) + Σ MSE(attentions) over mapped layers.

    Args:
        student, teacher: See `intermediates`; the teacher's tensors are detached.
        mapping: The teacher layer of each student layer. (default: `layer_map` of the depths)

    Raises:
        ValueError: A mapping of the wrong length or out of range, or shapes that differ (a
            narrower student needs a learned projection, which this loss does not have).
    """
    if mapping is None:
        mapping = layer_map(student.num_layers, teacher.num_layers)
    mapping = tuple(mapping)
    if len(mapping) != student.num_layers or not all(0 <= j < teacher.num_layers for j in mapping):
        raise ValueError(
            f"mapping {mapping} must give one teacher layer in [0, {teacher.num_layers}) "
            f"for each of the {student.num_layers} student layers"
        )
    pairs = [(student.hidden_states[0], teacher.hidden_states[0], "hidden state 0")]
    for i, j in enumerate(mapping):
        pairs.append((student.hidden_states[i + 1], teacher.hidden_states[j + 1], f"hidden state {i + 1}"))
        pairs.append((student.attentions[i], teacher.attentions[j], f"attention {i}"))
    for ours, theirs, what in pairs:
        if ours.shape != theirs.shape:
            raise ValueError(f"student {what} has shape {tuple(ours.shape)}, teacher's {tuple(theirs.shape)}")
    return sum(F.mse_loss(ours, theirs.detach()) for ours, theirs, _ in pairs)
