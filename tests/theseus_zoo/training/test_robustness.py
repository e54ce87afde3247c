"""Fault injection on the toy recipe: kills right after every kind of checkpoint, damaged and crafted files,
non-finite losses, a second writer, stale files, bad output directories."""

import json
import os
import pickle

import pytest
import torch

from theseus_zoo import cli
from theseus_zoo.tasks import toy
from theseus_zoo.training import session
from theseus_zoo.training.checkpoints import CheckpointError, read_checkpoint, write_checkpoint
from theseus_zoo.training.run_directory import CHECKPOINT

TINY = {
    "predecessor": {"steps": 20, "eval_every": 10},
    "replacing": {"steps": 30, "eval_every": 10},
    "steps_to_one": 10,
    "patience": None,
    "baselines": ["truncated"],
}


def compress(tmp_path, out="run", *extra, overrides=None):
    config = tmp_path / f"{out}.json"
    config.write_text(json.dumps({**TINY, **(overrides or {})}))
    args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(tmp_path / out), "--no-progress"]
    return cli.main([*args, *extra])


def comparable(run):
    report = json.loads((run / "report.json").read_text())
    report.pop("speedup")
    for phase in report["phases"].values():
        phase.pop("seconds")
    return report


def dies_after_save(monkeypatch, number):
    """Makes the run raise KeyboardInterrupt (as Ctrl-C or a kill would end it) right after its ``number``-th
    checkpoint is written; returns the function that undoes it."""
    saves = {"n": 0}
    save = session.atomic_save

    def save_then_die(state, path):
        save(state, path)
        saves["n"] += 1
        if saves["n"] == number:
            raise KeyboardInterrupt

    monkeypatch.setattr(session, "atomic_save", save_then_die)
    return lambda: monkeypatch.setattr(session, "atomic_save", save)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """An uninterrupted run of each configuration the kills are compared with."""
    root = tmp_path_factory.mktemp("whole")
    runs = {}
    for name, overrides in {
        "plain": {},
        "stopping": {"patience": 1, "replacing": {"steps": 60, "eval_every": 10}},
    }.items():
        assert compress(root, name, overrides=overrides) == 0
        runs[name] = root / name
    return runs


# save 1: predecessor start, 2-3: its evaluations, 4: its "done"; 5: replacing start, 6-8: evaluations, 9: done;
# 10: truncated start, ..., 14: its done
@pytest.mark.parametrize(
    "kill_after", [3, *(pytest.param(n, marks=pytest.mark.slow) for n in (4, 5, 9)), 14]
)  # an evaluation's, phase ends', a phase start
def test_a_kill_right_after_any_save_resumes_to_the_same_bytes(tmp_path, monkeypatch, whole, kill_after):
    undo = dies_after_save(monkeypatch, kill_after)
    assert compress(tmp_path) == 130
    undo()
    assert compress(tmp_path, "run", "--resume") == 0
    run = tmp_path / "run"
    assert (run / "metrics.jsonl").read_bytes() == (whole["plain"] / "metrics.jsonl").read_bytes()
    assert comparable(run) == comparable(whole["plain"])
    assert (run / "model" / "model.pt").read_bytes() == (whole["plain"] / "model" / "model.pt").read_bytes()


def test_a_kill_while_the_report_is_written_leaves_no_report_json_and_resumes(tmp_path, monkeypatch, whole):
    """report.json is what marks a finished run (`ensure_run`: sweeps and analyses read it and move on), so it comes
    last: a run killed while writing report.md or plotting had one, without its plot, and was never completed."""
    from theseus_zoo.training import report

    plot = report.plot_curves

    def dies(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "plot_curves", dies)
    assert compress(tmp_path) == 130
    assert not (tmp_path / "run" / "report.json").exists()
    monkeypatch.setattr(report, "plot_curves", plot)
    assert compress(tmp_path, "run", "--resume") == 0
    assert comparable(tmp_path / "run") == comparable(whole["plain"])
    assert (tmp_path / "run" / "curves.png").stat().st_size > 0


def test_a_checkpoint_written_before_a_recipe_field_existed_resumes(tmp_path, monkeypatch, whole):
    undo = dies_after_save(monkeypatch, 5)
    assert compress(tmp_path) == 130
    undo()
    path = tmp_path / "run" / CHECKPOINT
    state = read_checkpoint(path)
    del state["recipe"]["refine"]  # as theseus wrote it before recipes had a refine phase
    write_checkpoint(state, path)
    assert compress(tmp_path, "run", "--resume") == 0
    assert comparable(tmp_path / "run") == comparable(whole["plain"])


