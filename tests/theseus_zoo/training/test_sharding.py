"""`theseus compress --parallel fsdp`: FSDP2 on two gloo processes against one process, on a tiny random Llama.

Two processes on halves of each batch must log the one-process losses and export the same model (no dropout in the
tiny Llama); a rank killed with SIGKILL mid-stage (as it begins a sharded save), then ``--resume``, must give the
uninterrupted two-process run's losses and model.
"""

import json
import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.theseus_zoo.tasks.test_causal_lm import corpus, options, tiny_model  # noqa: F401 (fixtures)
from tests.theseus_zoo.training.test_multiprocess import Torchrun, records
from theseus_zoo import cli
from theseus_zoo.training.state import read_state

DIES = Path(__file__).parent / "dies_in_snapshot"


@pytest.fixture(scope="module")
def config(tmp_path_factory, tiny_model, corpus):  # noqa: F811
    """Theseus (6 steps, routes mixed until step 4) and the truncated baseline, checkpointed every 3 steps."""
    path = tmp_path_factory.mktemp("config") / "tiny.json"
    recipe = {
        "options": options(tiny_model, corpus, init="group_last", num_layers=2),
        "replacing": {"steps": 6, "eval_every": 3, "batch_size": 4, "lr": 1e-3},
        "steps_to_one": 4,
    }
    path.write_text(json.dumps(recipe))
    return path


def command(config: Path, out: Path, *more: str) -> list[str]:
    recipe = ["--recipe", "smollm2-30to15", "--config", str(config)]
    return ["compress", *recipe, "--out", str(out), "--no-progress", *more]


def runs(root: Path, config: Path) -> tuple[Path, Path]:
    """One process (DDP's path), and two under FSDP2 with activation checkpointing, uninterrupted."""
    sharded = ("--parallel", "fsdp", "--activation-checkpointing")
    launched = Torchrun("-m", "theseus_zoo.cli", *command(config, root / "two", *sharded), logs=root / "logs")
    assert cli.main(command(config, root / "one")) == 0  # meanwhile
    returncode, _, stderr, _ = launched.wait()
    assert returncode == 0, stderr[-3000:]
    return root / "one", root / "two"


def logits(run: Path) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(run / "model").eval()
    with torch.no_grad():
        return model(input_ids=torch.arange(5, 19).view(2, 7), use_cache=False).logits


@pytest.mark.slow
def test_two_sharded_processes_train_as_one_and_a_rank_killed_mid_stage_resumes_bit_for_bit(
    tmp_path, monkeypatch, capsys, config
):
    """One test, so that pytest-xdist never runs the two-process run twice (once per worker)."""
    one, two = runs(tmp_path, config)
    alone, sharded = records(one), records(two)
    assert [(r["phase"], r["step"]) for r in sharded] == [(r["phase"], r["step"]) for r in alone]
    assert {r["phase"] for r in sharded} == {"replacing", "baseline:truncated"}
    assert [r["loss"] for r in sharded] == pytest.approx([r["loss"] for r in alone], rel=1e-3)
    norms = [r.get("grad_norm", 0.0) for r in alone]  # none where every group ran its predecessor
    assert sum(map(bool, norms)) >= 10 and [r.get("grad_norm", 0.0) for r in sharded] == pytest.approx(norms, rel=1e-3)
    dev = [r["dev"]["nll"] for r in sharded if "dev" in r]
    assert len(dev) == 4 and dev == pytest.approx([r["dev"]["nll"] for r in alone if "dev" in r], rel=1e-3)
    replacing = [r["ranks"] for r in sharded if r["phase"] == "replacing" and "dev" in r]
    assert all(a["routes"] == b["routes"] for a, b in replacing)  # one route per step, on every rank
    torch.testing.assert_close(logits(two), logits(one), rtol=1e-3, atol=1e-3)
    assert json.loads((two / "report.json").read_text())["models"]["theseus"]["parameters"] == sum(
        p.numel() for p in AutoModelForCausalLM.from_pretrained(one / "model").parameters()
    )
    assert read_state(two / "checkpoint.pt").parallel == "fsdp"
    assert not (two / "sharded").exists()  # finished: the checkpoint names no sharded directory

    monkeypatch.setenv("WORLD_SIZE", "1")  # a DDP checkpoint resumes only under DDP, refused before any work
    assert cli.main(command(config, one, "--resume", "--parallel", "fsdp")) == 2
    assert "checkpointed with --parallel ddp; resume it with --parallel ddp" in capsys.readouterr().err
    monkeypatch.delenv("WORLD_SIZE")

    out, sharded = tmp_path / "killed", ("--parallel", "fsdp", "--activation-checkpointing")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(DIES), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("THESEUS_DIE_AT_SNAPSHOT", "3")  # as replacing's step 6 saves: back to step 3, AdamW going
    killed = Torchrun("-m", "theseus_zoo.cli", *command(config, out, *sharded), logs=tmp_path / "killed-logs")
    returncode, _, stderr, _ = killed.wait()
    assert returncode != 0 and not (out / "report.json").exists(), stderr[-3000:]
    assert (out / "sharded").is_dir()  # what the checkpoint names is there to resume from
    assert read_state(out / "checkpoint.pt").current.step == 3
    monkeypatch.delenv("THESEUS_DIE_AT_SNAPSHOT")
    resumed = Torchrun("-m", "theseus_zoo.cli", *command(config, out, *sharded, "--resume"), logs=tmp_path / "resumed")
    returncode, _, stderr, _ = resumed.wait()
    assert returncode == 0, stderr[-3000:]
    again, uninterrupted = records(out), records(two)
    assert [(r["phase"], r["step"]) for r in again] == [(r["phase"], r["step"]) for r in uninterrupted]
    assert [r["loss"] for r in again] == [r["loss"] for r in uninterrupted]  # bit for bit
    assert [r.get("dev") for r in again] == [r.get("dev") for r in uninterrupted]
    torch.testing.assert_close(logits(out), logits(two), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("arguments", "world_size", "message"),
    [
        (["--recipe", "toy", "--parallel", "fsdp"], None, "--parallel fsdp runs under torchrun"),
        (["--recipe", "toy", "--parallel", "fsdp"], "1", "the toy family does not name its layers to shard"),
        (["--recipe", "toy", "--activation-checkpointing"], None, "--activation-checkpointing goes with --parallel"),
        (
            ["--recipe", "smollm2-30to15", "--parallel", "fsdp", "--methods", "theseus+warmup"],
            "1",
            "--parallel fsdp does not run theseus+warmup (+warmup) yet",
        ),
    ],
)
def test_what_fsdp_cannot_run_is_refused_in_one_line_before_any_work(
    tmp_path, monkeypatch, capsys, arguments, world_size, message
):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    if world_size is not None:
        monkeypatch.setenv("WORLD_SIZE", world_size)
    assert cli.main(["compress", *arguments, "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and message in errors[0], errors
    assert not (tmp_path / "run").exists()
