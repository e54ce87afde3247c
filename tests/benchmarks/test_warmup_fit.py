"""`benchmarks.warmup_fit`: the successors a run's warm-up kept, rebuilt from its directory and measured."""

import json

import pytest

from benchmarks import warmup_fit
from theseus_zoo import cli
from theseus_zoo.training.checkpoints import read_checkpoint

TINY = {
    "predecessor": {"steps": 30, "eval_every": 30},
    "replacing": {"steps": 100, "eval_every": 50},
    "steps_to_one": 30,
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("warmup-fit")
    (root / "tiny.json").write_text(json.dumps({**TINY, "warmup_fraction": 0.5}))
    args = ["compress", "--recipe", "toy", "--config", str(root / "tiny.json"), "--no-progress"]
    assert cli.main([*args, "--methods", "kd,theseus+warmup", "--out", str(root / "run")]) == 0
    return root / "run"


def test_the_rebuilt_model_scores_what_the_run_kept_and_warm_up_fitted_the_groups(run, tmp_path):
    warmup_fit.main([str(run), "--batches", "2", "--name", "toy", "--out", str(tmp_path)])
    (result,) = json.loads((tmp_path / "warmup-fit-toy.json").read_text())["runs"]
    kept = read_checkpoint(run / "checkpoint.pt")["done"]["warmup"]  # the only variant: stages unsuffixed
    assert result["method"] == "theseus+warmup" and result["warmup_steps"] == kept["steps"] == 50
    assert result["dev_every_successor"] == kept["best_metric"]  # the same model as the run's, rebuilt
    before, after = result["relative_error_before"], result["relative_error_after"]
    assert len(before) == len(after) == len(result["sites"]) > 1
    assert all(error >= 0 for error in before + after) and sum(after) < sum(before)
    assert "| group | before | after |" in (tmp_path / "warmup-fit-toy.md").read_text()


def test_a_run_without_warm_up_is_refused_in_one_line(tmp_path):
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    args = ["compress", "--recipe", "toy", "--config", str(tmp_path / "tiny.json"), "--no-progress"]
    assert cli.main([*args, "--methods", "theseus+kd", "--out", str(tmp_path / "run")]) == 0
    with pytest.raises(SystemExit, match="trained no \\+warmup variant"):
        warmup_fit.main([str(tmp_path / "run"), "--out", str(tmp_path)])
