"""What a run logs as it trains: one JSON line per step in ``metrics.jsonl``, and the same scalars in TensorBoard
when the ``tensorboard`` package is installed; rank 0 alone writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class MetricsLog:
    """``metrics.jsonl`` (and TensorBoard under ``tensorboard/``) in ``out``; ``enabled`` is false on every rank but
    rank 0, which then logs nothing."""

    def __init__(self, out: Path, enabled: bool) -> None:
        self.path, self.enabled = Path(out) / "metrics.jsonl", enabled
        self.tensorboard = _tensorboard_writer(Path(out) / "tensorboard") if enabled else None

    def log(self, record: dict[str, Any]) -> None:
        """Appends ``record`` (``phase``, ``step``, ``loss``, optional ``rate`` and ``dev`` metrics, ...)."""
        if not self.enabled:
            return
        with open(self.path, "a") as stream:
            stream.write(json.dumps(record) + "\n")
        if self.tensorboard is not None:
            phase, step = record["phase"], record["step"]
            for name, value in [("loss", record["loss"]), ("rate", record.get("rate"))]:
                if value is not None:
                    self.tensorboard.add_scalar(f"{phase}/{name}", value, step)
            for name, value in record.get("dev", {}).items():
                self.tensorboard.add_scalar(f"{phase}/dev_{name}", value, step)

    def size(self) -> int:
        """Bytes logged so far (what a checkpoint records, so that a resume cuts what came after)."""
        return self.path.stat().st_size if self.path.exists() else 0

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None


def _tensorboard_writer(directory: Path) -> Any:
    """A TensorBoard ``SummaryWriter`` when the ``tensorboard`` package is installed, else ``None``."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(directory))
