"""`benchmarks.llm_seeds`: perplexity ratios over seeds, paired on test sequences, on made-up reports."""

import json
import math

import pytest

from benchmarks import llm_seeds


def write_report(path, seed, theseus, truncated, predecessor=3.0, sequences=50):
    models = {"predecessor": predecessor, "theseus": theseus, "baseline:truncated": truncated}
    report = {
        "metric": "inverse_perplexity",
        "recipe": {"seed": seed},
        "test_labels": [127.0] * sequences,
        "models": {
            name: {"test_predictions": [nll + 0.01 * (i % 5) for i in range(sequences)]} for name, nll in models.items()
        },
    }
    path.mkdir(parents=True)
    (path / "report.json").write_text(json.dumps(report))
    return path


def test_the_ratio_over_seeds_is_the_geometric_mean_of_the_per_seed_ratios(tmp_path):
    a = [write_report(tmp_path / f"a{seed}", seed, theseus=4.0 + 0.1 * seed, truncated=9.0) for seed in (0, 1)]
    b = [write_report(tmp_path / f"b{seed}", seed, theseus=9.0, truncated=3.8) for seed in (0, 1)]
    result = llm_seeds.compare(list(zip(a, b, strict=True)), "theseus", "baseline:truncated")
    assert [seed["ratio"] for seed in result["seeds"]] == pytest.approx([math.exp(0.2), math.exp(0.3)])
    assert result["ratio"] == pytest.approx(math.exp(0.25))
    assert result["low"] <= result["ratio"] <= result["high"]  # per-sequence differences are constant here
    assert result["ratio_min"] == pytest.approx(math.exp(0.2)) and result["ratio_max"] == pytest.approx(math.exp(0.3))


def test_runs_of_another_predecessor_or_metric_are_refused(tmp_path):
    a = write_report(tmp_path / "a", 0, theseus=4.0, truncated=9.0)
    other = write_report(tmp_path / "b", 0, theseus=4.0, truncated=3.8, predecessor=3.1)
    with pytest.raises(ValueError, match="do not share the test sequences and predecessor"):
        llm_seeds.compare([(a, other)], "theseus", "baseline:truncated")
    with pytest.raises(ValueError, match="has no model 'baseline:kd'"):
        llm_seeds.compare([(a, a)], "theseus", "baseline:kd")


def test_unpaired_run_counts_fail_before_reading(tmp_path, capsys):
    a = write_report(tmp_path / "a", 0, theseus=4.0, truncated=9.0)
    with pytest.raises(SystemExit):
        llm_seeds.main(["--a", str(a), str(a), "--b", str(a), "--out", str(tmp_path)])
    assert "pair them one seed each" in capsys.readouterr().err
