"""benchmarks.campaign on a toy campaign: what is done is skipped, a killed job resumes, status counts."""

import json
import os
import signal
import subprocess
import sys
import time

from benchmarks.campaign import Campaign, CampaignRun, format_status, main, next_runs, run_campaign

TINY = {
    "predecessor": {"steps": 20, "eval_every": 10},
    "replacing": {"steps": 20, "eval_every": 10},
    "steps_to_one": 10,
    "patience": None,
}


def toy_campaign(tmp_path):
    definition = {
        "cells": {"toy": {"recipe": "toy", "overrides": TINY}},
        "methods": {
            "truncated": {"lr1e-3": {"replacing": {"lr": 1e-3}}, "lr3e-3": {"replacing": {"lr": 3e-3}}},
            "kd": {"default": {}},
        },
        "grid_seeds": [0],
        "final_seeds": [0, 1],
    }
    (tmp_path / "campaigns").mkdir()
    (tmp_path / "campaigns" / "toy.json").write_text(json.dumps(definition))
    return Campaign.load(tmp_path / "campaigns" / "toy.json", archive=tmp_path / "archive", runs_root=tmp_path / "runs")


def test_a_campaign_runs_what_is_left_resumes_a_killed_job_and_skips_what_is_done(tmp_path, capsys):
    campaign = toy_campaign(tmp_path)
    status = campaign.status()
    assert (status["done"], status["left"]) == (0, 5)  # 3 grid runs, then seed 1 of each method's chosen setting
    assert status["cpu_hours_left"] is None and status["waiting"] == [("toy", "truncated"), ("toy", "kd")]
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

    assert run_campaign(campaign, jobs=2, threads=1) == 5
    assert all(campaign.done(run) for run in campaign.runs()) and len(campaign.runs()) == 5
    steps = [
        json.loads(line)["step"]
        for line in (directory / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["phase"] == "predecessor"
    ]
    assert steps == sorted(set(steps))  # resumed: no step logged twice
    chosen = campaign.chosen("toy", "truncated")
    assert chosen in ("lr1e-3", "lr3e-3") and CampaignRun("toy", "truncated", chosen, 1) in campaign.runs()
    sources = {campaign.predecessor_source(CampaignRun("toy", "kd", "default", seed)) for seed in (0, 1)}
    kept = {path.parent for path in campaign.runs_root.rglob("checkpoint.pt")}
    assert kept == sources and len(kept) == 2 and directory.resolve() in kept  # one predecessor a seed, no more

    status = campaign.status()
    assert (status["done"], status["left"], status["waiting"]) == (5, 0, []) and status["cpu_hours_left"] == 0
    assert "5 done, 0 running, 0 left" in format_status(campaign, status)
    assert run_campaign(campaign, jobs=2, threads=1) == 0  # nothing is run twice
    capsys.readouterr()
    arguments = ["--campaigns", str(tmp_path / "campaigns"), "--archive", str(tmp_path / "archive")]
    assert main(["status", "toy", *arguments, "--runs", str(tmp_path / "runs")]) == 0
    assert "chosen" in capsys.readouterr().out


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
