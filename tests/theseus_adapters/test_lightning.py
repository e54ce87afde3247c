"""The Lightning callback's own contract: finalize at fit end, the rate under gradient accumulation, the
user's ``backward``, resume from a checkpoint, and what it refuses. What it shares with the Hugging Face
callback is tested against the same expectations in test_callbacks.py."""

import lightning.pytorch as pl
import pytest
import torch

import theseus_core as th
from theseus_adapters.lightning import TheseusCallback
from theseus_core.testing import ToyStack

from .test_callbacks import SCHEDULE, LightningClassifier, lightning_trainer, loader, toy


class CountingBackward(LightningClassifier):
    calls = 0

    def backward(self, loss, *args, **kwargs):
        type(self).calls += 1
        super().backward(loss, *args, **kwargs)


class RecordRates(pl.Callback):
    def __init__(self, theseus):
        self.theseus, self.rates = theseus, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.rates.append(self.theseus.rate)


def test_finalize_at_fit_end_gives_what_the_handle_gives():
    finalized = []
    for finalize in (True, False):
        model, theseus = toy()
        lightning_trainer(4, TheseusCallback(theseus, SCHEDULE, finalize=finalize)).fit(
            LightningClassifier(model, theseus), loader()
        )
        assert any(isinstance(m, th.ReplacementSite) for m in model.modules()) is not finalize
        finalized.append(model if finalize else theseus.finalize())
    by_callback, by_hand = finalized
    assert not any(isinstance(m, th.ReplacementSite) for m in by_callback.modules())
    assert by_callback.state_dict().keys() == by_hand.state_dict().keys()
    for name, value in by_callback.state_dict().items():
        assert torch.equal(value, by_hand.state_dict()[name]), name
    inputs = by_callback.example_inputs()
    assert torch.equal(by_callback.eval()(*inputs), by_hand.eval()(*inputs))


def test_the_rate_follows_the_optimizer_step_under_accumulation_through_the_users_backward():
    model, theseus = toy()
    record, CountingBackward.calls = RecordRates(theseus), 0
    module = CountingBackward(model, theseus)
    fitted = lightning_trainer(3, TheseusCallback(theseus, SCHEDULE), record, accumulate_grad_batches=2)
    fitted.fit(module, loader())
    assert record.rates == pytest.approx([SCHEDULE(step) for step in (0, 0, 1, 1, 2, 2)])
    assert fitted.callback_metrics["replacing_rate"].item() == pytest.approx(SCHEDULE(2))
    assert CountingBackward.calls == 6  # the override ran under the wrapper, step 0's untied loss included
    assert "backward" not in vars(module)  # unwrapped at the end of fit


def test_resuming_from_a_checkpoint_takes_the_routes_of_the_uninterrupted_run(tmp_path):
    model, theseus = toy()
    lightning_trainer(6, TheseusCallback(theseus, SCHEDULE)).fit(LightningClassifier(model, theseus), loader())
    uninterrupted = theseus.state_dict()

    model, theseus = toy()
    first = lightning_trainer(3, TheseusCallback(theseus, SCHEDULE))
    first.fit(LightningClassifier(model, theseus), loader())
    first.save_checkpoint(tmp_path / "step3.ckpt")
    model, theseus = toy()  # as a new process would build them
    record = RecordRates(theseus)
    lightning_trainer(6, TheseusCallback(theseus, SCHEDULE), record).fit(
        LightningClassifier(model, theseus), loader(), ckpt_path=tmp_path / "step3.ckpt"
    )
    assert record.rates == pytest.approx([SCHEDULE(step) for step in (3, 4, 5)])
    resumed = theseus.state_dict()
    assert resumed["calls"] == uninterrupted["calls"] == [6, 6]
    assert resumed["successor_calls"] == uninterrupted["successor_calls"]
    assert torch.equal(resumed["generator_state"], uninterrupted["generator_state"])


def test_the_callback_refuses_a_module_without_the_model_and_a_spent_handle():
    model, theseus = toy()
    stranger = LightningClassifier(ToyStack(), theseus)
    with pytest.raises(ValueError, match="does not hold the model this Theseus handle replaces"):
        lightning_trainer(2, TheseusCallback(theseus, SCHEDULE)).fit(stranger, loader())
    assert all(calls == 0 for calls, _ in theseus.route_counts.values())  # refused before any step
    assert "backward" not in vars(stranger)
    theseus.finalize()
    with pytest.raises(RuntimeError, match="already finalized"):
        lightning_trainer(2, TheseusCallback(theseus, SCHEDULE)).fit(LightningClassifier(model, theseus), loader())
    with pytest.raises(TypeError, match="finalize must be True or False"):
        TheseusCallback(theseus, SCHEDULE, finalize="yes")
