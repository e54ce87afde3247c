"""`theseus analyze` (and an `--out` of `sweep`): bad arguments end in one line before any run trains or writes."""

import json

import pytest

from theseus_zoo import cli

TINY = {
    "predecessor": {"steps": 10, "eval_every": 10},
    "replacing": {"steps": 10, "eval_every": 10},
    "steps_to_one": 5,
}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # the constant schedule's rate was checked only when its run came, after the curriculum's had trained
        (["--analysis", "schedules", "--constant-rate", "2"], "schedule_base must be a number in [0, 1], got 2.0"),
        # 0 and -1 were each trained as a 1-step run, the same directory reported twice
        (["--analysis", "budget", "--budgets", "0", "-1"], "each a number > 0, got 0.0"),
        (["--analysis", "budget", "--budgets", "1", "1.01"], "two of them give 10 replacing steps"),
    ],
)
def test_bad_arguments_are_refused_before_any_run(tmp_path, capsys, extra, message):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "analysis"
    argv = ["analyze", "--recipe", "toy", "--config", str(config), "--out", str(out), "--no-progress", *extra]
    assert cli.main(argv) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(
    "command", [["analyze", "--analysis", "sensitivity"], ["sweep", "--grid", "replacing.lr=1e-3"]]
)
def test_an_out_that_is_a_file_is_refused_in_one_line(tmp_path, capsys, command):
    """``analyze`` listed it to see whether it held an analysis: NotADirectoryError's traceback."""
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    assert cli.main([command[0], "--recipe", "toy", *command[1:], "--out", str(taken)]) == 2
    assert capsys.readouterr().err == f"theseus: error: --out {taken} is a file; give a directory\n"
    assert taken.read_text() == "mine"
