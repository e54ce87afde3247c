"""`theseus_zoo.training.run_directory`: the lock names its holder by pid and start time, so that a pid reused by
another process after a crash does not hold it forever, and a lock of a pid alone still reads as before."""

import os
from pathlib import Path

import pytest

from theseus_zoo.training.run_directory import RunError, RunLock, start_time

PROC = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="start times come from /proc")


@PROC
def test_the_lock_records_the_pid_and_start_time_and_release_removes_it(tmp_path):
    lock = RunLock(tmp_path)
    assert (tmp_path / ".lock").read_text() == f"{os.getpid()} {start_time(os.getpid())}\n"
    lock.release()
    assert not (tmp_path / ".lock").exists()


@PROC
def test_a_live_pid_is_held_only_with_the_start_time_it_was_locked_with(tmp_path):
    other = os.getppid()  # alive while the test runs, and not this process
    (tmp_path / ".lock").write_text(f"{other} {start_time(other)}\n")
    with pytest.raises(RunError, match=f"another theseus process \\(pid {other}\\)"):
        RunLock(tmp_path)
    (tmp_path / ".lock").write_text(f"{other} {int(start_time(other)) + 1}\n")  # the pid reused by a later process
    RunLock(tmp_path).release()
    assert not (tmp_path / ".lock").exists()


def test_a_lock_of_a_pid_alone_is_held_while_the_pid_runs(tmp_path):
    other = os.getppid()
    (tmp_path / ".lock").write_text(f"{other}\n")
    with pytest.raises(RunError, match=f"pid {other}\\)"):
        RunLock(tmp_path)
    (tmp_path / ".lock").write_text("999999999\n")  # no such process
    RunLock(tmp_path).release()
    assert not (tmp_path / ".lock").exists()


def test_without_proc_the_lock_is_a_pid_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(Path, "read_text", _no_proc(Path.read_text))
    assert start_time(os.getpid()) is None
    lock = RunLock(tmp_path)
    assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
    lock.release()
    other = os.getppid()  # a start time recorded elsewhere cannot be checked here: the live pid holds it
    (tmp_path / ".lock").write_text(f"{other} 12345\n")
    with pytest.raises(RunError, match=f"pid {other}\\)"):
        RunLock(tmp_path)


def test_start_time_reads_past_a_command_name_with_spaces_and_parentheses(monkeypatch):
    stat = "42 (a b) (c) S " + " ".join(str(field) for field in range(4, 30)) + "\n"  # field 22 reads "22"
    monkeypatch.setattr(Path, "read_text", lambda path, *args, **kwargs: stat)
    assert start_time(42) == "22"


def _no_proc(read_text):
    def read(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(path)
        return read_text(path, *args, **kwargs)

    return read


def test_a_run_recorded_before_descriptions_carried_the_datas_fingerprint_resumes_and_a_changed_one_does_not():
    from theseus_zoo.recipes import get_recipe
    from theseus_zoo.training.run_directory import data_changed, recipe_changes

    recipe = get_recipe("minilm-rotten-tomatoes")

    def described(text):
        return recipe.with_overrides({"description": f"Recipe x on the user's data. {text}"})

    before = described("reviews.csv: 60 rows").to_dict()  # recorded by an older version
    now = described("reviews.csv (sha256 0123456789ab): 60 rows")
    assert recipe_changes(before, now) is None and not data_changed(before, now)
    changed = described("reviews.csv (sha256 fedcba987654): 60 rows")
    assert recipe_changes(now.to_dict(), changed) is not None and data_changed(now.to_dict(), changed)
    assert not data_changed(now.to_dict(), now.with_overrides({"seed": 3}))
