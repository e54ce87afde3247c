"""Which training examples each step of a stage sees: `DataOrder` (epochs of batches in a seeded order, a
function of the step alone) and `labelled_split` (the examples that keep their labels when a recipe has few)."""

from __future__ import annotations

import torch

from .optimization import data_order_generator


def labelled_split(size: int, labelled_examples: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The training examples that keep their labels and those that do not (`Recipe.labelled_examples`): a fixed
    sample (generator seed 0, whatever the run's seed), both in index order; every example is labelled when
    ``labelled_examples`` is ``None``. Raises `ValueError` unless it is below ``size``."""
    if labelled_examples is None:
        return torch.arange(size), torch.arange(0)
    if not 1 <= labelled_examples < size:
        raise ValueError(
            f"labelled_examples={labelled_examples} must be below the {size} examples of the training split (leave "
            f"it out to keep every label)"
        )
    sample = torch.randperm(size, generator=torch.Generator().manual_seed(0))
    return sample[:labelled_examples].sort().values, sample[labelled_examples:].sort().values


class DataOrder:
    """The examples each step of a stage trains on: epochs over ``indices`` (of the training split) in batches of
    ``batch_size``, the last partial batch dropped, each epoch in an order from `data_order_generator` (``seed``,
    ``stream``, epoch). A function of the step alone, so that a resumed stage goes on exactly where it stopped.
    A ``batch_size`` at or above ``len(indices)`` gives full-batch epochs of one step each: every example, every
    step (`Phase.batch_size`)."""

    def __init__(self, indices: torch.Tensor, batch_size: int, seed: int, stream: str) -> None:
        self.indices, self.batch_size, self.seed, self.stream = indices, batch_size, seed, stream
        self.steps_per_epoch = max(1, len(indices) // batch_size)
        self._epoch, self._order = -1, indices

    def batch(self, step: int) -> torch.Tensor:
        epoch, index = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            generator = data_order_generator(self.seed, self.stream, epoch)
            self._epoch, self._order = epoch, self.indices[torch.randperm(len(self.indices), generator=generator)]
        return self._order[index * self.batch_size : (index + 1) * self.batch_size]
