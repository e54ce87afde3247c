"""`theseus sweep` and `--predecessor-from` on the toy recipe."""

import json

import pytest

from theseus_zoo import cli
from theseus_zoo.training import sweep

TINY = {
    "predecessor": {"steps": 20, "eval_every": 10},
    "replacing": {"steps": 30, "eval_every": 10},
    "steps_to_one": 10,
    "patience": None,
}


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def test_grid_parsing_nesting_and_product():
    grid = sweep.parse_grid(["replacing.lr=1e-5,2e-5", "schedule_base=0.1", "options.init=first,last"])
    assert grid == {"replacing.lr": [1e-5, 2e-5], "schedule_base": [0.1], "options.init": ["first", "last"]}
    points = sweep.points(grid)
    assert len(points) == 4 and points[1] == {"replacing.lr": 1e-5, "schedule_base": 0.1, "options.init": "last"}
    assert sweep.overrides_of(points[1]) == {
        "replacing": {"lr": 1e-5},
        "schedule_base": 0.1,
        "options": {"init": "last"},
    }
    for bad in ("lr", "=1", "lr="):
        with pytest.raises(ValueError, match="FIELD=VALUE"):
            sweep.parse_grid([bad])
    with pytest.raises(ValueError, match="twice"):
        sweep.parse_grid(["a=1", "a=2"])


def test_a_sweep_fine_tunes_the_predecessor_once_skips_invalid_points_and_picks_the_best_on_dev(
    tmp_path, config, capsys
):
    out = tmp_path / "sweep"
    grid = ["--grid", "replacing.lr=0.001,-1", "--grid", "steps_to_one=10,40"]  # 40 > replacing.steps=30
    args = ["sweep", "--recipe", "toy", "--config", config, "--out", str(out), "--no-progress", *grid]
    assert cli.main(args) == 0
    summary = json.loads((out / "sweep.json").read_text())
    skipped = [row for row in summary["rows"] if "skipped" in row]
    finished = [row for row in summary["rows"] if "dev" in row]
    assert len(skipped) == 2 and all(row["point"]["replacing.lr"] == -1 for row in skipped)
    assert "skipping grid point" in capsys.readouterr().err  # said, not silently dropped
    assert len(finished) == 2 and summary["best"] == max(finished, key=lambda row: row["dev"])
    # p = 1 at step 40 of a 30-step phase: the phase is extended, keeping the recipe's 20 steps at p = 1
    assert finished[1]["point"]["steps_to_one"] == 40 and "extended to 60" in finished[1]["note"]
    extended = json.loads((tmp_path / finished[1]["directory"] / "report.json").read_text())
    assert extended["phases"]["replacing"]["steps"] == 60 and "extended to 60" in (out / "sweep.md").read_text()
    trained = [
        any(
            json.loads(line)["phase"] == "predecessor"
            for line in (tmp_path / row["directory"] / "metrics.jsonl").open()
        )
        for row in finished
    ]
    assert trained == [True, False]  # the second point took the first point's predecessor
    assert finished[0]["predecessor_test"] == finished[1]["predecessor_test"]
    report = json.loads((out / "point-00" / "report.json").read_text())
    assert set(report["models"]) == {"predecessor", "theseus"}  # the sweep skips the baselines
    assert "best on dev" in (out / "sweep.md").read_text()
    assert cli.main(args) == 2  # the sweep exists: --resume or another --out
    assert cli.main([*args, "--resume"]) == 0


def test_predecessor_from_takes_a_finished_predecessor_of_the_same_recipe_only(tmp_path, config, capsys):
    base = ["compress", "--recipe", "toy", "--config", config, "--no-progress"]
    assert cli.main([*base, "--out", str(tmp_path / "first")]) == 0
    assert cli.main([*base, "--out", str(tmp_path / "second"), "--predecessor-from", str(tmp_path / "first")]) == 0
    first, second = (json.loads((tmp_path / run / "report.json").read_text()) for run in ("first", "second"))
    assert first["models"]["predecessor"] == second["models"]["predecessor"]
    assert "predecessor" not in (tmp_path / "second" / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert json.loads((tmp_path / "second" / "report.json").read_text())["phases"]["predecessor"]["from"] == str(
        tmp_path / "first"
    )
    wider = tmp_path / "wider.json"
    wider.write_text(json.dumps({**TINY, "options": {"width": 32}}))
    other = [
        *base,
        "--config",
        str(wider),
        "--out",
        str(tmp_path / "third"),
        "--predecessor-from",
        str(tmp_path / "first"),
    ]
    assert cli.main(other) == 2
    assert "has another options (options.width: 64 there, 32 here)" in capsys.readouterr().err  # what differs
    deeper = tmp_path / "deeper.json"  # num_layers only shapes the successor: the predecessor is the same
    deeper.write_text(json.dumps({**TINY, "options": {"num_layers": 2}}))
    other = [
        *base,
        "--config",
        str(deeper),
        "--out",
        str(tmp_path / "fourth"),
        "--predecessor-from",
        str(tmp_path / "first"),
    ]
    assert cli.main(other) == 0


def test_a_borrowed_predecessor_goes_to_the_sessions_device_as_a_trained_one_does(tmp_path, config, monkeypatch):
    # A predecessor fine-tuned in the run reaches the device through the phase's preparation; one taken from
    # --predecessor-from skips that phase and must be moved all the same (on a GPU its methods and the report's
    # timing would otherwise run a CPU model on CUDA batches).
    from torch import nn

    from theseus_zoo.tasks.toy import ToyTask

    built, moved = [], []
    build = ToyTask.build_predecessor
    monkeypatch.setattr(ToyTask, "build_predecessor", lambda self: built.append(build(self)) or built[-1])
    to = nn.Module.to
    monkeypatch.setattr(
        nn.Module, "to", lambda self, *args, **kwargs: moved.append((id(self), args)) or to(self, *args, **kwargs)
    )
    base = ["compress", "--recipe", "toy", "--config", config, "--no-progress", "--methods", "theseus"]
    assert cli.main([*base, "--out", str(tmp_path / "first")]) == 0
    built.clear(), moved.clear()
    assert cli.main([*base, "--out", str(tmp_path / "second"), "--predecessor-from", str(tmp_path / "first")]) == 0
    used = built[-1]  # the run builds one for the budget check only when there is a budget: the last is the run's
    assert any(identity == id(used) and str(args[0]) == "cpu" for identity, args in moved if args)
