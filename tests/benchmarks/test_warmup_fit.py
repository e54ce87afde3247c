"""`benchmarks.warmup_fit`: the successors a run's warm-up kept, rebuilt from its directory and measured."""

import json

import pytest
import torch
from torch import nn

from benchmarks import warmup_fit
from theseus_zoo import cli
from theseus_zoo.training.checkpoints import read_checkpoint
from theseus_zoo.training.methods import BlockwiseWarmup

TINY = {
    "predecessor": {"steps": 30, "eval_every": 30},
    "replacing": {"steps": 100, "eval_every": 50},
    "steps_to_one": 30,
}


def compress(root, methods):
    (root / "tiny.json").write_text(json.dumps({**TINY, "warmup_fraction": 0.5}))
    args = ["compress", "--recipe", "toy", "--config", str(root / "tiny.json"), "--no-progress"]
    assert cli.main([*args, "--methods", methods, "--out", str(root / "run")]) == 0
    return root / "run"


@pytest.mark.parametrize(
    ("methods", "stage"),
    [
        ("kd,theseus+warmup", "warmup"),
        pytest.param("theseus,theseus+warmup", "warmup:theseus+warmup", marks=pytest.mark.slow),
    ],
)
def test_the_rebuilt_model_scores_what_the_run_kept_and_warm_up_fitted_the_groups(tmp_path, methods, stage):
    run = compress(tmp_path, methods)
    warmup_fit.main([str(run), "--batches", "2", "--name", "toy", "--out", str(tmp_path)])
    (result,) = json.loads((tmp_path / "warmup-fit-toy.json").read_text())["runs"]
    kept = read_checkpoint(run / "checkpoint.pt")["done"][stage]
    assert result["method"] == "theseus+warmup" and result["warmup_steps"] == kept["steps"] == 50
    assert result["dev_every_successor"] == kept["best_metric"]  # the same model as the run's, rebuilt
    before, after = result["relative_error_before"], result["relative_error_after"]
    assert len(before) == len(after) == len(result["sites"]) > 1
    assert all(error >= 0 for error in before + after) and sum(after) < sum(before)
    assert "| group | before | after |" in (tmp_path / "warmup-fit-toy.md").read_text()


class Stem(nn.Module):
    """Two batch-normed layers, the second a group to replace: running statistics that a training-mode pass moves."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), nn.Linear(4, 4), nn.BatchNorm1d(4)
        )

    def forward(self, x):
        return self.layers(x)


class StemTask:
    def logits(self, model, batch):
        return model(batch)


def test_measuring_moves_no_statistic():
    import theseus_core as th

    model = Stem().train()
    theseus = th.replace_(
        model, [th.ModuleSpec("layers[1:3]", successor=lambda group: nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))]
    )
    before = {key: value.clone() for key, value in model.state_dict().items()}
    warmup_fit.relative_errors(BlockwiseWarmup(StemTask(), theseus), model, [torch.randn(8, 4) * 3 + 1])
    assert all(torch.equal(value, before[key]) for key, value in model.state_dict().items())


def test_a_run_without_warm_up_is_refused_in_one_line(tmp_path):
    run = compress(tmp_path, "theseus+kd")
    with pytest.raises(SystemExit, match="trained no \\+warmup variant"):
        warmup_fit.main([str(run), "--out", str(tmp_path)])
