"""`theseus_zoo.training.data_order`: each step's examples, and few labels (`Recipe.labelled_examples`):
every stage trains on labelled examples, and only label-free loss terms ever see the unlabelled ones."""

import json
from collections import defaultdict

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import examples
from theseus_zoo import cli
from theseus_zoo.recipes import get_recipe
from theseus_zoo.tasks.toy import ToyTask
from theseus_zoo.training import run as run_module
from theseus_zoo.training.data_order import DataOrder, labelled_split
from theseus_zoo.training.optimization import data_order_generator
from theseus_zoo.training.run_directory import RunError, finished_predecessor


@settings(max_examples=examples(50), deadline=None)
@given(size=st.integers(2, 300), data=st.data())
def test_the_labelled_sample_is_fixed_disjoint_and_covers_the_split(size, data):
    kept = data.draw(st.integers(1, size - 1))
    labelled, unlabelled = labelled_split(size, kept)
    assert len(labelled) == kept
    assert sorted(labelled.tolist() + unlabelled.tolist()) == list(range(size))
    assert labelled.tolist() == sorted(labelled.tolist()) and unlabelled.tolist() == sorted(unlabelled.tolist())
    again = labelled_split(size, kept)
    assert torch.equal(again[0], labelled) and torch.equal(again[1], unlabelled)
    everything, nothing = labelled_split(size, None)
    assert everything.tolist() == list(range(size)) and len(nothing) == 0


@pytest.mark.parametrize("kept", [0, 10, 11])
def test_a_labelled_count_that_is_not_below_the_split_is_refused(kept):
    with pytest.raises(ValueError, match="must be below the 10 examples of the training split"):
        labelled_split(10, kept)


@settings(max_examples=examples(25), deadline=None)
@given(size=st.integers(1, 50), batch=st.integers(1, 16), seed=st.integers(0, 5), steps=st.lists(st.integers(0, 40)))
def test_a_steps_batch_depends_on_the_step_alone_and_every_example_once_an_epoch(size, batch, seed, steps):
    indices = torch.arange(100, 100 + size)
    order = DataOrder(indices, batch, seed, "compression")
    for step in steps:  # any order of queries, as after a resume
        epoch, index = divmod(step, order.steps_per_epoch)
        expected = indices[torch.randperm(size, generator=data_order_generator(seed, "compression", epoch))]
        assert torch.equal(order.batch(step), expected[index * batch : (index + 1) * batch])
    epoch = torch.cat([order.batch(step) for step in range(order.steps_per_epoch)])
    assert len(set(epoch.tolist())) == len(epoch) == (min(size, batch) if size < batch else size - size % batch)


def test_a_batch_above_the_split_trains_full_batch_every_step_in_a_fresh_order():
    """What a recipe's ``batch_size`` above the training split gives (the gnn recipes' ``FULL_BATCH``): one step an
    epoch, each the whole split, never an empty or repeated batch."""
    indices = torch.arange(10, 17)
    order = DataOrder(indices, 100_000, 0, "compression")
    assert order.steps_per_epoch == 1
    batches = [order.batch(step) for step in range(4)]
    assert all(sorted(batch.tolist()) == indices.tolist() for batch in batches)
    assert len({tuple(batch.tolist()) for batch in batches}) > 1


