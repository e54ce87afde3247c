"""benchmarks.campaign_gpu on a toy campaign, on the CPU: a seed runs on its one device, the GPU path's results travel
back in one archive that unpacks once, and the asset parts arrive byte-exact or not at all."""

import json
import shutil

import pytest

from benchmarks.campaign import Campaign, CampaignRun, format_status, next_runs, run_campaign
from benchmarks.campaign_gpu import main, pack_assets, pack_results, receive, unpack

from .test_campaign import TINY


def device_campaign(tmp_path, archive="archive", gpu_seeds=(1,)):
    definition = {
        "cells": {"toy": {"recipe": "toy", "overrides": TINY, "gpu_seeds": list(gpu_seeds)}},
        "methods": {"truncated": {"lr1e-3": {"replacing": {"lr": 1e-3}}}, "kd": {"default": {}}},
        "grid_seeds": [0, 1],
        "final_seeds": [0, 1],
    }
    (tmp_path / "campaigns").mkdir(exist_ok=True)
    (tmp_path / "campaigns" / "toy.json").write_text(json.dumps(definition))
    return Campaign.load(tmp_path / "campaigns" / "toy.json", archive=tmp_path / archive, runs_root=tmp_path / "runs")


@pytest.mark.slow
def test_the_gpu_path_runs_its_seeds_alone_and_its_archive_unpacks_once(tmp_path, capsys):
    campaign = device_campaign(tmp_path)
    # a run expected to take a minute (none finished yet) does not start 36 s before the call ends
    assert run_campaign(campaign, jobs=2, threads=1, device="gpu", finish_hours=0.01, run_minutes=1) == 0
    assert not campaign.runs_root.exists() or not list(campaign.runs_root.rglob("*.config.json"))
    seed = {device: {run.seed for run in next_runs(campaign, set(), 8, device)} for device in ("cpu", "gpu")}
    assert seed == {"cpu": {0}, "gpu": {1}}  # each runner starts its own seeds only
    assert run_campaign(campaign, jobs=2, threads=1, device="gpu", finish_hours=1.0) == 2
    gpu_runs = {CampaignRun("toy", "truncated", "lr1e-3", 1), CampaignRun("toy", "kd", "default", 1)}
    assert {run for run in campaign.runs() if campaign.done(run)} == gpu_runs
    assert {campaign.archived_device(run) for run in gpu_runs} == {"gpu"}
    assert next_runs(campaign, set(), 8, "gpu") == [] and len(next_runs(campaign, set(), 8, "cpu")) == 1
    devices = campaign.status()["devices"]
    assert (devices["gpu"]["done"], devices["gpu"]["left"], devices["cpu"]["left"]) == (2, 0, 2)
    assert devices["gpu"]["run_hours_left"] == 0 and devices["cpu"]["run_hours_left"] is None

    archive, count = pack_results(campaign, tmp_path / "out")
    assert count == 2 and archive == tmp_path / "out" / "campaign-toy.tar.gz"
    assert (tmp_path / "out" / "logs-toy.tar.gz").exists()

    fresh = device_campaign(tmp_path, archive="fresh")
    with pytest.raises(ValueError, match="ran on a CPU"):  # a CPU test of the GPU path is no GPU result
        unpack(fresh, archive)
    assert not fresh.archive.exists()
    assert unpack(fresh, archive, allow_cpu=True) == {"new": 2, "same": 0}
    status = fresh.status()
    assert (status["done"], status["devices"]["gpu"]["done"], status["devices"]["cpu"]["left"]) == (2, 2, 2)
    assert "gpu: 2 done, 0 running, 0 left" in format_status(fresh, status)
    before = {path: path.read_bytes() for path in fresh.archive.rglob("*") if path.is_file()}
    assert unpack(fresh, archive, allow_cpu=True) == {"new": 0, "same": 2}  # idempotent
    assert {path: path.read_bytes() for path in fresh.archive.rglob("*") if path.is_file()} == before

    # A run archived with other bytes refuses the whole archive: nothing is written, not even the missing run.
    conflict = fresh.archive / "toy" / "kd" / "default" / "seed1" / "report.json"
    conflict.write_text(conflict.read_text() + "\n")
    shutil.rmtree(fresh.archive / "toy" / "truncated")
    arguments = ["--campaigns", str(tmp_path / "campaigns"), "--archive", str(tmp_path / "fresh"), "--allow-cpu"]
    capsys.readouterr()
    assert main(["unpack", "toy", str(archive), *arguments]) == 1
    assert "archived already with other bytes" in capsys.readouterr().err
    assert not (fresh.archive / "toy" / "truncated").exists()

    # A seed is one device's: the CPU's seeds refuse GPU results, and a done run whose seed moved stops the runner.
    cpu_only = device_campaign(tmp_path, archive="other", gpu_seeds=())
    with pytest.raises(ValueError, match="seed 1 of toy is the CPU's"):
        unpack(cpu_only, archive, allow_cpu=True)
    moved = device_campaign(tmp_path, gpu_seeds=())
    assert moved.misplaced() and "ran on another device" in format_status(moved, moved.status())
    with pytest.raises(RuntimeError, match="ran on another device than its seed's now"):
        run_campaign(moved, jobs=1, threads=1)


