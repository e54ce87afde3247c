"""benchmarks.campaign on a toy campaign: what is done is skipped, a killed job resumes, status counts."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import benchmarks.campaign as campaign_module
from benchmarks.campaign import Campaign, CampaignRun, execute, format_status, main, next_runs, run_campaign

TINY = {
    "predecessor": {"steps": 20, "eval_every": 10},
    "replacing": {"steps": 20, "eval_every": 10},
    "steps_to_one": 10,
    "patience": None,
}


def toy_campaign(tmp_path):
    definition = {
        "cells": {"toy": {"recipe": "toy", "overrides": TINY}},
        "methods": {"truncated": {f"lr{lr}": {"replacing": {"lr": float(lr)}} for lr in ("1e-3", "3e-3", "1e-2")}},
        "grid_seeds": [0],
        "final_seeds": [0, 1],
    }
    (tmp_path / "campaigns").mkdir()
    (tmp_path / "campaigns" / "toy.json").write_text(json.dumps(definition))
    return Campaign.load(tmp_path / "campaigns" / "toy.json", archive=tmp_path / "archive", runs_root=tmp_path / "runs")


@pytest.mark.slow
def test_a_campaign_runs_what_is_left_resumes_a_killed_job_and_skips_what_is_done(tmp_path, capsys, monkeypatch):
    campaign = toy_campaign(tmp_path)
    at_once, write_running = [], campaign_module.write_running  # how many runs each record of running.json lists
    monkeypatch.setattr(
        campaign_module, "write_running", lambda c, runs: at_once.append(len(runs)) or write_running(c, runs)
    )
    status = campaign.status()
    assert (status["done"], status["left"]) == (0, 4)  # 3 grid runs (two at once), then seed 1 of the chosen one
    assert status["cpu_hours_left"] is None and status["waiting"] == [("toy", "truncated")]
    # The first run of a seed fine-tunes its predecessor: no other run of that seed starts beside it.
    assert next_runs(campaign, set(), 2) == [CampaignRun("toy", "truncated", "lr1e-3", 0)]

    # A job killed midway (its checkpoint written, no report): the campaign resumes it.
    killed = CampaignRun("toy", "truncated", "lr1e-3", 0)
    directory = campaign.runs_root / killed.path
    directory.parent.mkdir(parents=True)
    config = directory.parent / "seed0.config.json"
    config.write_text(json.dumps(campaign.overrides(killed)))
    command = [sys.executable, "-m", "theseus_zoo.cli", "compress", "--recipe", "toy", "--config", str(config)]
    process = subprocess.Popen([*command, "--seed", "0", "--out", str(directory), "--no-progress"])
    while not (directory / "metrics.jsonl").exists() and process.poll() is None:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert (directory / "checkpoint.pt").exists() and not (directory / "report.json").exists()

    assert run_campaign(campaign, jobs=2, threads=1) == 4
    assert max(at_once) == 2  # the grid's other two settings at once, once the first run fine-tuned the predecessor
    assert all(campaign.done(run) for run in campaign.runs()) and len(campaign.runs()) == 4
    steps = [
        json.loads(line)["step"]
        for line in (directory / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["phase"] == "predecessor"
    ]
    assert steps == sorted(set(steps))  # resumed: no step logged twice
    archived = campaign.archive / killed.path / "report.json"  # the run's report, every value, on one line
    assert json.loads(archived.read_text()) == json.loads((directory / "report.json").read_text())
    assert archived.read_text().count("\n") == 1
    provenance = json.loads((campaign.archive / killed.path / "provenance.json").read_text())
    assert (
        provenance["command"].startswith("theseus compress --recipe toy --config ")
        and "--seed 0" in provenance["command"]
    )
    assert provenance["config"] == campaign.overrides(killed) and provenance["environment"]["commit"]
    chosen = campaign.chosen("toy", "truncated")
    assert chosen in ("lr1e-3", "lr3e-3", "lr1e-2") and CampaignRun("toy", "truncated", chosen, 1) in campaign.runs()
    sources = {campaign.predecessor_source(run) for run in campaign.runs()}  # three runs of seed 0, one of seed 1
    kept = {path.parent for path in campaign.runs_root.rglob("checkpoint.pt")}
    assert kept == sources and len(kept) == 2 and directory.resolve() in kept  # one predecessor a seed, no more

    status = campaign.status()
    assert (status["done"], status["left"], status["waiting"]) == (4, 0, []) and status["cpu_hours_left"] == 0
    assert "4 done, 0 running, 0 left" in format_status(campaign, status)
    assert run_campaign(campaign, jobs=2, threads=1) == 0  # nothing is run twice
    capsys.readouterr()
    arguments = ["--campaigns", str(tmp_path / "campaigns"), "--archive", str(tmp_path / "archive")]
    assert main(["status", "toy", *arguments, "--runs", str(tmp_path / "runs")]) == 0
    assert "chosen" in capsys.readouterr().out


@pytest.mark.slow
def test_a_predecessor_fine_tuned_unlike_the_archived_one_stops_the_campaign_naming_both_machines(tmp_path):
    campaign = toy_campaign(tmp_path)
    first, second = CampaignRun("toy", "truncated", "lr1e-3", 0), CampaignRun("toy", "truncated", "lr3e-3", 0)
    execute(campaign, first, threads=1)
    archived = campaign.archive / first.path
    report = json.loads((archived / "report.json").read_text())  # as if fine-tuned elsewhere, to other outputs
    test = report["models"]["predecessor"]
    key = "test_predictions" if test.get("test_predictions") is not None else "test"
    test[key] = (
        [value + 1 for value in test[key]] if key == "test_predictions" else {m: v + 1 for m, v in test[key].items()}
    )
    (archived / "report.json").write_text(json.dumps(report))
    provenance = json.loads((archived / "provenance.json").read_text())
    provenance["environment"]["processor"] = "Another CPU"
    (archived / "provenance.json").write_text(json.dumps(provenance))
    shutil.rmtree(campaign.runs_root)  # a new machine: the predecessor is fine-tuned again by the next run

    with pytest.raises(RuntimeError, match="predecessor differs") as raised:
        execute(campaign, second, threads=1)
    assert "that one fine-tuned on Another CPU, torch" in str(raised.value)
    assert not campaign.done(second) and (campaign.runs_root / second.path / "report.json").exists()


@pytest.mark.slow
def test_a_cell_with_search_from_trains_the_architecture_its_variant_chose_seed_by_seed(tmp_path):
    pytest.importorskip("scipy")
    definition = {
        "cells": {
            "searched": {
                "recipe": "toy",
                "overrides": {**TINY, "budget": {"params": 0.5, "steps": 3}},
                "search_from": "theseus",
            }
        },
        "methods": {"theseus": {"a": {}}, "kd+searched": {"b": {}}},
        "grid_seeds": [0],
        "final_seeds": [0],
    }
    (tmp_path / "campaigns").mkdir()
    (tmp_path / "campaigns" / "s.json").write_text(json.dumps(definition))
    campaign = Campaign.load(
        tmp_path / "campaigns" / "s.json", archive=tmp_path / "archive", runs_root=tmp_path / "runs"
    )
    variant, distilled = CampaignRun("searched", "theseus", "a", 0), CampaignRun("searched", "kd+searched", "b", 0)
    assert campaign.waits_for_search(distilled) and not campaign.waits_for_search(variant)
    assert next_runs(campaign, set(), 2) == [variant]  # the KD run waits for the architecture it takes
    with pytest.raises(ValueError, match="not archived yet"):
        campaign.overrides(distilled)

    execute(campaign, variant, threads=1)
    chosen = campaign.report(variant).search["chosen"]
    assert campaign.search_source(distilled) == variant and not campaign.waits_for_search(distilled)
    assert campaign.overrides(distilled)["budget"] == {"params": 0.5, "steps": 3, "chosen": chosen}
    execute(campaign, distilled, threads=1)
    search = campaign.report(distilled).search
    assert search["chosen"] == chosen and search["given"] is True and search["model"] == "baseline:kd+searched"

    definition["cells"]["searched"]["search_from"] = "kd"  # not a method of the cell
    (tmp_path / "campaigns" / "s.json").write_text(json.dumps(definition))
    with pytest.raises(ValueError, match="search_from"):
        Campaign.load(tmp_path / "campaigns" / "s.json")


def test_an_unknown_method_or_campaign_is_refused_before_any_run(tmp_path, capsys):
    (tmp_path / "bad.json").write_text(
        json.dumps(
            {
                "cells": {"toy": {"recipe": "toy"}},
                "methods": {"distil": {"a": {}}},
                "grid_seeds": [0],
                "final_seeds": [0],
            }
        )
    )
    assert main(["run", "bad", "--campaigns", str(tmp_path), "--runs", str(tmp_path / "runs")]) == 2
    assert "unknown method 'distil'" in capsys.readouterr().err
    assert main(["status", "nothing", "--campaigns", str(tmp_path)]) == 2
    assert "no campaign 'nothing'; campaigns: bad" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_run_its_recipe_would_refuse_is_refused_when_the_campaign_loads(tmp_path):
    definition = {
        "cells": {
            "searched": {"recipe": "toy", "overrides": {"budget": {"params": 0.5}}, "methods": ["kd+searched"]},
            "uniform": {"recipe": "toy", "methods": ["kd"]},
            "all": {"recipe": "toy"},  # every method of the campaign: kd+searched too, without a budget
        },
        "methods": {"kd": {"a": {}}, "kd+searched": {"a": {}}},
        "grid_seeds": [0],
        "final_seeds": [0],
    }
    (tmp_path / "mixed.json").write_text(json.dumps(definition))
    with pytest.raises(ValueError, match=r"cell all, kd\+searched at a: method 'kd\+searched' trains the architecture"):
        Campaign.load(tmp_path / "mixed.json")
    definition["cells"]["all"]["overrides"] = {"replacing": {"steps": 0}}
    definition["cells"]["all"]["methods"] = ["kd"]
    (tmp_path / "mixed.json").write_text(json.dumps(definition))
    with pytest.raises(ValueError, match=r"cell all, kd at a: replacing.steps"):
        Campaign.load(tmp_path / "mixed.json")


def test_a_campaign_whose_runs_left_read_a_missing_asset_refuses_to_start(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("THESEUS_CACHE", str(tmp_path / "empty-cache"))
    cells = {
        "images": {"recipe": "resnet-fashion-mnist"},  # Fashion-MNIST from the asset
        "own-images": {"recipe": "resnet-fashion-mnist", "overrides": {"options": {"data_dir": str(tmp_path)}}},
        "toy": {"recipe": "toy"},
    }
    definition = {"cells": cells, "methods": {"kd": {"a": {}}}, "grid_seeds": [0], "final_seeds": [0]}
    (tmp_path / "assets.json").write_text(json.dumps(definition))
    campaign = Campaign.load(tmp_path / "assets.json", archive=tmp_path / "archive", runs_root=tmp_path / "runs")
    by_cell = {cell: [run for run in campaign.runs() if run.cell == cell] for cell in cells}
    assert campaign.assets() == campaign.assets(by_cell["images"]) == ["fashion-mnist"]
    assert campaign.assets(by_cell["own-images"] + by_cell["toy"]) == []  # the user's folder; the toy's own data

    arguments = ["--campaigns", str(tmp_path), "--runs", str(tmp_path / "runs"), "--archive", str(tmp_path / "archive")]
    assert main(["run", "assets", *arguments]) == 1
    error = capsys.readouterr().err
    assert "the runs left read assets not in" in error and "fetch them with: theseus fetch fashion-mnist" in error
    assert not (tmp_path / "runs" / "assets" / "toy").exists()  # not even the runs that need no asset started


def rates_campaign(tmp_path, dev_at_rate, extensions=2):
    """A campaign whose runs are never trained: each run in ``done`` (a set the test fills) has the dev metric
    ``dev_at_rate(rate, seed)``."""
    definition = {
        "cells": {"toy": {"recipe": "toy"}},
        "methods": {
            "truncated": {f"lr{r}": {"replacing": {"lr": float(r)}} for r in ("1e-3", "2e-3", "4e-3")},
            "kd": {
                f"lr{r}-alpha{a}": {"replacing": {"lr": float(r)}, "kd_alpha": a}
                for r in ("1e-3", "2e-3")
                for a in (0.2, 0.5)
            },
        },
        "grid_seeds": [0, 1],
        "final_seeds": [0, 1, 2],
        "edge_extensions": extensions,
    }
    (tmp_path / "rates.json").write_text(json.dumps(definition))
    campaign = Campaign.load(tmp_path / "rates.json", archive=tmp_path / "archive", runs_root=tmp_path / "runs")
    done: set[CampaignRun] = set()

    def dev(run):
        if run not in done:
            return None
        return dev_at_rate(float(run.setting.removeprefix("lr").split("-alpha")[0]), run.seed)  # named by its rate

    campaign.dev = dev
    return campaign, done


def finish_grids(campaign, done):
    """Marks every known grid run done, again and again, until the grids stop growing; returns the rounds taken."""
    rounds = 0
    while missing := [run for run in campaign.grid() if run not in done]:
        done.update(missing)
        rounds += 1
    return rounds


def test_rate_tokens_name_settings_by_their_rate():
    from benchmarks.campaign import rate_token

    assert [rate_token(r) for r in (1e-4, 2e-4, 0.0008, 0.16, 1.25e-3, 1.0)] == [
        "1e-4",
        "2e-4",
        "8e-4",
        "1.6e-1",
        "1.25e-3",
        "1e0",
    ]


def test_a_choice_at_the_top_of_the_grid_extends_it_until_interior(tmp_path):
    peak = 8e-3  # dev rises with the rate up to 8e-3: the grid (1e-3..4e-3) must grow to 1.6e-2 to close
    campaign, done = rates_campaign(tmp_path, lambda rate, seed: -abs(math.log(rate / peak)) + seed)
    assert campaign.chosen("toy", "truncated") is None
    assert finish_grids(campaign, done) == 3  # the declared grid, then 8e-3, then 1.6e-2
    settings = campaign.settings("toy", "truncated")
    assert list(settings)[3:] == ["lr8e-3", "lr1.6e-2"] and settings["lr1.6e-2"] == {"replacing": {"lr": 0.016}}
    assert campaign.chosen("toy", "truncated") == "lr8e-3" and not campaign.at_edge("toy", "truncated", "lr8e-3")
    finals = {run for run in campaign.runs() if run.method == "truncated" and run.seed == 2}
    assert finals == {CampaignRun("toy", "truncated", "lr8e-3", 2)}
    # KD's two axes: the rate is extended at the chosen alpha only, named by its rate and the rest of its name
    assert list(campaign.settings("toy", "kd"))[4:] == ["lr4e-3-alpha0.2", "lr8e-3-alpha0.2"]
    assert campaign.settings("toy", "kd")["lr8e-3-alpha0.2"] == {"replacing": {"lr": 0.008}, "kd_alpha": 0.2}
    extension = CampaignRun("toy", "kd", "lr8e-3-alpha0.2", 1)  # what its run trains with
    assert campaign.overrides(extension) == {"replacing": {"lr": 0.008}, "kd_alpha": 0.2, "methods": ["kd"]}


def test_a_choice_at_the_bottom_extends_downwards_and_the_extensions_are_capped(tmp_path):
    campaign, done = rates_campaign(tmp_path, lambda rate, seed: -rate, extensions=1)
    finish_grids(campaign, done)
    assert list(campaign.settings("toy", "truncated"))[3:] == ["lr5e-4"]  # one extension, no more
    assert campaign.chosen("toy", "truncated") == "lr5e-4" and campaign.at_edge("toy", "truncated", "lr5e-4")
    assert "still an edge of its grid after 1 extensions" in format_status(campaign, campaign.status())


def test_without_extensions_the_grid_is_what_the_campaign_says(tmp_path):
    campaign, done = rates_campaign(tmp_path, lambda rate, seed: rate, extensions=0)
    assert finish_grids(campaign, done) == 1
    assert campaign.chosen("toy", "truncated") == "lr4e-3" and "extend it" in format_status(campaign, campaign.status())


def test_a_setting_not_named_by_its_rate_is_refused_when_grids_extend(tmp_path):
    definition = {
        "cells": {"toy": {"recipe": "toy"}},
        "methods": {"kd": {"fast": {"replacing": {"lr": 1e-3}}}},
        "grid_seeds": [0],
        "final_seeds": [0],
        "edge_extensions": 1,
    }
    (tmp_path / "named.json").write_text(json.dumps(definition))
    with pytest.raises(ValueError, match=r"setting 'fast' has learning rate 0.001: .* starts with lr1e-3"):
        Campaign.load(tmp_path / "named.json")


def test_a_cell_can_take_another_cells_predecessors(tmp_path):
    definition = {
        "cells": {"a": {"recipe": "toy"}, "b": {"recipe": "toy", "predecessor_from": "a"}},
        "methods": {"truncated": {"lr1e-3": {"replacing": {"lr": 1e-3}}}, "kd": {"default": {}}},
        "grid_seeds": [0, 1],
        "final_seeds": [0, 1],
    }
    (tmp_path / "shared.json").write_text(json.dumps(definition))
    campaign = Campaign.load(tmp_path / "shared.json", runs_root=tmp_path / "runs")
    a, b = CampaignRun("a", "kd", "default", 1), CampaignRun("b", "truncated", "lr1e-3", 1)
    assert campaign.predecessor_record(a) == campaign.predecessor_record(b) and campaign.predecessor_key(b) == ("a", 1)
    # one run per seed fine-tunes the predecessor of both cells; nothing else of that seed starts beside it
    assert next_runs(campaign, set(), 8) == [
        CampaignRun("a", "truncated", "lr1e-3", 0),
        CampaignRun("a", "truncated", "lr1e-3", 1),
    ]
    definition["cells"]["a"]["predecessor_from"] = "c"
    (tmp_path / "shared.json").write_text(json.dumps(definition))
    with pytest.raises(ValueError, match="cell a takes its predecessors from 'c', which is not a cell"):
        Campaign.load(tmp_path / "shared.json")


def test_a_run_left_is_estimated_from_its_own_cell_first_then_its_method_then_the_device():
    from benchmarks.campaign_plan import estimate

    seconds = {("cpu", "light", "variant"): [100.0, 200.0], ("cpu", "searched", "variant"): [600.0]}
    seconds[("cpu", "light", "kd")] = [50.0]
    assert estimate(seconds, "cpu", "searched", "variant") == 600.0  # not the light cell's shorter runs
    assert estimate(seconds, "cpu", "other", "variant") == 300.0  # the method's runs in every cell
    assert estimate(seconds, "cpu", "searched", "truncated") == 237.5  # every run on the device
    with pytest.raises(ValueError, match="no done run on gpu"):
        estimate(seconds, "gpu", "light", "kd")