def test_few_labels_reach_only_label_free_losses_and_the_predecessor_is_shared_only_alike(tmp_path, monkeypatch):
    """Which training examples each stage collates and which of them its task loss (the criterion) scores, spied
    on a run of the toy with 100 of 4,000 labels."""
    stage = {"name": None}
    collated, scored = defaultdict(set), defaultdict(set)
    by_labels: dict[int, list[int]] = {}
    train_phase, collate, criterion = run_module.train_phase, ToyTask.collate, ToyTask.criterion

    def spied_phase(session, name, *args):
        stage["name"] = name
        return train_phase(session, name, *args)

    def spied_collate(self, examples):
        batch = collate(self, examples)
        position = {id(example): index for index, example in enumerate(self.data["train"])}
        indices = [position.get(id(example)) for example in examples]
        if stage["name"] is not None and None not in indices:  # a training batch (not dev or test)
            collated[stage["name"]].update(indices)
            by_labels[id(batch[1])] = indices
        return batch

    def spied_criterion(self, logits, batch):
        scored[stage["name"]].update(by_labels.get(id(batch[1]), ()))
        return criterion(self, logits, batch)

    monkeypatch.setattr(run_module, "train_phase", spied_phase)
    monkeypatch.setattr(ToyTask, "collate", spied_collate)
    monkeypatch.setattr(ToyTask, "criterion", spied_criterion)
    config = tmp_path / "few.json"
    tiny = {"predecessor": {"steps": 12, "eval_every": 6}, "replacing": {"steps": 20, "eval_every": 10}}
    config.write_text(json.dumps({**tiny, "steps_to_one": 10, "patience": None, "labelled_examples": 100}))
    out = tmp_path / "run"
    methods = "theseus,theseus+warmup+kd,kd,truncated"
    args = ["compress", "--recipe", "toy", "--config", str(config), "--methods", methods, "--out", str(out)]
    assert cli.main([*args, "--no-progress"]) == 0

    labelled, unlabelled = (set(part.tolist()) for part in labelled_split(4000, 100))
    stages = ("predecessor", "replacing", "warmup:theseus+warmup+kd", "replacing:theseus+warmup+kd", "baseline:kd")
    assert set(collated) == {*stages, "baseline:truncated"}
    assert scored["predecessor"] and scored["baseline:kd"] and scored["replacing"]  # the spy sees the task losses
    for name in collated:
        assert scored[name] <= labelled, name  # no task loss on an example without its label, in any stage
    for name in ("predecessor", "replacing", "baseline:truncated"):  # losses that all need labels
        assert collated[name] <= labelled, name
    for name in ("warmup:theseus+warmup+kd", "replacing:theseus+warmup+kd", "baseline:kd"):  # label-free parts
        assert collated[name] & unlabelled and collated[name] & labelled, name

    recipe = get_recipe("toy").with_overrides(json.loads(config.read_text()))
    finished_predecessor(out, recipe)  # the same labels: its predecessor may be borrowed
    with pytest.raises(RunError, match="another labelled_examples"):
        finished_predecessor(out, recipe.with_overrides({"labelled_examples": 200}))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"labelled_examples": 4000}, "labelled_examples=4000 must be below the 4000 examples of the training split"),
        ({"labelled_examples": 10}, "leaves 10 labelled and 3990 unlabelled examples; each must fill a batch of 64"),
        ({"labelled_examples": 3990}, "leaves 3990 labelled and 10 unlabelled examples; each must fill a batch of 64"),
        (  # a full-batch phase takes each part whole, the others must still fill their batches
            {"labelled_examples": 10, "predecessor": {"batch_size": 4000}},
            "leaves 10 labelled and 3990 unlabelled examples; each must fill a batch of 64",
        ),
        ({"labelled_examples": 100, "consistency_weight": 0.1}, "consistency_weight with labelled_examples"),
    ],
)
def test_few_labels_the_run_cannot_honour_end_it_in_one_line_before_training(tmp_path, capsys, overrides, message):
    config = tmp_path / "few.json"
    config.write_text(json.dumps(overrides))
    args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(tmp_path / "run"), "--no-progress"]
    assert cli.main(args) == 2
    error = capsys.readouterr().err.strip()
    assert message in error
    assert len(error.splitlines()) == 1
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_few_labels_in_full_batch_phases_train_each_part_whole(tmp_path):
    """A graph's phases are full-batch (a batch_size above its training nodes): its few labelled nodes are one
    batch, its unlabelled ones another, whatever their sizes."""
    config = tmp_path / "few.json"
    steps = {"steps": 2, "eval_every": 2}
    few = {"labelled_examples": 10, "predecessor": steps, "replacing": steps, "steps_to_one": 1}
    config.write_text(json.dumps(few))
    out = tmp_path / "run"
    args = ["compress", "--recipe", "gcn-karate", "--config", str(config), "--methods", "kd", "--out", str(out)]
    assert cli.main([*args, "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["recipe"]["labelled_examples"] == 10 and "baseline:kd" in report["models"]
