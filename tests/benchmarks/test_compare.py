"""`benchmarks.compare` end to end on the toy recipe: lr picked on dev per method, seeds, paired differences."""

import json
import shutil
import threading

import pytest

from benchmarks import compare
from theseus_zoo import cli
from theseus_zoo.training.runners import CompressProcess


@pytest.fixture(autouse=True)
def runs_in_this_process(monkeypatch):
    """Each ``theseus compress`` of these tests runs through `theseus_zoo.cli.main` in this process, one at a time,
    with the command line `CompressProcess` would start (a toy run is a second of work behind seconds of imports);
    tests/benchmarks/test_recipes.py runs them as processes."""
    one_at_a_time = threading.Lock()

    def run(self, out, *, resume, predecessor_from):
        with one_at_a_time:
            if cli.main(self.cli_arguments(out, resume=resume, predecessor_from=predecessor_from)) != 0:
                raise RuntimeError(f"{self.name or out} failed")

    monkeypatch.setattr(CompressProcess, "__call__", run)


@pytest.mark.slow
def test_each_method_gets_its_best_dev_lr_and_every_seed_a_paired_difference(tmp_path):
    config = tmp_path / "tiny.json"
    tiny = {"predecessor": {"steps": 10, "eval_every": 5}, "replacing": {"steps": 10, "eval_every": 5}}
    config.write_text(json.dumps({**tiny, "steps_to_one": 5, "patience": None, "options": {"num_blocks": 4}}))
    # 1 predecessor + 2 methods x 2 learning rates on seed 0, then the second seed at each method's chosen rate
    args = ["--recipe", "toy", "--methods", "theseus", "truncated", "--lrs", "1e-3", "1e-2", "--seeds", "0", "1"]
    args += ["--config", str(config), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--jobs", "2"]
    compare.main(args)
    results = json.loads((tmp_path / "out" / "compare-toy-tiny.json").read_text())
    for method in ("theseus", "truncated"):
        dev = {lr: results["tuning_dev"][f"{method} lr={lr:g}"] for lr in (1e-3, 1e-2)}
        assert results["chosen_lr"][method] == max(dev, key=dev.get)
    predecessors = {
        json.dumps(report["models"]["predecessor"]["test"])
        for by_seed in results["reports"].values()
        for report in by_seed.values()
    }
    assert len(predecessors) == 1  # one fine-tuned predecessor shared by every run
    difference = results["comparisons"]["truncated"]
    theseus = results["reports"]["theseus"]
    truncated = results["reports"]["truncated"]
    for seed in ("0", "1"):
        expected = (
            theseus[seed]["models"]["theseus"]["test"]["accuracy"]
            - truncated[seed]["models"]["baseline:truncated"]["test"]["accuracy"]
        )
        assert abs(difference["per_seed"][seed] - expected) < 1e-6  # JSON keys are strings
    assert difference["low"] <= difference["mean"] <= difference["high"]
    assert "theseus − truncated" in (tmp_path / "out" / "compare-toy-tiny.md").read_text()


@pytest.mark.slow
def test_a_pinned_learning_rate_replaces_the_grid_for_its_method_only(tmp_path):
    config = tmp_path / "tiny.json"
    tiny = {"predecessor": {"steps": 4, "eval_every": 2}, "replacing": {"steps": 4, "eval_every": 2}}
    config.write_text(json.dumps({**tiny, "steps_to_one": 2, "patience": None, "options": {"num_blocks": 4}}))
    args = ["--recipe", "toy", "--methods", "theseus", "truncated", "--lrs", "1e-3", "1e-2", "--seeds", "0"]
    args += ["--lr", "truncated=3e-3", "--config", str(config), "--runs", str(tmp_path / "runs")]
    compare.main([*args, "--out", str(tmp_path / "out"), "--jobs", "1"])
    results = json.loads((tmp_path / "out" / "compare-toy-tiny.json").read_text())
    assert results["chosen_lr"]["truncated"] == 3e-3
    assert set(results["tuning_dev"]) == {"theseus lr=0.001", "theseus lr=0.01", "truncated lr=0.003"}
    assert sorted(path.name for path in (tmp_path / "runs" / "toy" / "tiny" / "truncated").iterdir()) == ["lr0.003"]
    assert "truncated's pinned at 0.003" in (tmp_path / "out" / "compare-toy-tiny.md").read_text()

    # the same --config file, edited: its finished run directories are of another recipe now, and are refused
    config.write_text(json.dumps({**tiny, "steps_to_one": 3, "patience": None, "options": {"num_blocks": 4}}))
    with pytest.raises(SystemExit, match="holds a finished run of another recipe"):
        compare.main([*args, "--out", str(tmp_path / "out"), "--jobs", "1"])


@pytest.mark.slow
def test_a_rate_whose_run_fails_is_left_out_of_the_grid(tmp_path, monkeypatch, capsys):
    config = tmp_path / "tiny.json"
    tiny = {"predecessor": {"steps": 4, "eval_every": 2}, "replacing": {"steps": 4, "eval_every": 2}}
    config.write_text(json.dumps({**tiny, "steps_to_one": 2, "patience": None, "options": {"num_blocks": 4}}))
    run_seed = compare.run_seed

    def diverging_at_high_rates(recipe, seed, out, *args):
        if "lr0.01" in str(out):
            raise RuntimeError(f"seed {seed} failed (exit 1)")
        return run_seed(recipe, seed, out, *args)

    monkeypatch.setattr(compare, "run_seed", diverging_at_high_rates)
    args = ["--recipe", "toy", "--methods", "theseus", "truncated", "--lrs", "1e-3", "1e-2", "--seeds", "0"]
    args += ["--config", str(config), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    compare.main([*args, "--jobs", "1"])
    results = json.loads((tmp_path / "out" / "compare-toy-tiny.json").read_text())
    assert results["chosen_lr"] == {"theseus": 1e-3, "truncated": 1e-3}
    assert results["tuning_dev"]["theseus lr=0.01"] is None
    assert "| theseus | **" in (tmp_path / "out" / "compare-toy-tiny.md").read_text()
    assert "| failed |" in (tmp_path / "out" / "compare-toy-tiny.md").read_text()
    assert "theseus at lr 0.01 failed, left out of its grid" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="failed at every learning rate"):
        compare.main([*args[:-2], "--out", str(tmp_path / "out2"), "--lrs", "1e-2", "--jobs", "1"])


@pytest.mark.parametrize(
    ("pin", "message"),
    [("kd=1e-4", "not among --methods"), ("nope=1e-4", "unknown method 'nope'"), ("theseus=fast", "with a number")],
)
def test_a_bad_pinned_learning_rate_ends_before_any_run(tmp_path, capsys, pin, message):
    with pytest.raises(SystemExit):
        compare.main(["--recipe", "toy", "--methods", "theseus", "--lr", pin, "--runs", str(tmp_path / "runs")])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_archived_runs_are_kept_across_machines_unless_their_recipe_or_predecessor_differs(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    tiny = {"predecessor": {"steps": 6, "eval_every": 3}, "replacing": {"steps": 6, "eval_every": 3}}
    config.write_text(json.dumps({**tiny, "steps_to_one": 3, "patience": None, "options": {"num_blocks": 4}}))
    runs, out = tmp_path / "runs", tmp_path / "out"
    args = ["--recipe", "toy", "--methods", "theseus", "truncated", "--lrs", "1e-2", "--seeds", "0", "1"]
    args += ["--config", str(config), "--runs", str(runs), "--out", str(out), "--jobs", "1"]
    compare.main(args)
    archive = out / "toy" / "tiny"  # a --config is a variant of its own
    for method in ("theseus", "truncated"):
        for seed in (0, 1):
            assert (archive / method / "lr0.01" / f"seed{seed}" / "report.json").exists()
            assert (archive / method / "lr0.01" / f"seed{seed}" / "report.md").exists()
    assert (out / "compare-toy-tiny.png").exists()
    assert "![per seed and paired differences](compare-toy-tiny.png)" in (out / "compare-toy-tiny.md").read_text()

    shutil.rmtree(runs)  # a new machine: the run directories are gone, the committed archive is not
    other_predecessor = archive / "truncated" / "lr0.01" / "seed0" / "report.json"
    report = json.loads(other_predecessor.read_text())
    report["models"]["predecessor"]["test_predictions"][0] += 1
    other_predecessor.write_text(json.dumps(report))
    other_recipe = archive / "theseus" / "lr0.01" / "seed1" / "report.json"
    report = json.loads(other_recipe.read_text())
    report["recipe"]["replacing"]["steps"] = 7
    other_recipe.write_text(json.dumps(report))
    compare.main(args)
    results = json.loads((out / "compare-toy-tiny.json").read_text())
    assert results["archived"] == ["theseus/lr0.01/seed0", "truncated/lr0.01/seed1"]
    errors = capsys.readouterr().err
    assert f"{other_predecessor} comes from another predecessor: running it again" in errors
    assert f"{other_recipe} was made with another recipe: running it again" in errors
    assert not (runs / "toy" / "tiny" / "theseus" / "lr0.01" / "seed0").exists()
    shared = results["reports"]["theseus"]["0"]["models"]["predecessor"]["test_predictions"]
    for rerun in ("truncated/lr0.01/seed0", "theseus/lr0.01/seed1"):  # run again, and archived again
        assert (runs / "toy" / "tiny" / rerun / "report.json").exists()
        archived = json.loads((archive / rerun / "report.json").read_text())
        assert archived["models"]["predecessor"]["test_predictions"] == shared
        assert archived["recipe"]["replacing"]["steps"] == 6


def test_reports_of_different_predecessors_are_not_paired():
    def report(predictions):
        return {"models": {"predecessor": {"test": {"accuracy": 0.5}, "test_predictions": predictions}}}

    compare.check_one_predecessor({"a": report([0, 1]), "b": report([0, 1 + 1e-6])})  # the last bits: the same one
    with pytest.raises(ValueError, match="another predecessor than a's and cannot be paired with it: c"):
        compare.check_one_predecessor({"a": report([0, 1]), "b": report([0, 1]), "c": report([1, 1])})
