"""Timing that survives a shared machine: runs take turns, and ratios of turns are what to report.

Used by the `theseus compress` report (measured speedup) and by ``benchmarks/``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_seconds(
    runs: dict[str, Callable[[], Any]], *, warmup: int, repeats: int, device: torch.device
) -> dict[str, list[float]]:
    """Wall times of each run, taking turns (a, b, c, a, b, c, ...) so that changes in the load of a
    shared machine hit every run alike; ratios between them are what to report."""
    for _ in range(warmup):
        for run in runs.values():
            run()
    synchronize(device)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return times


def median_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median of the per-turn ratios of two interleaved measurements."""
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))
