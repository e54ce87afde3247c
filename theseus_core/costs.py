"""How a module's cost is read here: its latency (`latency_clock`: the budget search's costs, the zoo's timings and
benchmarks) and its multiply-adds (`multiply_adds`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


def latency_clock(device: torch.device | str) -> Callable[[Callable[[], Any]], float]:
    """How long one call takes on ``device``, the way latency is read here: ``timed(call)`` -> seconds.

    On a CPU running one intra-op thread (``torch.get_num_threads() == 1``) it is the CPU time the process spent on
    the call (``time.process_time``), so time the operating system gave to other processes (a shared machine) is
    not counted; with more threads it is wall-clock, since CPU time would add the threads up (so would any other
    thread the process runs meanwhile: time one thing at a time). On an accelerator (CUDA, or any
    ``torch.accelerator``) it is wall-clock between synchronizations, the call's kernels included."""
    device = torch.device(device)
    if device.type != "cpu":
        synchronize = torch.cuda.synchronize if device.type == "cuda" else torch.accelerator.synchronize

        def timed(call: Callable[[], Any]) -> float:
            synchronize(device)
            started = time.perf_counter()
            call()
            synchronize(device)
            return time.perf_counter() - started

        return timed
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter

    def timed(call: Callable[[], Any]) -> float:
        started = clock()
        call()
        return clock() - started

    return timed


def multiply_adds(call: Callable[[], Any]) -> int:
    """The multiply-adds one call performs: half the floating-point operations of its matrix products and
    convolutions (attention included) as `torch.utils.flop_counter.FlopCounterMode` counts them. Elementwise work,
    norms and gathers or scatters (a graph layer's message passing) are not counted, as MACs usually are not; the
    count is exact and the same on every machine, so multiply-adds add up over a model's parts as parameters do."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        call()
    return counter.get_total_flops() // 2
