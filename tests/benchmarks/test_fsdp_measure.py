"""The CPU measurement of per-rank peaks (`benchmarks.fsdp_measure`): its routes, its allocation count, and the
committed peaks against the memory model as it is now."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import fsdp_measure


def test_worst_routes_put_the_first_site_alone_on_its_successor():
    seed, rate = fsdp_measure.worst_routes(15)
    generator = torch.Generator().manual_seed(seed)
    draws = [torch.rand((), generator=generator).item() for _ in range(15)]
    assert [draw < rate for draw in draws] == [True] + [False] * 14  # the rule of theseus_core's Router


def test_growths_count_what_a_window_allocates_and_has_not_freed():
    from torch.profiler import ProfilerActivity, profile, record_function

    kept = torch.zeros(1024)  # allocated before the profiler: not counted
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiled:
        held = torch.zeros(256)  # allocated before the window: its start
        with record_function("window"):
            first = torch.zeros(512)
            second = torch.zeros(256)
            del first
            third = torch.zeros(128)
    growth, _ = fsdp_measure.window_growths(profiled, ("window",))["window"]
    assert growth == (512 + 256) * 4
    assert kept.numel() + held.numel() + second.numel() + third.numel()


def test_the_committed_cpu_peaks_are_within_15_percent_of_the_model():
    results = json.loads((fsdp_measure.RESULTS / f"{fsdp_measure.NAME}.json").read_text())
    seen = set()
    for run in results["runs"]:
        seen.add((run["parallel"], run["processes"]))
        predicted = fsdp_measure.prediction(run["parallel"], run["processes"], run["ranks"][0]["tokens"])
        for rank in run["ranks"]:
            assert rank["tokens"] == 512 // run["processes"]
            assert predicted["total"] == pytest.approx(rank["peak"], rel=0.15)
    assert {("fsdp", 1), ("fsdp", 2)} <= seen
