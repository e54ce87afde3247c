"""What a run needs when it is one of several processes (``torchrun --nproc_per_node N``): values gathered from
every rank, rank 0's word, recipes that must agree, and each rank's RNG for training forwards.

Every function here is the identity (or does nothing) in a single process, so the trainer calls them
unconditionally. They use ``torch.distributed`` directly (the process group `accelerate.Accelerator` joined): the
same calls run on gloo (CPU) and nccl (GPUs).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_gather(value: T) -> list[T]:
    """``value`` of every rank, in rank order (``[value]`` in one process). Any picklable value; every rank must
    call it at the same point."""
    if not _distributed():
        return [value]
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def from_rank_zero(value: T) -> T:
    """Rank 0's ``value`` on every rank (what the others pass is ignored; ``value`` itself in one process)."""
    if not _distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def average_gradients(parameters: list[torch.nn.Parameter]) -> None:
    """Replaces each gradient by its mean over ranks (in place; nothing to do on one process): for a loss that runs
    trained modules outside the DDP wrapper's forward, whose gradients DDP does not average (`Objective`'s
    ``outside_wrapper``). A parameter without gradient on one rank has none on every rank (same routes, same
    modules), so the collectives pair up."""
    if not _distributed():
        return
    for parameter in parameters:
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)
            parameter.grad /= dist.get_world_size()


def wait_for_everyone() -> None:
    """A barrier: returns once every rank has called it."""
    if _distributed():
        dist.barrier()


def leave() -> None:
    """Waits for every rank, then leaves the process group: a rank that prints on the way out (rank 0's report,
    rank 0's one-line error) is done before the launcher sees the others exit and stops the group."""
    if _distributed():
        dist.barrier()
        dist.destroy_process_group()


def disagreement(recipes: list[Mapping[str, Any]], where: Sequence[str] | None = None) -> str | None:
    """``None`` when every rank's recipe (`Recipe.to_dict`) is the same; else the differing fields with each rank's
    value, e.g. ``"seed: 1 on rank 0, 2 on rank 1"``. ``where`` names each recipe instead of its rank (``["in the
    run", "given now"]``: a run resumed with another recipe)."""
    flat = [_flatten(recipe) for recipe in recipes]
    where = where or [f"on rank {rank}" for rank in range(len(flat))]
    fields = sorted({key for recipe in flat for key in recipe if len({json.dumps(r.get(key)) for r in flat}) > 1})
    if not fields:  # the same values, lists and tuples alike
        return None
    named = list(zip(where, flat, strict=True))
    return "; ".join(
        f"{key}: " + ", ".join(f"{json.dumps(recipe.get(key))} {place}" for place, recipe in named) for key in fields
    )


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"replacing": {"lr": 1e-3}}`` -> ``{"replacing.lr": 1e-3}``."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, Mapping):
            flat.update(_flatten(item, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = item
    return flat


def fingerprint(state: Mapping[str, Any]) -> str:
    """12 hex characters of the sha256 of a state dict of tensors, numbers, strings and lists (a `Theseus` handle's
    routing state, a `ForwardRng` state): equal states, equal fingerprints, whatever the rank."""
    digest = hashlib.sha256()
    for key in sorted(state):
        value = state[key]
        digest.update(key.encode())
        if isinstance(value, torch.Tensor):
            digest.update(value.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        else:
            digest.update(json.dumps(value, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:12]


class ForwardRng:
    """The torch RNG of one rank's training forwards (dropout masks), apart from the RNG all ranks share.

    In a multi-process run the global RNG stays in step on every rank, for what must agree (initialisations,
    the fresh baselines), and each rank draws its training forwards from this stream, seeded from the recipe seed
    and the rank: otherwise every rank would drop the same units of its part of the batch, and two processes would
    train like one with half the dropout noise. `active` swaps it in (CPU, and the rank's GPU) and keeps where it
    got to; `state` goes into every checkpoint, so a resume continues each rank's stream.

    Args:
        seed: The recipe's seed.
        rank: The process's rank.
        device: The process's device; on a GPU, its CUDA generator is swapped too.
    """

    def __init__(self, seed: int, rank: int, device: torch.device) -> None:
        self.recipe_seed, self.rank, self.device = seed, rank, torch.device(device)
        self.restart("")

    def restart(self, stream: str) -> None:
        """Starts this rank's forward stream of ``stream`` (a method's name; ``""`` before any), from the recipe
        seed, the stream and the rank alone: what a method draws never depends on what trained before it."""
        digest = hashlib.sha256(f"{self.recipe_seed}:forward:{self.rank}{':' + stream if stream else ''}".encode())
        self.seed = int.from_bytes(digest.digest()[:8], "little") & (2**63 - 1)
        self.state: dict[str, torch.Tensor] = {"torch": torch.Generator().manual_seed(self.seed).get_state()}

    @contextmanager
    def active(self) -> Iterator[None]:
        """Within the block the global RNG is this rank's forward stream; after it, the shared one as it was."""
        cuda = self.device.type == "cuda"
        with torch.random.fork_rng(devices=[self.device] if cuda else []):
            torch.set_rng_state(self.state["torch"])
            if cuda and "cuda" in self.state:
                torch.cuda.set_rng_state(self.state["cuda"], self.device)
            elif cuda:
                with torch.cuda.device(self.device):
                    torch.cuda.manual_seed(self.seed)
            yield
            self.state = {"torch": torch.get_rng_state()}
            if cuda:
                self.state["cuda"] = torch.cuda.get_rng_state(self.device)
