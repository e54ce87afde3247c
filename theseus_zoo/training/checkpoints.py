"""Checkpoint files that cannot be half-written, cannot run code, and say when they are damaged.

A checkpoint file is the sha256 of its payload in hex, a newline, then the payload: a ``torch.save`` of the
run's state, read back with ``torch.load(weights_only=True)`` (tensors, numbers, strings and containers only:
a crafted pickle is refused, never run). Writing goes through a temporary file and a rename, and the checkpoint
it replaces is kept beside it as ``<name>.previous``: a damaged checkpoint is refused by name, with the previous
good one at hand.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch

_DIGEST = 64  # hex characters of a sha256
_ZIP = b"PK\x03\x04"  # what a bare torch.save file starts with


class CheckpointError(ValueError):
    """A checkpoint file is damaged or not one of ours; the message names it and what to do."""


def previous_of(path: Path) -> Path:
    return path.with_name(path.name + ".previous")


class _Hashing:
    """A write-only stream that passes what it is given to ``stream`` and hashes it on the way."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.digest = stream, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.stream.write(data)

    def flush(self) -> None:
        self.stream.flush()


def write_checkpoint(state: Any, path: Path) -> None:
    """Writes ``state`` to ``path`` atomically, keeping the checkpoint it replaces as ``<path>.previous``.

    The payload is streamed to the file and hashed on the way, never held whole in memory (a run that keeps every
    phase's weights writes gigabytes); the digest takes its place at the head of the file once known."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as stream:
        stream.write(b"0" * _DIGEST + b"\n")
        hashing = _Hashing(stream)
        torch.save(state, hashing)
        stream.seek(0)
        stream.write(hashing.digest.hexdigest().encode())
        stream.flush()
        os.fsync(stream.fileno())
    if path.exists():
        os.replace(path, previous_of(path))
    os.replace(temporary, path)


def read_checkpoint(path: Path) -> Any:
    """The state in ``path`` (or, when a crash fell between the two renames of `write_checkpoint`, in its previous
    file).

    Raises:
        CheckpointError: the file's payload does not match its checksum, or does not load as plain tensors and
            containers (a crafted pickle is refused here, without running anything).
    """
    if not path.exists() and previous_of(path).exists():
        path = previous_of(path)
    data = path.read_bytes()
    if data.startswith(_ZIP):  # written before checksums (theseus 0.1.0): loaded safely, but unverified
        data = hashlib.sha256(data).hexdigest().encode() + b"\n" + data
    digest, payload = data[:_DIGEST], data[_DIGEST + 1 :]
    previous = previous_of(path)
    hint = (
        f"; the previous good checkpoint is {previous}: rename it to {path.name} to resume from there"
        if previous.exists() and previous != path
        else ""
    )
    if (
        len(data) <= _DIGEST
        or data[_DIGEST : _DIGEST + 1] != b"\n"
        or hashlib.sha256(payload).hexdigest().encode() != digest
    ):
        raise CheckpointError(f"{path} is damaged or not a theseus checkpoint (its checksum does not match){hint}")
    try:
        with warnings.catch_warnings():  # torch warns about a foreign pickle protocol before refusing it
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(io.BytesIO(payload), weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{path} does not load as a plain checkpoint ({first}){hint}") from None
