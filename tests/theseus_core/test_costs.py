"""theseus_core.costs: how latency is read (process time on one CPU thread, wall-clock otherwise)."""

import time

import torch

import theseus_core as th


def _busy(seconds):
    ends = time.process_time() + seconds
    while time.process_time() < ends:
        pass


def test_on_one_cpu_thread_latency_counts_the_process_work_and_not_its_waiting(threads):
    threads(1)
    timed = th.latency_clock("cpu")
    assert timed(lambda: time.sleep(0.2)) < 0.05  # given to other processes: not this call's latency
    assert 0.04 <= timed(lambda: _busy(0.05)) < 0.5


def test_with_several_threads_latency_is_wall_clock(threads):
    threads(2)
    assert th.latency_clock("cpu")(lambda: time.sleep(0.1)) >= 0.1


def test_on_an_accelerator_latency_is_read_between_synchronizations(monkeypatch):
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append(("synchronize", str(device))))
    th.latency_clock("cuda:0")(lambda: events.append("call"))
    assert events == [("synchronize", "cuda:0"), "call", ("synchronize", "cuda:0")]
