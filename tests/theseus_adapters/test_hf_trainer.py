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
