"""TheseusCallback drives the rate of a tiny BERT trained by a Hugging Face Trainer."""

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

import theseus_core as th
from theseus_adapters import bert
from theseus_adapters.hf_trainer import TheseusCallback


class RecordLogs(TrainerCallback):
    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs))


class Sentences(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        return {"input_ids": torch.randint(5, 50, (9,), generator=generator), "labels": index % 2}


def test_the_callback_follows_the_schedule_and_only_successors_learn(tmp_path):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48)
    model = BertForSequenceClassification(config)
    theseus = th.replace_(model, bert.plan(model, num_layers=2), seed=0)
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    trainable = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    schedule = th.LinearSchedule.reaching_one_at(4, base=0.2)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=6,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    reporter = RecordLogs()  # as the report_to integrations are: registered before the user's callbacks
    callback = TheseusCallback(theseus, schedule)
    trainer = Trainer(model=model, args=args, train_dataset=Sentences(), callbacks=[reporter, callback])
    trainer.callback_handler.callbacks.insert(0, trainer.pop_callback(callback))  # first: the reporters see the rate
    trainer.train()
    rates = [entry["replacing_rate"] for entry in reporter.logs if "loss" in entry]
    assert rates == pytest.approx([schedule(step) for step in range(6)])
    filed = [entry["replacing_rate"] for entry in trainer.state.log_history if "loss" in entry]
    assert filed == rates
    assert all(calls == 6 for calls, _ in theseus.route_counts.values())  # one draw per step and group
    for name, before in frozen.items():
        assert torch.equal(before, dict(model.named_parameters())[name]), name
    assert any(not torch.equal(before, dict(model.named_parameters())[name]) for name, before in trainable.items())
    assert theseus.finalize().config.num_hidden_layers == 2


def test_the_callback_refuses_a_trainer_whose_model_is_not_the_handles_before_any_step(tmp_path):
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48)
    replaced, other = BertForSequenceClassification(config), BertForSequenceClassification(config)
    theseus = th.replace_(replaced, bert.plan(replaced, num_layers=2), seed=0)
    before = {name: p.detach().clone() for name, p in other.named_parameters()}
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=2, report_to=[], save_strategy="no", use_cpu=True)
    callback = TheseusCallback(theseus, th.LinearSchedule.reaching_one_at(2))
    trainer = Trainer(model=other, args=args, train_dataset=Sentences(), callbacks=[callback])
    with pytest.raises(ValueError, match="does not hold the model this Theseus handle replaces"):
        trainer.train()
    assert all(torch.equal(p, before[name]) for name, p in other.named_parameters())


class RecordRoutes(TrainerCallback):
    def __init__(self, theseus):
        self.theseus, self.routes = theseus, []

    def on_step_end(self, args, state, control, **kwargs):
        self.routes.append((state.global_step, tuple(self.theseus.last_routes.values())))


def test_a_resumed_trainer_takes_the_routes_of_the_uninterrupted_run_and_refuses_another_plan(tmp_path):
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48)
    schedule = th.LinearSchedule.reaching_one_at(6, base=0.3)

    def train(out, max_steps, resume=None, group_sizes=None):
        torch.manual_seed(0)
        model = BertForSequenceClassification(config)
        theseus = th.replace_(model, bert.plan(model, num_layers=2, group_sizes=group_sizes), seed=0)
        args = TrainingArguments(
            output_dir=str(out),
            max_steps=max_steps,
            per_device_train_batch_size=8,
            save_steps=3,
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
        )
        record = RecordRoutes(theseus)
        callbacks = [TheseusCallback(theseus, schedule), record]
        Trainer(model=model, args=args, train_dataset=Sentences(), callbacks=callbacks).train(resume)
        return record.routes, theseus

    uninterrupted, _ = train(tmp_path / "whole", 6)
    first, _ = train(tmp_path / "cut", 3)
    assert (tmp_path / "cut" / "checkpoint-3" / "theseus_routing.pt").is_file()
    resumed, theseus = train(tmp_path / "cut", 6, resume=str(tmp_path / "cut" / "checkpoint-3"))
    assert first + resumed == uninterrupted and len({routes for _, routes in uninterrupted}) > 1
    assert all(calls == 6 for calls, _ in theseus.route_counts.values())
    with pytest.raises(ValueError, match="checkpoint-3 was trained with another plan: this routing state is for"):
        train(tmp_path / "cut", 6, resume=str(tmp_path / "cut" / "checkpoint-3"), group_sizes=[3, 1])
