"""What every family's export ends with: the files it wrote get one mode, and the export holds the model.

A family's ``Task.export`` writes the compact model in its ordinary format, then calls `hold_export`: every file
gets the mode a new file gets (``0o666`` less the umask: ``save_pretrained`` writes ``model.safetensors`` 0600
while Python writes the config 0644), and the export is reloaded as a user would, strictly (no missing, unexpected
or mismatched key), and run on a batch in eval mode beside the model; unless it computes what the model computes,
the files go and the export refuses in one line.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

RTOL, ATOL = 1.3e-6, 1e-5
"""How close the reloaded model's outputs must be (torch.testing's float32 defaults: a reload may pick another
attention kernel)."""


class ExportRefusedError(ValueError):
    """The export did not reload strictly or computes something else than the model; its files were removed."""


def file_mode() -> int:
    """The mode a new file gets here: ``0o666`` less the process's umask (read without changing it on Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def strictly(loaded: tuple[nn.Module, Mapping[str, Any]]) -> nn.Module:
    """The model of ``from_pretrained(..., output_loading_info=True)``; raises when a key was missing, unexpected or
    of another shape (transformers only warns)."""
    model, info = loaded
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        keys = sorted(map(str, info.get(kind) or ()))
        if keys:
            more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
            raise ValueError(f"{kind.replace('_', ' ')}: {', '.join(keys[:3])}{more}")
    return model


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_to(item, device) for item in value)
    if isinstance(value, Mapping):
        return {key: _to(item, device) for key, item in value.items()}
    return value


def _outputs(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _outputs(item)]
    if isinstance(value, Mapping):
        return [t for item in value.values() for t in _outputs(item)]
    return [t for t in (getattr(value, "logits", None),) if isinstance(t, torch.Tensor)]


def hold_export(
    files: list[Path],
    model: nn.Module,
    reload: Callable[[], nn.Module],
    forward: Callable[[nn.Module, Any], Any],
    batch: Any,
) -> list[Path]:
    """Gives ``files`` one mode (`file_mode`) and checks that the export holds ``model``.

    Args:
        files: What the export wrote.
        model: The model exported (its mode is kept).
        reload: Loads the export as a user would, and raises unless every key matched (`strictly`).
        forward: ``forward(model, batch)``, the task's.
        batch: A batch for ``forward``, moved to the model's device.

    Returns:
        ``files``.

    Raises:
        ExportRefusedError: The export does not reload strictly, or its outputs on ``batch`` (eval mode) differ from
            the model's beyond `RTOL` / `ATOL`; the files were removed. One line.
    """
    mode = file_mode()
    for path in files:
        path.chmod(mode)
    directory = files[0].parent if files else Path(".")
    training = model.training
    try:
        reloaded = reload()
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        reloaded.to(device).eval()
        model.eval()
        with torch.no_grad():
            expected, actual = (
                _outputs(forward(model, _to(batch, device))),
                _outputs(forward(reloaded, _to(batch, device))),
            )
        if len(actual) != len(expected) or not all(
            a.shape == e.shape and torch.allclose(a.float(), e.float(), rtol=RTOL, atol=ATOL)
            for a, e in zip(actual, expected, strict=False)
        ):
            gap = max(
                ((a.float() - e.float()).abs().max().item() for a, e in zip(actual, expected, strict=False)), default=0
            )
            raise ValueError(f"its outputs differ from the compressed model's by up to {gap:.3g}")
    except Exception as error:
        for path in files:
            path.unlink(missing_ok=True)
        cause = " ".join(str(error).split())[:300] or type(error).__name__  # one line
        raise ExportRefusedError(
            f"export refused: the model written to {directory} does not reload as the compressed model ({cause}); "
            f"its files were removed"
        ) from error
    finally:
        model.train(training)
    return files
