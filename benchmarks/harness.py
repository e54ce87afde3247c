"""Measuring tools for the benchmarks: timing, training memory, recompilations, reports.

Every number is measured in the run that reports it; comparisons are ratios
between measurements of the same run (these machines are shared and noisy).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn


def environment() -> dict[str, Any]:
    """What the numbers came from: the code (``commit``, the git commit of this checkout, with ``+changes`` when its
    tracked files differ from it), the libraries and the machine."""
    info = {
        "commit": source_commit(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": "cpu",
    }
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


SOURCE_COMMIT = "THESEUS_SOURCE_COMMIT"
"""When set, the commit `source_commit` gives, whatever git says: a copy of a checkout is told which commit it is
(`benchmarks.campaign_gpu`: a lent GPU machine gets the working tree with a ``.git`` that may be an older
commit's, which would record that commit ``+changes``)."""


def command_line(module: str, argv: list[str] | None) -> str:
    """The command that reproduces a benchmark: ``python -m MODULE`` and its arguments (``argv``, or the process's
    own when ``None``), quoted for a shell."""
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])


def source_commit() -> str:
    """``$THESEUS_SOURCE_COMMIT`` (`SOURCE_COMMIT`) when set; else ``git rev-parse HEAD`` of the checkout the
    benchmarks run from, ``+changes`` appended when tracked files differ from it; outside a git checkout
    ``"unknown"``."""
    import subprocess

    if os.environ.get(SOURCE_COMMIT):
        return os.environ[SOURCE_COMMIT]
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=root).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+changes" if dirty else "")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def nbytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def training_memory(
    model: nn.Module, forward_loss: Callable[[], torch.Tensor], optimizer_states_per_param: int = 2
) -> dict[str, float]:
    """Memory a training step needs, in MiB, counted tensor by tensor (exact, noise-free, any device).

    - ``weights``: every parameter and buffer of the model (both stacks while replacing);
    - ``activations``: tensors autograd saves for the backward pass (each storage once);
    - ``gradients`` and ``optimizer``: for the parameters that require grad (AdamW keeps
      two states per parameter).
    """
    storages: dict[int, int] = {}
    weights = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:  # weights (and views of them) are counted once, as weights
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = forward_loss()
    if loss.requires_grad:
        loss.backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    for param in model.parameters():
        param.grad = None
    mib = 2.0**20
    memory = {
        "weights": nbytes([*model.parameters(), *model.buffers()]) / mib,
        "activations": sum(storages.values()) / mib,
        "gradients": nbytes(trainable) / mib,
        "optimizer": optimizer_states_per_param * nbytes(trainable) / mib,
    }
    memory["total"] = sum(memory.values())
    return memory


def write_report(results: dict[str, Any], out: Path, name: str, markdown: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (out / f"{name}.md").write_text(markdown)


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(value: Any) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