def test_an_early_stop_survives_a_kill_right_after_the_stopping_evaluation(tmp_path, monkeypatch, whole):
    records = [json.loads(line) for line in (whole["stopping"] / "metrics.jsonl").read_text().splitlines()]
    replacing = [r for r in records if r["phase"] == "replacing"]
    assert len(replacing) < 60  # it did stop early
    stopping_save = 4 + 1 + len(replacing) // 10  # the checkpoint of the evaluation that stopped it
    undo = dies_after_save(monkeypatch, stopping_save)
    overrides = {"patience": 1, "replacing": {"steps": 60, "eval_every": 10}}
    assert compress(tmp_path, overrides=overrides) == 130
    undo()
    assert compress(tmp_path, "run", "--resume", overrides=overrides) == 0
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == (whole["stopping"] / "metrics.jsonl").read_bytes()


def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "marker"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (tmp_path / "run").mkdir()
    payload = pickle.dumps({"done": {}, "x": Exploit()})
    import hashlib

    (tmp_path / "run" / "checkpoint.pt").write_bytes(hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    assert compress(tmp_path, "run", "--resume") == 2
    assert not marker.exists()
    error = capsys.readouterr().err
    assert "does not load as a plain checkpoint" in error and error.count("\n") == 1
    (tmp_path / "bare").mkdir()  # a bare torch.save-style pickle, without our header
    (tmp_path / "bare" / "checkpoint.pt").write_bytes(payload)
    assert compress(tmp_path, "bare", "--resume") == 2
    assert not marker.exists()


def test_a_finished_run_keeps_one_checkpoint_unless_asked_to_keep_both(tmp_path):
    assert compress(tmp_path, "one") == 0
    assert (tmp_path / "one" / "checkpoint.pt").exists() and not (tmp_path / "one" / "checkpoint.pt.previous").exists()
    assert compress(tmp_path, "one", "--resume") == 0  # a finished run resumes from its one checkpoint: nothing to do
    assert compress(tmp_path, "both", "--keep-checkpoints") == 0
    assert (tmp_path / "both" / "checkpoint.pt.previous").exists()


def test_a_damaged_checkpoint_is_refused_by_name_and_the_previous_one_is_kept(tmp_path, capsys):
    assert compress(tmp_path, "run", "--keep-checkpoints") == 0
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    data = bytearray(checkpoint.read_bytes())
    for offset in range(200, 264):
        data[offset] ^= 0xFF
    checkpoint.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt is damaged.*rename it"):
        read_checkpoint(checkpoint)
    assert read_checkpoint(tmp_path / "run" / "checkpoint.pt.previous")["done"]
    assert compress(tmp_path, "run", "--resume") == 2
    assert "checkpoint.pt.previous" in capsys.readouterr().err
    checkpoint.write_bytes(bytes(data[: len(data) // 2]))  # truncated
    with pytest.raises(CheckpointError, match="damaged"):
        read_checkpoint(checkpoint)


def test_checkpoints_round_trip_and_keep_the_last_two(tmp_path):
    path = tmp_path / "state.pt"
    write_checkpoint({"a": torch.arange(3)}, path)
    write_checkpoint({"a": torch.arange(4)}, path)
    assert read_checkpoint(path)["a"].tolist() == [0, 1, 2, 3]
    assert read_checkpoint(tmp_path / "state.pt.previous")["a"].tolist() == [0, 1, 2]


def test_a_non_finite_loss_stops_the_run_with_one_line_and_keeps_the_checkpoint(tmp_path, monkeypatch, capsys):
    criterion = toy.ToyTask.criterion
    calls = {"n": 0}

    def poisoned(self, logits, batch):
        calls["n"] += 1
        value = criterion(self, logits, batch)
        return value * float("nan") if calls["n"] == 25 else value

    monkeypatch.setattr(toy.ToyTask, "criterion", poisoned)
    assert compress(tmp_path) == 2
    error = capsys.readouterr().err
    assert "the loss of step 5 of replacing is nan" in error and error.count("\n") == 1
    state = read_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert state["current"]["phase"] == "replacing" and "predecessor" in state["done"]
    assert not (tmp_path / "run" / ".lock").exists()
    monkeypatch.setattr(toy.ToyTask, "criterion", criterion)
    assert compress(tmp_path, "run", "--resume") == 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"replacing": {"steps": 30, "lr": float("inf")}}, "replacing.lr must be a finite number"),
        ({"replacing": {"steps": 30, "lr": True}}, "replacing.lr must be a finite number"),
        ({"replacing": {"learning_rate": 1e-3}}, "unknown replacing fields ['learning_rate']; Phase fields: steps"),
        ({"replacing": 30}, "replacing must be an object of Phase fields"),
        ({"schedule_base": "0.3"}, "schedule_base must be a number in [0, 1]"),
        ({"options": "big"}, "options must be an object"),
        ({"options": {"num_layers": "3"}}, "toy option num_layers must be an integer, got '3'"),
        ({"options": {"num_layers": 2.5}}, "toy option num_layers must be an integer, got 2.5"),
        ({"options": {"width": -4}}, "toy option width must be >= 1, got -4"),
        ({"options": {"group_sizes": [8, 0, 0]}}, "group_sizes [8, 0, 0] must be 3 positive integers summing to 8"),
        ({"options": {"dropout": "0.1"}}, "toy option dropout must be a finite number"),
        ({"options": {"depth": 3}}, "unknown toy options ['depth']; known: num_blocks, width"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"seed": 2**40}, "seed must be an integer in [0, 2**31)"),
        ({"baselines": "kd"}, "baselines must be a list of names"),
        ({"patience": True}, "patience must be None or an integer"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys, overrides, message):
    assert compress(tmp_path, overrides=overrides) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_a_truncated_metrics_file_is_cut_to_its_last_complete_line_never_padded(tmp_path, monkeypatch, capsys):
    undo = dies_after_save(monkeypatch, 7)
    assert compress(tmp_path) == 130
    undo()
    metrics = tmp_path / "run" / "metrics.jsonl"
    data = metrics.read_bytes()
    metrics.write_bytes(data[: len(data) - 250])
    assert compress(tmp_path, "run", "--resume") == 0
    assert "cut to its last complete line" in capsys.readouterr().err
    repaired = metrics.read_bytes()
    assert b"\x00" not in repaired
    for line in repaired.decode().splitlines():
        json.loads(line)
    os.remove(metrics)
    write = tmp_path / "again"
    assert compress(tmp_path, "again") == 0 and (write / "metrics.jsonl").exists()


def test_a_second_writer_is_refused_with_the_pid_of_the_first(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text("1\n")  # pid 1 is alive
    assert compress(tmp_path) == 2
    assert "another theseus process (pid 1)" in capsys.readouterr().err
    (out / ".lock").write_text("999999999\n")  # no such process: a stale lock is taken over
    assert compress(tmp_path) == 0 and not (out / ".lock").exists()


@pytest.mark.parametrize("name", ["metrics.jsonl", "curves.png", "search.png"])
def test_a_fresh_run_never_appends_to_old_files_nor_overwrites_them_unasked(tmp_path, capsys, name):
    """A plot of the user's (or an earlier run's) was deleted without a word, and an old search.png was announced
    as this run's."""
    out = tmp_path / "run"
    out.mkdir()
    (out / name).write_text("old\n")
    assert compress(tmp_path) == 2
    assert f"earlier run's results ({name})" in capsys.readouterr().err
    assert (out / name).read_text() == "old\n"


def test_an_interrupt_before_the_first_checkpoint_does_not_advise_resume(tmp_path, monkeypatch, capsys):
    def interrupted(state, path):
        raise KeyboardInterrupt

    monkeypatch.setattr(session, "atomic_save", interrupted)
    assert compress(tmp_path) == 130
    assert "before the first checkpoint: nothing to resume" in capsys.readouterr().err
    monkeypatch.undo()
    assert compress(tmp_path) == 0  # rerun as it was


def test_a_finished_run_whose_checkpoint_was_deleted_is_not_overwritten_without_a_word(tmp_path, capsys):
    assert compress(tmp_path) == 0
    out = tmp_path / "run"
    (out / CHECKPOINT).unlink()
    (out / f"{CHECKPOINT}.previous").unlink(missing_ok=True)
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    capsys.readouterr()
    assert compress(tmp_path) == 2
    error = capsys.readouterr().err.strip()
    assert "report.json, report.md, metrics.jsonl, model" in error and len(error.splitlines()) == 1
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


def test_an_out_that_is_a_file_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "run").write_text("not a directory")
    assert compress(tmp_path) == 2
    assert "is a file" in capsys.readouterr().err
