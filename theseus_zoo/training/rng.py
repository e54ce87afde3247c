"""The random streams of a run: the RNG every rank shares (initialisations, and in one process dropout masks), each
rank's forward stream in a run on several processes (`theseus_zoo.training.ranks.ForwardRng`), and a stream per
method (`RunRng.start_stream`), saved in every checkpoint so that a resume draws what an uninterrupted run would."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import torch

from . import ranks


def stream_seed(seed: int, name: str) -> int:
    """The seed of the random stream ``name`` (a method's full name) of a run seeded ``seed``: a hash of both."""
    digest = hashlib.sha256(f"{seed}:method:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def rng_state(forward: ranks.ForwardRng | None = None) -> dict[str, Any]:
    """The shared RNG states (the same on every rank), and with ``forward`` every rank's forward stream, gathered
    (a collective: every rank calls it)."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if forward is not None:
        state["forward"] = ranks.all_gather(forward.state)
    return state


def set_rng_state(state: dict[str, Any], forward: ranks.ForwardRng | None = None, rank: int = 0) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]  # `random.setstate` wants tuples; a checkpoint may give lists back
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    saved = state.get("forward")
    if forward is not None and saved is not None and rank < len(saved):  # else: another number of processes
        forward.state = saved[rank]


class RunRng:
    """One rank's view of the run's random streams.

    Args:
        seed: The recipe's seed.
        rank: The process's rank.
        processes: How many processes the run has; with more than one, each rank's training forwards draw from a
            stream of their own (``forward``), else from the shared RNG, as they always did.
        device: The process's device.
    """

    def __init__(self, seed: int, rank: int, processes: int, device: torch.device) -> None:
        self.seed, self.rank = seed, rank
        self.forward = ranks.ForwardRng(seed, rank, device) if processes > 1 else None

    def state(self) -> dict[str, Any]:
        """Every stream's state (a collective with several processes: every rank calls it)."""
        return rng_state(self.forward)

    def restore(self, state: dict[str, Any]) -> None:
        set_rng_state(state, self.forward, self.rank)

    def start_stream(self, name: str) -> None:
        """Seeds every RNG a method draws from (the shared torch and Python RNGs: fresh initialisations, dropout
        masks; with several processes each rank's forward stream) from the recipe seed and ``name`` alone
        (`stream_seed`), so that a method trains the same whichever methods ran before it in the run. Data order is
        shared by design (`theseus_zoo.training.data_order`)."""
        seed = stream_seed(self.seed, name)
        torch.manual_seed(seed)
        random.seed(seed)
        if self.forward is not None:
            self.forward.restart(name)
