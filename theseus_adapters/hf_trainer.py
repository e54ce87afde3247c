"""Theseus compression inside a Hugging Face ``Trainer``: a callback drives the replacing rate.

Example::

    from transformers import Trainer
    import theseus_core as th
    from theseus_adapters import bert
    from theseus_adapters.hf_trainer import TheseusCallback

    theseus = th.replace_(model, bert.plan(model, num_layers=6), example_kwargs=dict(batch))  # one tokenized batch
    schedule = th.LinearSchedule.reaching_one_at(5000, base=0.3)
    trainer = Trainer(model=model, args=args, train_dataset=train, callbacks=[TheseusCallback(theseus, schedule)])
    trainer.train()  # the Trainer's optimizer only gets the parameters that require grad: the successors'
    theseus.finalize().save_pretrained("compact")

A step whose every group happens to run its frozen predecessor has nothing to learn, and its loss
no gradient, which the ``Trainer``'s backward refuses; while training, the callback therefore ties
such a loss to one successor parameter with weight zero (that parameter gets a zero gradient,
the others none: AdamW leaves them alone). `theseus_adapters.lightning` does the same for Lightning
(both through `theseus_adapters._callbacks.ScheduledReplacing`).

The rate is set from the optimizer step (``state.global_step``) before every step, so it follows the
schedule under gradient accumulation too, and it is logged as ``replacing_rate`` (into ``state.log_history``, and
for the callbacks after this one: the ``report_to`` integrations, which the ``Trainer`` registers before the user's
callbacks, see it once it is moved first, ``trainer.callback_handler.callbacks.insert(0, trainer.pop_callback(cb))``).
Training refuses a ``Trainer`` whose model does not hold the handle's model, before any step. Every checkpoint the
``Trainer`` saves under ``output_dir`` gets the routing state (``theseus_routing.pt``); resuming from it restores the
model and the step (hence the rate) and the routes, which go on as in the uninterrupted run, and refuses, before any
step, a checkpoint of another plan (the ``Trainer`` has loaded its weights by then, leniently: the run stops
there). A checkpoint without the file (saved elsewhere) resumes with a warning, the routes restarting from the seed.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ._callbacks import ScheduledReplacing

TRAINER_STATE_NAME = "trainer_state.json"  # the Trainer's own file in each checkpoint (transformers.trainer)
ROUTING_STATE = "theseus_routing.pt"
"""The file `TheseusCallback` writes into each checkpoint: the handle's routing state."""


def _checkpoint(args: Any, state: Any) -> Path:
    """The directory the ``Trainer`` saves the checkpoint of ``state.global_step`` in (``Trainer._save_checkpoint``)."""
    return Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"


class TheseusCallback(ScheduledReplacing, TrainerCallback):
    """Sets ``theseus.rate = schedule(global_step)`` before each optimizer step and logs it.

    Args:
        theseus: The handle `theseus_core.replace_` returned for the model the ``Trainer`` trains.
        schedule: Step -> replacing rate in [0, 1], e.g. `theseus_core.LinearSchedule`.
    """

    _hook: torch.utils.hooks.RemovableHandle | None = None

    def on_train_begin(
        self, args: Any, state: Any, control: Any, model: nn.Module | None = None, **kwargs: Any
    ) -> None:
        if model is not None:
            self._check_trains(model, "give the Trainer the model you passed to replace_")
        self._check_reaches_one(state.max_steps)
        if state.global_step > 0:  # resumed from a checkpoint
            self._resume_routes(_checkpoint(args, state), state)
        self._begin_step(state.global_step)
        if model is not None and self._hook is None:
            self._hook = model.register_forward_hook(self._keep_loss_differentiable)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Writes the routing state (`theseus_core.Theseus.state_dict`) into the checkpoint just saved."""
        checkpoint = _checkpoint(args, state)
        writes = state.is_local_process_zero if args.save_on_each_node else state.is_world_process_zero
        if writes and checkpoint.is_dir():
            torch.save(self.theseus.state_dict(), checkpoint / ROUTING_STATE)

    def _resume_routes(self, checkpoint: Path, state: Any) -> None:
        """Loads the routing state `on_save` wrote into ``checkpoint``, when it is the checkpoint the ``Trainer``
        resumed from (its ``trainer_state.json`` holds the log the ``Trainer`` resumed with): the routes go on as
        uninterrupted, and a checkpoint of another plan is refused before any step."""
        saved = checkpoint / ROUTING_STATE
        try:
            resumed = json.loads((checkpoint / TRAINER_STATE_NAME).read_text())["log_history"] == state.log_history
        except (OSError, ValueError, KeyError):
            resumed = False
        if not (resumed and saved.is_file()):
            warnings.warn(
                f"TheseusCallback: resuming at step {state.global_step} without its routing state ({saved} not "
                "found, or not of the checkpoint resumed from: one outside output_dir, or saved without this "
                "callback): the routes restart from the seed, and nothing checks that it was trained with this plan",
                stacklevel=3,
            )
            return
        try:
            self.theseus.load_state_dict(torch.load(saved, weights_only=True))
        except ValueError as error:
            raise ValueError(f"TheseusCallback: {checkpoint} was trained with another plan: {error}") from error

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _keep_loss_differentiable(self, module: nn.Module, inputs: Any, output: Any) -> Any:
        loss = output.get("loss") if isinstance(output, Mapping) else None
        if module.training and torch.is_grad_enabled() and loss is not None:
            output["loss"] = self._differentiable(loss)
        return output

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._begin_step(state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if logs is not None:
            logs["replacing_rate"] = self.theseus.rate
            # the Trainer files a copy of ``logs`` before its callbacks run: the rate goes into that entry too
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                state.log_history[-1].setdefault("replacing_rate", self.theseus.rate)
