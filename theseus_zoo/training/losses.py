"""Losses of the harness beyond the task's own: the frozen teacher of logit distillation, and blockwise consistency.

Both serve baselines or extensions that depart from BERT-of-Theseus, which trains with the task loss alone. The
soft loss itself is `theseus_quant.prediction_loss` (Hinton et al.'s T² · KL, the mean squared error for a regression
head): one definition for the harness and BinaryBERT's prediction-layer distillation.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

import theseus_core as th
from theseus_core import primary_output, split_primary


def frozen_teacher(model: nn.Module, device: torch.device) -> nn.Module:
    """A copy of ``model`` in eval mode with no gradient, on ``device``: the teacher of logit distillation."""
    return copy.deepcopy(model).to(device).eval().requires_grad_(False)


class ConsistencyLoss:
    """MSE(successor(y), group(y)) summed over the sites that ran their successor since `reset`.

    Forward hooks on the sites of a `theseus_core.Theseus` handle: when a site runs its successor in training
    mode, its predecessor group runs too, on the same input, under no-grad and in eval mode (a deterministic
    target that draws nothing from the global RNG), and the squared error between the two primary outputs is
    kept. Blockwise distillation (Wang et al. 2018) inside progressive module replacing; the paper has no such
    term. Costs one extra forward of each group that took its successor.
    """

    def __init__(self, theseus: th.Theseus) -> None:
        self.terms: list[torch.Tensor] = []
        self.theseus = theseus
        self.handles = [site.register_forward_hook(self._hook, with_kwargs=True) for site in theseus.sites]

    def _hook(self, site: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        if not site.training or not self.theseus.last_routes[site.path]:
            return
        primary, rest, named = split_primary(args, kwargs, site.successor.primary_name, f"the site at {site.path!r}")
        predecessor, mode = site.predecessor, site.predecessor.training
        predecessor.eval()
        try:
            with torch.no_grad():
                target = primary_output(predecessor(primary, *rest, **named))
        finally:
            predecessor.train(mode)
        self.terms.append(F.mse_loss(primary_output(output), target))

    def reset(self) -> None:
        self.terms = []

    def value(self) -> torch.Tensor:
        """The sum of the kept terms (call only when there are some)."""
        return torch.stack(self.terms).sum()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