def test_asset_parts_arrive_byte_exact_and_say_what_is_missing(tmp_path, monkeypatch):
    cache = tmp_path / "cache" / "polblogs"
    cache.mkdir(parents=True)
    (cache / ".complete").write_text("sha\n")
    (cache / "polblogs.gt.gz").write_bytes(bytes(range(256)) * 1200)  # 300 KB
    monkeypatch.setenv("THESEUS_CACHE", str(tmp_path / "cache"))
    campaign = device_campaign(tmp_path)
    parts = pack_assets(campaign, tmp_path / "parts", assets=["polblogs"], wheels=(), part_bytes=2_000)
    assert len(parts) > 1 and all(sum(f.stat().st_size for f in p.iterdir()) < 4_000 for p in parts)

    machine = tmp_path / "machine"  # what the calls leave there: the parts carried so far
    shutil.copytree(parts[0], machine / parts[0].name)
    ready, found = receive(machine)
    assert not ready and "missing: part2" in found and "start again from part 1" in found
    for part in parts[1:]:
        shutil.copytree(part, machine / part.name)
    ready, found = receive(machine)
    assert ready and "byte-exact" in found
    for name in ("polblogs.gt.gz", ".complete"):
        assert (machine / "cache" / "polblogs" / name).read_bytes() == (cache / name).read_bytes()
    environment = (machine / "env.sh").read_text()
    assert f"THESEUS_CACHE={machine / 'cache'}" in environment and "THESEUS_SOURCE_COMMIT=" in environment
    assert receive(machine)[0]  # again: nothing to do

    chunk = next((machine / "part2").glob("assets.tar.gz.*"))
    chunk.write_bytes(b"x" + chunk.read_bytes()[1:])
    with pytest.raises(ValueError, match="sha256"):
        receive(machine)


def test_a_seed_follows_its_predecessor_cell_and_matched_compute_stays_on_the_cpu(tmp_path):
    definition = {
        "cells": {"a": {"recipe": "toy", "gpu_seeds": [0]}, "b": {"recipe": "toy", "predecessor_from": "a"}},
        "methods": {"kd": {"default": {}}, "truncated": {"lr1e-3": {"replacing": {"lr": 1e-3}}}},
        "grid_seeds": [0, 1],
        "final_seeds": [0, 1],
    }
    (tmp_path / "c.json").write_text(json.dumps(definition))
    campaign = Campaign.load(tmp_path / "c.json", archive=tmp_path / "archive", runs_root=tmp_path / "runs")
    assert campaign.device_of(CampaignRun("b", "kd", "default", 0)) == "gpu"
    assert campaign.device_of(CampaignRun("b", "kd", "default", 1)) == "cpu"
    definition["cells"]["b"]["gpu_seeds"] = [1]
    (tmp_path / "c.json").write_text(json.dumps(definition))
    with pytest.raises(ValueError, match="give gpu_seeds to a"):
        Campaign.load(tmp_path / "c.json")
    definition["cells"] = {"a": {"recipe": "toy", "gpu_seeds": [0], "compute_matched": ["kd"]}}
    (tmp_path / "c.json").write_text(json.dumps(definition))
    with pytest.raises(ValueError, match="runs on the CPU alone"):
        Campaign.load(tmp_path / "c.json")
