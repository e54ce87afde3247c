"""The soft loss of logit distillation (Hinton et al. 2015), torch only: one definition for every family's KD
(`theseus_zoo`'s ``kd`` baseline and ``+kd`` modifier, BinaryBERT's prediction-layer distillation in
`theseus_quant.distill`), so that a ResNet or GNN run needs nothing beyond `theseus_core`."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def prediction_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Soft cross-entropy of the student's logits against the teacher's at ``temperature``, in KL form,
    ``T² · KL(softmax(t / T) ‖ softmax(s / T))`` averaged over examples (T² keeps gradient sizes comparable across
    temperatures). For a regression head (last dimension 1), the MSE, as BinaryBERT's reference does. The teacher's
    logits are detached.

    Raises:
        ValueError: A temperature that is not positive, or logits of different shapes.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"logits of shapes {tuple(student_logits.shape)} and {tuple(teacher_logits.shape)}")
    teacher_logits = teacher_logits.detach()
    if student_logits.shape[-1] == 1:
        return F.mse_loss(student_logits, teacher_logits)
    student_log_probs = F.log_softmax(student_logits / temperature, dim=-1).reshape(-1, student_logits.shape[-1])
    teacher_log_probs = F.log_softmax(teacher_logits / temperature, dim=-1).reshape(-1, teacher_logits.shape[-1])
    kl = F.kl_div(student_log_probs, teacher_log_probs, log_target=True, reduction="batchmean")
    return kl * temperature**2
