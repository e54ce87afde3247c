"""Timing that survives a shared machine: runs take turns, and ratios of turns are what to report. And the
multiply-adds ratio of two models, which needs no timing (`macs_ratio`).

Used by the `theseus compress` report (measured speedup) and by ``benchmarks/``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

from theseus_core.costs import latency_clock, multiply_adds


def interleaved_seconds(
    runs: dict[str, Callable[[], Any]], *, warmup: int, repeats: int, device: torch.device
) -> dict[str, list[float]]:
    """Times of each run, taking turns (a, b, c, a, b, c, ...) so that changes in the load of a shared machine hit
    every run alike; ratios between them are what to report. Read with `theseus_core.latency_clock`: on a CPU with
    one thread, the process's CPU time (what other processes take from it is not counted), else wall-clock; on an
    accelerator it synchronizes before and after each turn, so the warm-up's kernels are not counted."""
    for _ in range(warmup):
        for run in runs.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    timed = latency_clock(device)
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(timed(run))
    return times


def median_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median of the per-turn ratios of two interleaved measurements."""
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))


def latency_ratio(
    forward: Callable[[torch.nn.Module, Any], Any],
    reference: torch.nn.Module,
    model: torch.nn.Module,
    batch: Any,
    device: torch.device,
    repeats: int = 7,
) -> float:
    """``model``'s latency over ``reference``'s on ``batch``: the median of per-turn ratios, eager, in eval mode and
    without gradient, the two taking turns (`interleaved_seconds`, one warm-up turn each)."""
    reference.eval(), model.eval()
    runs = {"reference": lambda: forward(reference, batch), "model": lambda: forward(model, batch)}
    with torch.no_grad():
        times = interleaved_seconds(runs, warmup=1, repeats=repeats, device=device)
    return median_ratio(times["model"], times["reference"])


def macs_of(forward: Callable[[Any, Any], Any], model: Any, batch: Any) -> int:
    """``model``'s multiply-adds on ``batch`` (`theseus_core.multiply_adds`; ``forward(model, batch)`` in eval mode
    without gradient, the model's mode put back)."""
    training = model.training
    try:
        with torch.no_grad():
            return multiply_adds(lambda: forward(model.eval(), batch))
    finally:
        model.train(training)


def macs_ratio(forward: Callable[[Any, Any], Any], reference: Any, model: Any, batch: Any) -> float | None:
    """``model``'s multiply-adds over ``reference``'s on ``batch`` (`macs_of`); ``None`` where ``reference`` counts
    none."""
    whole = macs_of(forward, reference, batch)
    return macs_of(forward, model, batch) / whole if whole else None
