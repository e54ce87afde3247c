"""How latency is read here: `latency_clock` (the budget search's costs, the zoo's timings and benchmarks)."""

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
