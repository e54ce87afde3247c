"""What a training-loop callback does to a `theseus_core.Theseus` handle, whatever the loop.

`theseus_adapters.hf_trainer` (Hugging Face ``Trainer``) and `theseus_adapters.lightning` (Lightning
``Trainer``) both build on `ScheduledReplacing`: the rate from the schedule at the optimizer step, and
the no-gradient step. Only where each loop lets us in differs (a forward hook on the model for the HF
``Trainer``, the LightningModule's ``backward`` for Lightning). Needs torch only.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

import theseus_core as th


class ScheduledReplacing:
    """Drives a `theseus_core.Theseus` handle from a training loop's optimizer step.

    Args:
        theseus: The handle `theseus_core.replace_` returned for the model being trained.
        schedule: Step -> replacing rate in [0, 1], e.g. `theseus_core.LinearSchedule`; a pure function
            of the step, so a resumed run only needs its step back.

    Raises:
        TypeError: ``theseus`` is not a handle or ``schedule`` is not callable (the message names the callback).
    """

    def __init__(self, theseus: th.Theseus, schedule: Callable[[int], float]) -> None:
        name = type(self).__name__
        if not isinstance(theseus, th.Theseus):
            raise TypeError(f"{name} needs the handle theseus_core.replace_ returned, got {type(theseus)}")
        if not callable(schedule):
            raise TypeError(f"{name}: schedule must map a step to a rate, got {schedule!r}")
        self.theseus, self.schedule = theseus, schedule

    def _check_trains(self, model: torch.nn.Module, advice: str) -> None:
        """Raises `ValueError` unless ``model`` (what the loop trains) is or holds the handle's model, and
        `RuntimeError` if the handle was finalized or restored: before any step."""
        if not any(module is self.theseus.model for module in model.modules()):
            raise ValueError(
                f"{type(self).__name__}: {type(model).__name__} does not hold the model this Theseus handle "
                f"replaces ({type(self.theseus.model).__name__}); {advice}"
            )
        next(iter(self.theseus.successor_parameters()), None)  # raises if the handle was finalized or restored

    def _check_reaches_one(self, total_steps: int | None) -> None:
        """Warns when the schedule's rate reaches 1 only after the ``total_steps`` the loop will run (a schedule
        with a ``step_at_one``, such as `theseus_core.LinearSchedule`): the successors would be finalized without
        ever having run alone, the rate ending below 1."""
        at_one = getattr(self.schedule, "step_at_one", None)
        if isinstance(at_one, int) and isinstance(total_steps, int) and 0 < total_steps < at_one:
            warnings.warn(
                f"{type(self).__name__}: the schedule reaches rate 1 at step {at_one}, after the {total_steps} steps "
                f"this run trains (the rate ends at {self.schedule(total_steps - 1):.3g}): shorten the schedule "
                "(LinearSchedule.reaching_one_at) or train longer",
                stacklevel=3,
            )

    def _begin_step(self, step: int) -> float:
        """Sets the rate for optimizer step ``step`` (0-based, as the loop counts it) and returns it."""
        self.theseus.rate = self.schedule(step)
        return self.theseus.rate

    def _differentiable(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss``, or, if it has no gradient, ``loss`` tied to one successor parameter with weight zero.

        A step whose every group happens to run its frozen predecessor has nothing to learn (with
        ``train_others=False`` nothing in the graph requires grad), and both loops' backward refuse such a
        loss. The tie makes it a step like any other, with the same value: the anchor gets a zero
        gradient, every other parameter none, so AdamW and SGD leave those alone (the anchor still
        takes its momentum and weight decay, as any parameter with a zero gradient does).
        """
        if loss.requires_grad:
            return loss
        anchor = next(iter(self.theseus.successor_parameters()), None)
        if anchor is None:
            raise RuntimeError(
                f"{type(self).__name__}: the loss has no gradient and the successors have no parameter to tie it to; "
                "nothing in this model can learn"
            )
        with torch.enable_grad():
            return loss + 0.0 * anchor.sum()
