"""`benchmarks.compare` end to end on the toy recipe: lr picked on dev per method, seeds, paired differences."""

import json

from benchmarks import compare


def test_each_method_gets_its_best_dev_lr_and_every_seed_a_paired_difference(tmp_path):
    config = tmp_path / "tiny.json"
    tiny = {"predecessor": {"steps": 10, "eval_every": 5}, "replacing": {"steps": 10, "eval_every": 5}}
    config.write_text(json.dumps({**tiny, "steps_to_one": 5, "patience": None, "options": {"num_blocks": 4}}))
    # 1 predecessor + 2 methods x 2 learning rates on seed 0, then the second seed at each method's chosen rate
    args = ["--recipe", "toy", "--methods", "theseus", "truncated", "--lrs", "1e-3", "1e-2", "--seeds", "0", "1"]
    args += ["--config", str(config), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--jobs", "2"]
    compare.main(args)
    results = json.loads((tmp_path / "out" / "compare-toy.json").read_text())
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
    assert "theseus − truncated" in (tmp_path / "out" / "compare-toy.md").read_text()
