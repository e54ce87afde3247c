"""`theseus compress` as two processes: ``torchrun --nproc_per_node 2`` on gloo, the toy recipe for a few steps.

Rank 1 runs with an audit hook that refuses any write under ``--out`` (``read_only_ranks/sitecustomize.py``), so a
write from it fails the run. With dropout off, two processes on halves of each batch train as one process on the
whole batch: the logged losses must be the one-process losses (the mean over ranks, not rank 0's half).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from theseus_zoo import cli
from theseus_zoo.training import ranks
from theseus_zoo.training.report import markdown_report

TINY = {
    "predecessor": {"steps": 10, "eval_every": 5},
    "replacing": {"steps": 10, "eval_every": 5},
    "steps_to_one": 5,
    "patience": None,
    "baselines": ["truncated"],
    "options": {"dropout": 0.0},  # so that two processes on half batches train as one on whole batches
}
GUARD = Path(__file__).parent / "read_only_ranks"
REPO = Path(__file__).resolve().parents[3]


class Torchrun:
    """``python -m torch.distributed.run --standalone --nproc_per_node 2 *command``, started at once (the test can
    work meanwhile), its output in files under ``logs`` (no pipe to fill); with ``read_only``, rank 1 may not write
    there."""

    def __init__(self, *command: str, logs: Path, read_only: Path | None = None) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable}
        if read_only is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(GUARD), env.get("PYTHONPATH")]))
            env["THESEUS_READ_ONLY"] = str(read_only)
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        logs.mkdir(parents=True)
        self.stdout, self.stderr = logs / "stdout", logs / "stderr"
        self.started = time.perf_counter()
        with open(self.stdout, "w") as stdout, open(self.stderr, "w") as stderr:
            self.process = subprocess.Popen([*launcher, *command], cwd=REPO, env=env, stdout=stdout, stderr=stderr)

    def wait(self) -> tuple[int, str, str, float]:
        """Exit status, stdout, stderr and seconds from the start."""
        try:
            returncode = self.process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.process.terminate()  # torchrun passes it on to its workers
            raise
        seconds = time.perf_counter() - self.started
        return returncode, self.stdout.read_text(), self.stderr.read_text(), seconds


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "tiny.json"
    path.write_text(json.dumps(TINY))
    return path


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_two_processes_write_once_agree_on_routes_and_log_the_mean_loss(tmp_path, config):
    out = tmp_path / "two"
    args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(out), "--no-progress"]
    launched = Torchrun("-m", "theseus_zoo.cli", *args, logs=tmp_path / "logs", read_only=out)
    # meanwhile, one process on whole batches (most of the launch is importing torch in three processes)
    assert cli.main([*args[:-3], "--out", str(tmp_path / "one"), "--no-progress"]) == 0
    returncode, stdout, stderr, _ = launched.wait()
    assert returncode == 0, stderr[-3000:]
    assert stdout.count("| theseus |") == 1  # rank 0 printed the report, rank 1 did not

    # rank 0 wrote every file, once (rank 1 could not write at all), and let go of the lock
    expected = {"checkpoint.pt", "curves.png", "metrics.jsonl", "model", "recipe.json"}  # one checkpoint, finished
    assert set(os.listdir(out)) - {"tensorboard"} == expected | {"report.json", "report.md"}
    report = json.loads((out / "report.json").read_text())
    assert set(report["models"]) == {"predecessor", "theseus", "baseline:truncated"}
    assert set(report["phases"]) == {"predecessor", "replacing", "baseline:truncated"}
    assert (out / "report.md").read_text() == markdown_report(report)
    assert sorted(os.listdir(out / "model")) == ["config.json", "model.pt"]
    logged = records(out)
    for phase in report["phases"]:
        assert [r["step"] for r in logged if r["phase"] == phase] == list(range(1, 11))

    # routes agree across ranks, forward (dropout) streams differ, at every evaluation
    evaluations = [r for r in logged if "dev" in r]
    assert len(evaluations) == 6 and all(len(r["ranks"]) == 2 for r in evaluations)
    replacing = [r["ranks"] for r in evaluations if r["phase"] == "replacing"]
    assert all(a["routes"] == b["routes"] and a["routes"] is not None for a, b in replacing)
    assert len({a["routes"] for a, _ in replacing}) == 2  # the routing state moved between the two evaluations
    assert all(a["forward_rng"] != b["forward_rng"] for a, b in (r["ranks"] for r in evaluations))

    # the logged loss is the mean over both halves: what one process logs for the whole batch
    alone = records(tmp_path / "one")
    assert [(r["phase"], r["step"]) for r in alone] == [(r["phase"], r["step"]) for r in logged]
    assert [r["loss"] for r in logged] == pytest.approx([r["loss"] for r in alone], rel=1e-4)
    assert [r.get("rate") for r in logged] == [r.get("rate") for r in alone]


@pytest.mark.slow
def test_warmup_on_two_processes_trains_as_one_process_on_whole_batches(tmp_path, config):
    """``+warmup`` runs the successors outside the DDP wrapper's forward, so the loop averages their gradients itself
    (without it the ranks' successors drifted apart from the second warm-up step on)."""
    config = tmp_path / "warmup.json"  # methods in place of baselines: the two together are refused
    config.write_text(
        json.dumps({**{k: v for k, v in TINY.items() if k != "baselines"}, "methods": ["theseus+warmup"]})
    )
    args = ["compress", "--recipe", "toy", "--config", str(config), "--no-progress"]
    launched = Torchrun("-m", "theseus_zoo.cli", *args, "--out", str(tmp_path / "two"), logs=tmp_path / "logs")
    assert cli.main([*args, "--out", str(tmp_path / "one")]) == 0
    returncode, _, stderr, _ = launched.wait()
    assert returncode == 0, stderr[-3000:]
    logged, alone = records(tmp_path / "two"), records(tmp_path / "one")
    assert [(r["phase"], r["step"]) for r in logged] == [(r["phase"], r["step"]) for r in alone]
    assert sum(r["phase"] == "warmup" for r in logged) >= 2  # a second step, after the first averaged update
    assert [r["loss"] for r in logged] == pytest.approx([r["loss"] for r in alone], rel=1e-4)


@pytest.mark.slow
def test_ranks_given_different_seeds_fail_fast_with_one_line(tmp_path, config):
    out = tmp_path / "mismatch"
    command = f'exec "$PYTHON" -m theseus_zoo.cli compress --recipe toy --config {config} --out {out} --no-progress'
    launched = Torchrun("--no-python", "sh", "-c", command + " --seed $RANK", logs=tmp_path / "logs")  # 0 and 1
    returncode, _, stderr, seconds = launched.wait()
    assert returncode != 0 and seconds < 60
    errors = [line for line in stderr.splitlines() if line.startswith("theseus: error:")]
    assert len(errors) == 1, stderr[-3000:]
    assert "different recipes (seed: 0 on rank 0, 1 on rank 1)" in errors[0]
    assert not out.exists()


def test_gradients_of_a_loss_outside_the_wrapper_become_their_mean_over_the_ranks(monkeypatch):
    """`ranks.average_gradients` as rank 0 of two sees it (a stand-in all_reduce sums in rank 1's gradient): each
    gradient the mean, a parameter without one left without (the whole +warmup run on two processes: the test above,
    slow)."""
    trained, frozen = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    trained.grad = torch.tensor([1.0, -1.0])

    def all_reduce(tensor, op):
        assert op == ranks.dist.ReduceOp.SUM
        tensor += torch.tensor([3.0, 5.0])  # rank 1's

    monkeypatch.setattr(ranks, "_distributed", lambda: True)
    monkeypatch.setattr(ranks.dist, "all_reduce", all_reduce)
    monkeypatch.setattr(ranks.dist, "get_world_size", lambda: 2)
    ranks.average_gradients([trained, frozen])
    assert torch.equal(trained.grad, torch.tensor([2.0, 2.0])) and frozen.grad is None


def test_each_rank_draws_its_own_forward_stream_and_leaves_the_shared_one_alone():
    torch.manual_seed(0)
    shared = torch.get_rng_state()
    streams = [ranks.ForwardRng(seed=0, rank=rank, device=torch.device("cpu")) for rank in (0, 1)]
    masks = []
    for stream in streams:
        with stream.active():
            masks.append(torch.nn.functional.dropout(torch.ones(256), 0.5) > 0)
    assert not torch.equal(masks[0], masks[1])  # the ranks drop different units
    assert torch.equal(torch.get_rng_state(), shared)  # initialisations stay in step across ranks
    with streams[0].active():
        second = torch.nn.functional.dropout(torch.ones(256), 0.5) > 0
    again = ranks.ForwardRng(seed=0, rank=0, device=torch.device("cpu"))
    with again.active():  # one activation drawing twice
        both = [torch.nn.functional.dropout(torch.ones(256), 0.5) > 0 for _ in range(2)]
    assert torch.equal(masks[0], both[0]) and torch.equal(second, both[1])  # the stream goes on where it stopped
    assert ranks.fingerprint(again.state) == ranks.fingerprint(streams[0].state)
    assert ranks.fingerprint(again.state) != ranks.fingerprint(streams[1].state)


def test_a_recipe_disagreement_names_the_fields_and_each_ranks_value():
    same = {"seed": 0, "replacing": {"lr": 1e-3, "steps": 10}}
    assert ranks.disagreement([same, same]) is None
    other = {"seed": 1, "replacing": {"lr": 3e-3, "steps": 10}}
    assert (
        ranks.disagreement([same, other])
        == "replacing.lr: 0.001 on rank 0, 0.003 on rank 1; seed: 0 on rank 0, 1 on rank 1"
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_the_forward_stream_swaps_the_cuda_generator_too():
    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.manual_seed(0)
    shared = torch.cuda.get_rng_state(device)
    masks = []
    for rank in (0, 1):
        stream = ranks.ForwardRng(seed=0, rank=rank, device=device)
        with stream.active():
            masks.append(torch.nn.functional.dropout(torch.ones(256, device=device), 0.5) > 0)
        assert "cuda" in stream.state
    assert not torch.equal(masks[0], masks[1])
    assert torch.equal(torch.cuda.get_rng_state(device), shared)


class _Rank:
    """What `Session.together` reads of a session on one of two ranks, with every rank's failure as given."""

    def __init__(self, rank: int) -> None:
        self.processes, self.main = 2, rank == 0


@pytest.mark.parametrize("rank", [0, 1])
def test_together_raises_every_ranks_failure_on_every_rank_and_keeps_an_unexpected_ones_traceback(rank, monkeypatch):
    from theseus_zoo.training.run_directory import RunError
    from theseus_zoo.training.session import Session

    gathers = []

    def gathered(failure):  # rank 1 met the failure; ``failure`` is what this rank's block gave
        gathers.append(failure)
        return [None, failure if rank == 1 else expected]

    monkeypatch.setattr(ranks, "all_gather", gathered)
    session = _Rank(rank)
    for raised, expected in [
        (ValueError("bad input"), "bad input"),
        (PermissionError("disk refused"), "PermissionError: disk refused"),
    ]:
        with pytest.raises(Exception) as caught, Session.together(session):
            if rank == 1:
                raise raised
        assert gathers.pop() == (None if rank == 0 else expected)  # every rank gathers, even the one that failed
        if rank == 1 and not isinstance(raised, ValueError):
            assert caught.value is raised and caught.value.__traceback__ is not None  # as it was, where it was
        else:
            assert isinstance(caught.value, RunError) and caught.value.on_every_rank
            assert str(caught.value) == f"rank 1: {expected}" and caught.value.quiet == (rank == 1)
