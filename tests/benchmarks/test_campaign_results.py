"""benchmarks.campaign_results on an archive of made-up reports: choices, paired differences, rank correlations."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import campaign_results
from benchmarks.campaign import Campaign, CampaignRun
from benchmarks.compare import phase_of

LABELS = [0, 1] * 10
METHODS = {
    "theseus": ["lr1e-3", "lr2e-3", "lr4e-3"],
    "theseus+warmup+kd": ["lr1e-3", "lr2e-3", "lr4e-3"],
    "kd": ["lr1e-3", "lr2e-3", "lr4e-3"],
    "truncated": ["lr1e-3", "lr2e-3", "lr4e-3"],
}
BEST = {"theseus": "lr2e-3", "theseus+warmup+kd": "lr2e-3", "kd": "lr2e-3", "truncated": "lr1e-3"}
CORRECT = {"theseus": 14, "theseus+warmup+kd": 16, "kd": 15, "truncated": 12}  # of 20 test examples, at BEST


def made_up_report(method, setting, seed):
    """Dev: 0.8 + CORRECT / 100 at the method's best setting, 0.8 elsewhere. Test: CORRECT[method] of 20 right at
    its best setting (one more on odd seeds), 10 elsewhere."""
    key = campaign_results.report_key(method)
    chosen, _, matched = setting.partition("-matched")  # a compute-matched run: one fewer right than at its choice
    right = CORRECT[method] + seed % 2 - bool(matched) if chosen == BEST[method] else 10
    predictions = [label if index < right else 1 - label for index, label in enumerate(LABELS)]
    phases = {"predecessor": {"seconds": 5.0, "best_metric": 0.95}}
    phases[phase_of(method)] = {
        "seconds": 10.0,
        "best_metric": 0.8 + CORRECT[method] / 100 if setting == BEST[method] else 0.8,
    }
    return {
        "recipe": {"methods": [method]},
        "metric": "accuracy",
        "models": {
            "predecessor": {"test": {"accuracy": 0.9}, "test_predictions": LABELS},
            key: {"test": {"accuracy": right / 20}, "test_predictions": predictions},
        },
        "test_labels": LABELS,
        "phases": phases,
    }


def finish(campaign):
    """Writes a made-up report for every run the campaign knows, until it knows no more."""
    while missing := [run for run in campaign.runs() if not campaign.done(run)]:  # grid, extension, final seeds
        for run in missing:
            directory = campaign.archive / run.path
            directory.mkdir(parents=True)
            (directory / "report.json").write_text(json.dumps(made_up_report(run.method, run.setting, run.seed)))


@pytest.fixture
def campaign(tmp_path):
    definition = {
        "cells": {"cell": {"recipe": "toy", "compute_matched": ["kd"]}},
        "methods": {
            method: {s: {"replacing": {"lr": float(s[2:])}} for s in settings} for method, settings in METHODS.items()
        },
        "grid_seeds": [0, 1],
        "final_seeds": [0, 1, 2, 3],
        "edge_extensions": 1,
    }
    (tmp_path / "made-up.json").write_text(json.dumps(definition))
    campaign = Campaign.load(tmp_path / "made-up.json", archive=tmp_path / "archive")
    finish(campaign)
    assert all(campaign.done(run) for run in campaign.runs())
    return campaign


def test_each_method_at_its_dev_choice_against_the_others_paired_by_seed(campaign):
    summary = campaign_results.summarize_cell(campaign, "cell")
    assert summary["complete"] and summary["seeds"] == [0, 1, 2, 3]
    assert {method: entry["setting"] for method, entry in summary["methods"].items()} == BEST
    assert (
        not summary["methods"]["truncated"]["at_edge"] or "lr5e-4" in summary["methods"]["truncated"]["dev_by_setting"]
    )
    assert summary["best_theseus"] == "theseus+warmup+kd" and summary["best_alternative"] == "kd"
    # 16 vs 15 right of 20 on every seed (both one more on odd seeds): +5 points each seed
    headline = summary["headline"]
    assert headline["per_seed"] == pytest.approx([5.0] * 4) and headline["mean"] == pytest.approx(5.0)
    versus_truncated = summary["comparisons"]["theseus+warmup+kd − truncated"]["per_seed"]
    assert versus_truncated == pytest.approx([20.0] * 4)
    assert "theseus − kd" in summary["comparisons"] and "theseus+warmup+kd − theseus" in summary["comparisons"]
    assert "theseus − theseus+warmup+kd" not in summary["comparisons"]
    # dev ranks the settings as test does: a perfect correlation (ties shared), per method and pooled
    assert summary["methods"]["kd"]["dev_test_rank_correlation"] == pytest.approx(1.0)
    assert summary["dev_test_rank_correlation"] > 0.9


def test_compute_matched_runs_follow_the_measured_run_costs_of_the_chosen_settings(campaign):
    assert campaign.wants_run_cost("cell") and campaign.matched_setting("cell", "kd") is None
    costs = {
        "reference": "theseus+warmup+kd",
        "methods": {
            "theseus+warmup+kd": {"setting": "lr2e-3", "matched_steps": 16},
            "kd": {"setting": "lr2e-3", "matched_steps": 7},
        },
    }
    campaign.run_cost_path("cell").write_text(json.dumps(costs))
    assert not campaign.wants_run_cost("cell")
    name, setting = campaign.matched_setting("cell", "kd")
    assert name == "lr2e-3-matched7" and setting["replacing"]["steps"] == 7 and setting["replacing"]["eval_every"] <= 7
    matched = [run for run in campaign.runs() if run.setting == name]
    assert [run.seed for run in matched] == [0, 1, 2, 3] and campaign.overrides(matched[0])["replacing"]["steps"] == 7
    finish(campaign)
    summary = campaign_results.summarize_cell(campaign, "cell")
    (entry,) = summary["compute_matched"].values()
    assert list(summary["compute_matched"]) == ["kd, 7 steps"] and entry["setting"] == name
    assert entry["comparison"]["per_seed"] == pytest.approx([10.0] * 4)  # 16 vs 14 right of 20
    # costs measured at another choice (a setting no longer chosen) are not used
    costs["methods"]["kd"]["setting"] = "lr1e-3"
    campaign.run_cost_path("cell").write_text(json.dumps(costs))
    assert campaign.matched_setting("cell", "kd") is None and campaign.wants_run_cost("cell")


def test_the_markdown_renders_the_same_from_the_written_json(campaign, tmp_path, monkeypatch):
    monkeypatch.setattr(campaign_results.methods_table, "plot", lambda summary, path: path.write_bytes(b""))
    arguments = ["made-up", "--campaigns", str(tmp_path), "--archive", str(tmp_path / "archive")]
    assert campaign_results.main([*arguments, "--out", str(tmp_path / "out")]) == 0
    written = json.loads((tmp_path / "out" / "campaign-made-up-cell.json").read_text())
    assert campaign_results.full_markdown(written) == (tmp_path / "out" / "campaign-made-up-cell.md").read_text()
    assert "| `theseus+warmup+kd` (best variant on dev) | lr 2e-3 | 0.825 (4) |" in campaign_results.summary_table(
        written
    )


def test_a_cell_whose_grids_are_not_finished_has_no_summary(tmp_path):
    definition = {
        "cells": {"cell": {"recipe": "toy"}},
        "methods": {"theseus": {"lr1e-3": {}}, "kd": {"lr1e-3": {}}},
        "grid_seeds": [0],
        "final_seeds": [0],
    }
    (tmp_path / "empty.json").write_text(json.dumps(definition))
    campaign = Campaign.load(tmp_path / "empty.json", archive=tmp_path / "archive")
    assert campaign_results.summarize_cell(campaign, "cell") is None
    assert CampaignRun("cell", "kd", "lr1e-3", 0) in campaign.runs()


@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=12))
def test_ranks_are_those_of_a_sort_with_ties_sharing_their_mean(values):
    ranks = campaign_results.ranks(values)
    assert sum(ranks) == pytest.approx(len(values) * (len(values) + 1) / 2)
    for a, ra in zip(values, ranks, strict=True):
        for b, rb in zip(values, ranks, strict=True):
            assert (a < b) == (ra < rb) and (a == b) == (ra == rb)


@given(st.lists(st.floats(-1e3, 1e3), min_size=3, max_size=12, unique=True))
def test_spearman_is_one_for_a_monotone_transform_and_minus_one_reversed(values):
    assert campaign_results.spearman(values, [np.tanh(v / 1e3) * 7 + v for v in values]) == pytest.approx(1.0)
    assert campaign_results.spearman(values, [-v for v in values]) == pytest.approx(-1.0)
    assert campaign_results.spearman(values[:2], values[:2]) is None


def test_a_searched_cell_is_compared_against_the_uniform_cells_on_its_predecessors(tmp_path, monkeypatch):
    settings = {s: {"replacing": {"lr": float(s[2:])}} for s in METHODS["kd"]}
    definition = {
        "cells": {
            "uniform": {"recipe": "toy"},
            "searched": {
                "recipe": "toy",
                "overrides": {"budget": {"latency": 0.5}},
                "predecessor_from": "uniform",
                "methods": ["theseus+warmup+kd"],
                "against": ["uniform"],
            },
        },
        "methods": {method: settings for method in METHODS},
        "grid_seeds": [0, 1],
        "final_seeds": [0, 1, 2],
    }
    (tmp_path / "search.json").write_text(json.dumps(definition))
    campaign = Campaign.load(tmp_path / "search.json", archive=tmp_path / "archive")
    assert {run.method for run in campaign.grid() if run.cell == "searched"} == {"theseus+warmup+kd"}
    while missing := [run for run in campaign.runs() if not campaign.done(run)]:
        for run in missing:
            report = made_up_report(run.method, run.setting, run.seed)
            report["speedup"] = 4.0 if run.cell == "searched" else 2.0
            for name, model in report["models"].items():
                model["parameters"] = 100 if name == "predecessor" else 30 if run.cell == "searched" else 50
            if run.cell == "searched":  # two more right than the uniform variant, an architecture per seed
                key = campaign_results.report_key(run.method)
                report["models"][key]["test"]["accuracy"] += 0.1
                report["search"] = {"budget": {"latency": 0.5}, "chosen": {"blocks[0:2]": f"seed{run.seed}"}}
            directory = campaign.archive / run.path
            directory.mkdir(parents=True)
            (directory / "report.json").write_text(json.dumps(report))
    summary = campaign_results.summarize_against(campaign, "searched")
    assert summary["complete"] and summary["best"] == "searched: theseus+warmup+kd"
    assert set(summary["models"]) == {"searched: theseus+warmup+kd", *(f"uniform: {method}" for method in METHODS)}
    searched = summary["models"]["searched: theseus+warmup+kd"]
    assert searched["latency_ratio"] == 0.25 and summary["models"]["uniform: kd"]["latency_ratio"] == 0.5
    assert searched["chosen_per_seed"] == {seed: {"blocks[0:2]": f"seed{seed}"} for seed in (0, 1, 2)}
    # 16 + 2 against KD's 15 right of 20 on every seed: +15 points; against the uniform variant +10
    assert summary["comparisons"]["searched: theseus+warmup+kd − uniform: kd"]["per_seed"] == pytest.approx([15.0] * 3)
    assert summary["comparisons"]["searched: theseus+warmup+kd − uniform: theseus+warmup+kd"]["mean"] == pytest.approx(
        10
    )
    arguments = ["search", "--campaigns", str(tmp_path), "--archive", str(tmp_path / "archive")]
    recorded = []  # the code's state is read once, before the first table is written (which would change it)
    monkeypatch.setattr(campaign_results, "environment", lambda: recorded.append(1) or {"commit": "c"})
    assert campaign_results.main([*arguments, "--out", str(tmp_path / "out")]) == 0
    assert len(recorded) == 1 and (tmp_path / "out" / "campaign-search-uniform.json").exists()
    written = json.loads((tmp_path / "out" / "campaign-search-searched.json").read_text())
    assert campaign_results.full_markdown(written) == (tmp_path / "out" / "campaign-search-searched.md").read_text()
    assert (tmp_path / "out" / "campaign-search-searched.png").stat().st_size > 0
    assert searched["params_ratio"] == pytest.approx(0.3)
    assert "| `kd` (uniform) | lr 2e-3 | 0.767 (3) | 0.500 | 0.500 |" in campaign_results.short_table(written)

    # partial results: a model that shares no finished seed with the searched one is listed, not compared
    def drop(cell, method, seed):
        (
            campaign.archive / CampaignRun(cell, method, campaign.chosen(cell, method), seed).path / "report.json"
        ).unlink()

    drop("uniform", "kd", 2)
    drop("searched", "theseus+warmup+kd", 0)
    drop("searched", "theseus+warmup+kd", 1)
    partial = campaign_results.summarize_against(campaign, "searched")
    assert not partial["complete"] and "uniform: kd" in partial["models"]
    assert "searched: theseus+warmup+kd − uniform: kd" not in partial["comparisons"]
    assert partial["comparisons"]["searched: theseus+warmup+kd − uniform: truncated"]["seeds"] == [2]
    drop("searched", "theseus+warmup+kd", 2)  # its best variant has no finished final seed: no summary
    assert campaign_results.summarize_against(campaign, "searched") is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"methods": ["distil"]}, "cell searched's methods must be a list of the campaign's methods"),
        ({"methods": []}, "cell searched's methods must be a list"),
        ({"predecessor_from": None}, r"compared against \['uniform'\]: other cells of the campaign on the same"),
        ({"against": ["searched"]}, "compared against"),
        ({"compute_matched": ["truncated"]}, "methods of the cell that are not Theseus variants"),
        (
            {"methods": ["theseus", "truncated"], "compute_matched": ["truncated"]},
            "is compared against other cells and",
        ),
    ],
)
def test_a_cells_methods_and_comparisons_are_checked_when_the_campaign_loads(tmp_path, change, message):
    searched = {"recipe": "toy", "predecessor_from": "uniform", "methods": ["theseus"], "against": ["uniform"]}
    searched = {key: value for key, value in {**searched, **change}.items() if value is not None}
    definition = {
        "cells": {"uniform": {"recipe": "toy"}, "searched": searched},
        "methods": {"theseus": {"default": {}}, "truncated": {"default": {}}},
        "grid_seeds": [0],
        "final_seeds": [0],
    }
    (tmp_path / "bad.json").write_text(json.dumps(definition))
    with pytest.raises(ValueError, match=message):
        Campaign.load(tmp_path / "bad.json")
