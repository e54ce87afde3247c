"""End-to-end Theseus compression of a toy model, run by ``make demo``.

A synthetic 4-class problem (labels from a fixed random teacher network), an
8-block residual MLP as the predecessor, compressed to 3 blocks with uneven
groups (3, 3, 2), the linear curriculum, then successor fine-tuning. The
baseline fine-tunes the predecessor's bottom 3 blocks for the same number of
steps. Everything is seeded; it takes well under a minute on 2 CPU cores.

    python -m theseus_zoo.toy [--seed 0] [--epochs 6]
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

import theseus_core as th
from theseus_core.testing import ToyStack

NUM_FEATURES, NUM_CLASSES = 16, 4


def make_data(seed: int, train: int = 4000, test: int = 2000) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """Inputs ~ N(0, I); labels = argmax of a fixed random two-layer teacher."""
    generator = torch.Generator().manual_seed(seed)
    teacher_in = torch.randn(NUM_FEATURES, 64, generator=generator)
    teacher_out = torch.randn(64, NUM_CLASSES, generator=generator)
    inputs = torch.randn(train + test, NUM_FEATURES, generator=generator)
    labels = (torch.tanh(inputs @ teacher_in) @ teacher_out).argmax(dim=1)
    return (inputs[:train], labels[:train]), (inputs[train:], labels[train:])


def batches(data: tuple[torch.Tensor, torch.Tensor], batch_size: int, generator: torch.Generator) -> Iterator:
    inputs, labels = data
    order = torch.randperm(len(inputs), generator=generator)
    for start in range(0, len(inputs), batch_size):
        index = order[start : start + batch_size]
        yield inputs[index], labels[index]


@torch.no_grad()
def accuracy(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> float:
    model.eval()
    inputs, labels = data
    return (model(inputs).argmax(dim=1) == labels).float().mean().item()


def fit(model, parameters, data, *, epochs, lr, seed, theseus=None, schedule=None, log="") -> int:
    """Plain AdamW loop. With a Theseus handle, the rate follows ``schedule`` per optimizer step."""
    optimizer = torch.optim.AdamW(list(parameters), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    step = 0
    for epoch in range(epochs):
        model.train()
        skipped, losses = 0, []
        for inputs, labels in batches(data, 64, generator):
            if theseus is not None:
                theseus.rate = schedule(step)
            loss = F.cross_entropy(model(inputs), labels)
            losses.append(loss.item())
            if loss.requires_grad:
                loss.backward()
                optimizer.step()
            else:
                skipped += 1  # every group took its frozen predecessor: nothing to learn from this batch
            optimizer.zero_grad()
            step += 1  # the step counts for the schedule either way
        rate = f", rate {theseus.rate:.2f}, {skipped} all-predecessor batches" if theseus is not None else ""
        print(f"  {log} epoch {epoch + 1}/{epochs}: mean loss {sum(losses) / len(losses):.3f}{rate}")
    return step


def latency(model: nn.Module, inputs: torch.Tensor, repeats: int = 50) -> float:
    model.eval()
    with torch.no_grad():
        for _ in range(5):
            model(inputs)
        start = time.perf_counter()
        for _ in range(repeats):
            model(inputs)
    return (time.perf_counter() - start) / repeats


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=6, help="epochs per phase (default: 6)")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    train, test = make_data(args.seed)
    steps_per_epoch = -(-len(train[0]) // 64)

    print("1. Training the predecessor (8 blocks)")
    predecessor = ToyStack(in_features=NUM_FEATURES, width=64, num_blocks=8, num_classes=NUM_CLASSES, dropout=0.1)
    fit(predecessor, predecessor.parameters(), train, epochs=args.epochs, lr=3e-3, seed=args.seed, log="predecessor")
    predecessor_accuracy = accuracy(predecessor, test)

    print("2. Theseus: 8 blocks -> 3 (groups of 3, 3, 2), curriculum then successor fine-tuning")
    model = copy.deepcopy(predecessor)
    plan = th.plan(model, "blocks", group_sizes=[3, 3, 2], successor=th.copy_module(0))
    theseus = th.replace_(model, plan, seed=args.seed, example_inputs=(test[0][:4],))
    schedule = th.LinearSchedule.reaching_one_at(steps_per_epoch * args.epochs, base=0.3)
    print(theseus)
    fit(
        model,
        theseus.successor_parameters(),
        train,
        epochs=2 * args.epochs,  # replacing until p = 1, then successor fine-tuning
        lr=1e-3,
        seed=args.seed,
        theseus=theseus,
        schedule=schedule,
        log="theseus",
    )
    print(theseus)
    compact = theseus.finalize()
    theseus_accuracy = accuracy(compact, test)

    print("3. Baseline: the bottom 3 blocks, fine-tuned for the same number of steps")
    truncated = copy.deepcopy(predecessor)
    truncated.blocks = nn.Sequential(*list(truncated.blocks)[:3])
    fit(truncated, truncated.parameters(), train, epochs=2 * args.epochs, lr=1e-3, seed=args.seed, log="truncated")
    truncated_accuracy = accuracy(truncated, test)

    speedup = latency(predecessor, test[0]) / latency(compact, test[0])
    print()
    print("| model | blocks | parameters | test accuracy |")
    print("|---|---|---|---|")
    print(f"| predecessor | 8 | {count(predecessor):,} | {predecessor_accuracy:.4f} |")
    print(f"| Theseus successor | 3 | {count(compact):,} | {theseus_accuracy:.4f} |")
    print(f"| bottom-3 fine-tuned | 3 | {count(truncated):,} | {truncated_accuracy:.4f} |")
    print(
        f"\nTheseus keeps {100 * theseus_accuracy / predecessor_accuracy:.1f}% of the predecessor's accuracy; "
        f"the compact model runs {speedup:.2f}x faster on a batch of {len(test[0])} (measured, eager, CPU)."
    )
    return {
        "predecessor": predecessor_accuracy,
        "theseus": theseus_accuracy,
        "truncated": truncated_accuracy,
        "speedup": speedup,
    }


if __name__ == "__main__":
    main()
