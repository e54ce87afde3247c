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
    record = RecordLogs()
    callbacks = [TheseusCallback(theseus, schedule), record]
    Trainer(model=model, args=args, train_dataset=Sentences(), callbacks=callbacks).train()
    rates = [entry["replacing_rate"] for entry in record.logs if "loss" in entry]
    assert rates == pytest.approx([schedule(step) for step in range(6)])
    assert all(calls == 6 for calls, _ in theseus.route_counts.values())  # one draw per step and group
    for name, before in frozen.items():
        assert torch.equal(before, dict(model.named_parameters())[name]), name
    assert any(not torch.equal(before, dict(model.named_parameters())[name]) for name, before in trainable.items())
    assert theseus.finalize().config.num_hidden_layers == 2
