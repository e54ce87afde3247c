"""Both training-loop callbacks, the Hugging Face ``Trainer``'s and Lightning's (automatic and manual
optimization), held to the same expectations on a toy model: the rate follows the schedule step by
step, a step where every group ran its predecessor is a step like any other, and only successors learn."""

import warnings

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments

import theseus_core as th
from theseus_adapters import hf_trainer, lightning
from theseus_adapters._callbacks import ScheduledReplacing
from theseus_core.testing import ToyStack

STEPS = 6
SCHEDULE = th.LinearSchedule.reaching_one_at(4, base=0.0)  # rate 0 at step 0: every group runs its predecessor
LOOPS = ["hf", "lightning", "lightning-manual"]


class Points(torch.utils.data.Dataset):  # 4 batches of 8: the steps cross an epoch boundary
    def __len__(self):
        return 32

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        return {"inputs": torch.randn(8, generator=generator), "labels": index % 3}


def toy():
    torch.manual_seed(0)
    model = ToyStack(in_features=8, width=16, num_blocks=4, num_classes=3)
    specs = th.plan(model, "blocks", num_groups=2, successor=th.copy_module(0))
    return model, th.replace_(model, specs, seed=0, example_inputs=model.example_inputs())


def snapshot(theseus):
    """What the optimizer is about to see: the rate, the routes drawn, and each successor's gradients."""
    grads = {site.path: [p.grad for p in site.successor.parameters()] for site in theseus.sites}
    return (
        theseus.rate,
        dict(theseus.last_routes),
        {path: [g.clone() for g in gs if g is not None] for path, gs in grads.items()},
    )


class HFClassifier(nn.Module):  # the Trainer wants the loss in the model's output
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs, labels):
        logits = self.model(inputs)
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


class HFRecord(TrainerCallback):
    def __init__(self, theseus):
        self.theseus, self.steps = theseus, []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.steps.append(snapshot(self.theseus))


class LightningClassifier(pl.LightningModule):
    def __init__(self, model, theseus, manual=False):
        super().__init__()
        self.model, self.theseus = model, theseus
        self.automatic_optimization = not manual

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self.model(batch["inputs"]), batch["labels"])
        if self.automatic_optimization:
            return loss
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return None

    def configure_optimizers(self):
        return torch.optim.AdamW(self.theseus.successor_parameters(), lr=1e-3, weight_decay=0.0)


class LightningRecord(pl.Callback):
    def __init__(self, theseus):
        self.theseus, self.steps = theseus, []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.steps.append(snapshot(self.theseus))


def lightning_trainer(max_steps, *callbacks, **options):
    return pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
        **options,
    )


def loader():
    return torch.utils.data.DataLoader(Points(), batch_size=8, shuffle=True)


def fit(loop, model, theseus, tmp_path, schedule=SCHEDULE):
    """Trains ``model`` for `STEPS` steps of 8 under ``loop`` with the loop's Theseus callback; returns the
    snapshot taken before each optimizer step."""
    if loop == "hf":
        record = HFRecord(theseus)
        args = TrainingArguments(
            output_dir=str(tmp_path),
            max_steps=STEPS,
            per_device_train_batch_size=8,
            learning_rate=1e-3,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            disable_tqdm=True,
        )
        callbacks = [hf_trainer.TheseusCallback(theseus, schedule), record]
        Trainer(model=HFClassifier(model), args=args, train_dataset=Points(), callbacks=callbacks).train()
    else:
        record = LightningRecord(theseus)
        module = LightningClassifier(model, theseus, manual=loop == "lightning-manual")
        lightning_trainer(STEPS, lightning.TheseusCallback(theseus, schedule), record).fit(module, loader())
    return record.steps


@pytest.mark.parametrize("loop", LOOPS)
def test_the_rate_follows_the_schedule_and_a_step_without_gradient_is_a_step(loop, tmp_path):
    model, theseus = toy()
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    steps = fit(loop, model, theseus, tmp_path)
    assert [rate for rate, _, _ in steps] == pytest.approx([SCHEDULE(step) for step in range(STEPS)])
    assert all(calls == STEPS for calls, _ in theseus.route_counts.values())  # one draw per step and group
    assert not any(steps[0][1].values())  # rate 0: the step without gradient happened, and reached the optimizer
    for _, routes, grads in steps:
        if not any(routes.values()):  # nothing to learn: one zero gradient (the anchor), every other none
            assert sum(len(gs) for gs in grads.values()) == 1
            assert not any(g.any() for gs in grads.values() for g in gs)
            continue
        for path, took_successor in routes.items():  # only the successors that ran get a gradient
            assert any(g.any() for g in grads[path]) if took_successor else grads[path] == []
    for name, before in frozen.items():
        assert torch.equal(before, dict(model.named_parameters())[name]), name


@pytest.mark.parametrize("loop", LOOPS)
def test_without_the_shared_handling_the_step_without_gradient_fails(loop, tmp_path, monkeypatch):
    monkeypatch.setattr(ScheduledReplacing, "_differentiable", lambda self, loss: loss)
    model, theseus = toy()
    with pytest.raises(RuntimeError, match="does not require grad"):
        fit(loop, model, theseus, tmp_path)


@pytest.mark.parametrize("loop", ["hf", "lightning"])
def test_a_schedule_that_reaches_one_after_the_last_step_is_warned_of(loop, tmp_path):
    model, theseus = toy()
    with pytest.warns(UserWarning, match=rf"reaches rate 1 at step {STEPS + 1}, after the {STEPS} steps"):
        fit(loop, model, theseus, tmp_path, th.LinearSchedule.reaching_one_at(STEPS + 1))
    model, theseus = toy()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*reaches rate 1")
        fit(loop, model, theseus, tmp_path, th.LinearSchedule.reaching_one_at(STEPS))


@pytest.mark.parametrize("callback", [hf_trainer.TheseusCallback, lightning.TheseusCallback])
def test_the_callbacks_refuse_what_is_not_a_handle_or_a_schedule(callback):
    _, theseus = toy()
    with pytest.raises(TypeError, match=f"{callback.__name__} needs the handle"):
        callback(object(), SCHEDULE)
    with pytest.raises(TypeError, match="schedule must map a step to a rate"):
        callback(theseus, 0.5)
