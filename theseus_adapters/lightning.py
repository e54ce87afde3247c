"""Theseus compression inside a Lightning ``Trainer``: a callback drives the replacing rate.

Example::

    import lightning as L
    import theseus_core as th
    from theseus_adapters.lightning import TheseusCallback

    class Compress(L.LightningModule):
        def __init__(self, model, theseus):
            super().__init__()
            self.model, self.theseus = model, theseus  # the model replace_ changed, and its handle

        def training_step(self, batch, batch_idx):
            inputs, labels = batch
            return F.cross_entropy(self.model(inputs), labels)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.theseus.successor_parameters(), lr=1e-3)

    theseus = th.replace_(model, specs, example_inputs=(inputs,))  # one batch of your data
    schedule = th.LinearSchedule.reaching_one_at(5000, base=0.3)
    callback = TheseusCallback(theseus, schedule, finalize=True)
    L.Trainer(max_steps=6000, callbacks=[callback]).fit(Compress(model, theseus), loader)
    small = theseus.model  # finalized at the end of fit: the successors in place of their groups

The contract, hook by hook:

- ``setup`` (fit only): the LightningModule must hold ``theseus.model`` as a submodule (or be it), and
  the handle must not be finalized or restored yet; otherwise `ValueError` / `RuntimeError` before
  any step. It then wraps the LightningModule's ``backward`` (``teardown`` unwraps it).
- ``on_train_batch_start``: ``theseus.rate = schedule(trainer.global_step)``, logged as
  ``replacing_rate`` (per step, not per epoch). ``global_step`` counts optimizer steps, so the rate follows
  the schedule under ``accumulate_grad_batches`` too.
- ``backward``: a step whose every group happens to run its frozen predecessor has nothing to learn,
  and its loss no gradient, which Lightning's backward refuses; the loss is tied to one successor
  parameter with weight zero (that parameter gets a zero gradient, the others none: AdamW leaves
  them alone). This is the Hugging Face callback's handling (`theseus_adapters.hf_trainer`); both
  go through `theseus_adapters._callbacks.ScheduledReplacing`.
- ``on_fit_end``: with ``finalize=True``, ``theseus.finalize()`` (not after a fit that raised or was
  interrupted: Lightning then skips ``on_fit_end``).
- ``state_dict`` / ``load_state_dict``: the handle's routing state rides in Lightning checkpoints, so
  ``fit(ckpt_path=...)`` resumes the step, hence the rate, and the route draws exactly.

Automatic and manual optimization both work: Lightning's ``manual_backward`` goes through the same
``backward``, so ``self.manual_backward(loss)`` needs no guard either. Under manual optimization
``trainer.global_step`` counts the steps of every optimizer (two optimizers stepping each batch advance
it by two): write the schedule in those steps. The callback does not build the optimizer:
``configure_optimizers`` should hand it ``theseus.successor_parameters()`` (or
``theseus.trainable_parameters()`` with ``train_others=True``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl

import theseus_core as th

from ._callbacks import ScheduledReplacing


class TheseusCallback(ScheduledReplacing, pl.Callback):
    """Sets ``theseus.rate = schedule(trainer.global_step)`` before each training batch and logs it.

    Args:
        theseus: The handle `theseus_core.replace_` returned for a model the LightningModule holds.
        schedule: Step -> replacing rate in [0, 1], e.g. `theseus_core.LinearSchedule`.
        finalize: Call ``theseus.finalize()`` when ``fit`` ends. (default: ``False``)
    """

    def __init__(self, theseus: th.Theseus, schedule: Callable[[int], float], *, finalize: bool = False) -> None:
        super().__init__(theseus, schedule)
        if not isinstance(finalize, bool):
            raise TypeError(f"TheseusCallback: finalize must be True or False, got {finalize!r}")
        self.finalize = finalize
        self._wrapped: tuple[pl.LightningModule, Any] | None = None  # the module, its own instance attribute

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._check_trains(
            pl_module, "assign it to an attribute of the LightningModule (self.model = model) before fit"
        )
        self._wrap_backward(pl_module)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._unwrap_backward()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        total = trainer.estimated_stepping_batches  # optimizer steps, from max_steps or the epochs
        self._check_reaches_one(int(total) if total != float("inf") else None)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        rate = self._begin_step(trainer.global_step)
        pl_module.log("replacing_rate", rate, on_step=True, on_epoch=False)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._unwrap_backward()
        if self.finalize:
            self.theseus.finalize()

    def state_dict(self) -> dict[str, Any]:
        return {"theseus": self.theseus.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.theseus.load_state_dict(state_dict["theseus"])

    # Lightning offers no callback hook that may replace the loss (``on_before_backward`` only sees it), but
    # both optimization modes end in ``LightningModule.backward``, which is documented for overriding; the
    # wrapper is set on the instance, so the user's own override still runs, and removed at teardown.
    def _wrap_backward(self, pl_module: pl.LightningModule) -> None:
        if self._wrapped is not None:
            return
        backward = pl_module.backward

        def tied_backward(loss: Any, *args: Any, **kwargs: Any) -> None:
            return backward(self._differentiable(loss), *args, **kwargs)

        self._wrapped = pl_module, pl_module.__dict__.get("backward")
        pl_module.backward = tied_backward

    def _unwrap_backward(self) -> None:
        if self._wrapped is not None:
            pl_module, own = self._wrapped
            if own is None:
                del pl_module.backward  # the class's backward shows through again
            else:
                pl_module.backward = own
            self._wrapped = None
