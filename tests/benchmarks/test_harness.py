"""The benchmark harness counts what it claims to count."""

import subprocess

import torch
from torch import nn

from benchmarks import harness
from benchmarks.harness import markdown_table, training_memory
from theseus_zoo.training.timing import interleaved_seconds, median_ratio


def test_training_memory_counts_weights_saved_activations_gradients_and_optimizer_state():
    model = nn.Sequential(nn.Linear(100, 200), nn.ReLU(), nn.Linear(200, 10))
    model[0].requires_grad_(False)
    inputs = torch.randn(32, 100)
    memory = training_memory(model, lambda: model(inputs).sum())
    mib = 2.0**20
    weights = (100 * 200 + 200 + 200 * 10 + 10) * 4
    trainable = (200 * 10 + 10) * 4
    assert memory["weights"] == weights / mib
    assert memory["gradients"] == trainable / mib and memory["optimizer"] == 2 * trainable / mib
    # autograd keeps the ReLU output for the second Linear's weight gradient (and ReLU's backward);
    # the frozen first Linear needs nothing saved, and no weight is counted as an activation
    assert memory["activations"] == 32 * 200 * 4 / mib
    assert all(p.grad is None for p in model.parameters())


def test_frozen_model_saves_no_activations():
    model = nn.Linear(8, 8).requires_grad_(False)
    memory = training_memory(model, lambda: model(torch.randn(4, 8)).sum())
    assert memory["activations"] == 0 and memory["gradients"] == 0


def test_interleaved_runs_take_turns():
    order = []
    times = interleaved_seconds(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")},
        warmup=1,
        repeats=3,
        device=torch.device("cpu"),
    )
    assert order == ["a", "b"] * 4 and len(times["a"]) == len(times["b"]) == 3
    assert median_ratio([2.0, 4.0, 6.0], [1.0, 1.0, 2.0]) == 3.0


def test_markdown_table():
    assert markdown_table(["a", "b"], [[1, 0.12345]]) == "| a | b |\n|---|---|\n| 1 | 0.123 |\n"


def test_the_commit_a_copy_is_told_wins_over_the_git_it_carries(monkeypatch):
    # a lent GPU machine's tree came with an older commit's .git: git alone would record that commit "+changes"
    monkeypatch.setenv(harness.SOURCE_COMMIT, "0" * 40)
    assert harness.source_commit() == "0" * 40
    monkeypatch.delenv(harness.SOURCE_COMMIT)
    assert (
        harness.source_commit().split("+")[0]
        == subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    )
