"""The memory model of `benchmarks.fsdp_memory` against a measured per-rank peak: SmolLM2 30 -> 15 on CPUs.

    python -m benchmarks.fsdp_measure [--runs ddp:1 fsdp:1 fsdp:2] [--steps 3] [--threads 1]
                                      [--out benchmarks/results]

Each run is ``torchrun --standalone --nproc_per_node N`` over gloo (one DDP process: a plain process, as
``theseus compress`` runs without torchrun); each rank builds the ``smollm2-30to15`` recipe's Theseus stage as
``theseus compress`` does (its task, predecessor, model and objective), prepares it with the strategy ``--parallel``
names (`theseus_zoo.training.sharding.parallel_for`: the twin sharded layer by layer under FSDP2, the model itself
under DDP), runs one step with every group on its successor (so that every successor has AdamW state, as in a run
past its first steps: DDP's AdamW creates it at a parameter's first gradient, FSDP2's preparation at once), then
``--steps`` measured steps in the loop's order (forward and loss on the rank's share of the recipe's batch, the
logged mean, backward, clipping, AdamW, gradients set to None). Every measured step takes the routes the model's
activation term is written for, its worst case: the first group on its successor, every later group on its
predecessor (a routing state whose generator draws that, loaded before each step with `Theseus.load_state_dict`).

**What "per-rank peak" means here.** A GPU run would report ``torch.cuda.max_memory_allocated``: the most bytes of
tensors the device held at once. The CPU equivalent measured is the stage's tensors, as PyTorch's CPU allocator
counts them: what the stage holds when a step begins (the trained model's parameters and buffers, as local shards
under FSDP2, and AdamW's state, counted tensor by tensor, each storage once; gradients are None and every FSDP2
unit resharded then), plus the most bytes the step allocated and had not yet freed (``torch.profiler`` with
``profile_memory``, which sees every CPU allocation and free: `window_growths`). What a CPU rank holds beside it is left
out, as the model leaves it out: the whole model under replacement (FSDP2 shards a copy of it; on a GPU it stays
in host memory), the predecessor the method was built from, the data, Python and the libraries. Recorded beside it,
not compared: the peak of the preparation (FSDP2's copy is whole until `fully_shard` splits it: host memory on a
GPU), and the process's resident-set growth over the measured steps (the operating system's view: ``VmHWM``, reset
when they begin, minus ``VmRSS`` then; freed blocks glibc keeps or reuses make it differ either way).

The prediction is `benchmarks.fsdp_memory.per_rank` for the same configuration: the rank's tokens (the recipe's
4 × 128 split over the ranks), fp32 everywhere (``gpu=False``: CPUs train in fp32, no mixed precision). Writes
``<out>/fsdp-memory.json`` and ``.md``; `markdown` renders the table of docs/past-one-gpu.md from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .fsdp_memory import GB, PARTS, SMOLLM2, per_rank
from .harness import environment, markdown_table, write_report

RESULTS = Path(__file__).resolve().parent / "results"
RECIPE = "smollm2-30to15"
SUCCESSORS = 15
NAME = "fsdp-memory"


def worst_routes(sites: int, seed_limit: int = 10_000) -> tuple[int, float]:
    """A generator seed and a rate whose ``sites`` draws (`theseus_core.site.Router`: successor when the uniform
    is below the rate) put the first site on its successor and every other on its predecessor."""
    import torch

    for seed in range(seed_limit):
        generator = torch.Generator().manual_seed(seed)
        draws = [torch.rand((), generator=generator).item() for _ in range(sites)]
        if draws[0] < min(draws[1:]):
            return seed, (draws[0] + min(draws[1:])) / 2
    raise RuntimeError(f"no seed below {seed_limit} draws the worst-case routes")


def _storages(tensors: list[Any]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a DTensor's local shard for a DTensor)."""
    seen: dict[int, int] = {}
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        storage = local.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def window_growths(profile: Any, windows: tuple[str, ...]) -> dict[str, tuple[int, str]]:
    """Per ``torch.profiler.record_function`` window of ``windows``: the most bytes allocated inside it and not yet
    freed, and the operator that reached it.

    Read from the allocator's running total (``total_allocated``: the blocks allocated while it profiles, not yet
    freed), from the window's start: the total itself drifts up between windows, by the blocks gloo's own threads
    free (the profiler records the threads it was started on: FSDP2's reduce-scatter clones the gradients, gloo
    frees the clone), but no collective of a step frees anything before the step's peak (the start of the
    backward pass, at the loss)."""
    from torch._C._profiler import _EventType

    nodes = []
    stack = list(profile.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        nodes.append(node)
    allocations = sorted((node for node in nodes if node.tag == _EventType.Allocation), key=lambda n: n.start_time_ns)
    spans = {node.name: (node.start_time_ns, node.end_time_ns) for node in nodes if node.name in windows}
    found = {}
    for window, (start, end) in spans.items():
        inside = [node for node in allocations if start <= node.start_time_ns <= end]
        if not inside:
            found[window] = (0, "")
            continue
        first = inside[0].extra_fields
        at_start = first.total_allocated - first.alloc_size
        top = max(inside, key=lambda node: node.extra_fields.total_allocated)
        names, parent = [], top.parent
        while parent is not None and len(names) < 3:
            names.append(parent.name)
            parent = parent.parent
        found[window] = (top.extra_fields.total_allocated - at_start, " < ".join(names))
    return found


def worker(parallel: str, steps: int, threads: int, out: Path) -> None:
    """One rank: the stage built and prepared, ``steps`` steps measured; writes ``<out>/rank<r>.json``."""
    import torch
    from accelerate import Accelerator, DistributedDataParallelKwargs
    from torch.profiler import ProfilerActivity, profile, record_function

    from theseus_zoo.recipes import get_recipe
    from theseus_zoo.tasks import build_task
    from theseus_zoo.training.methods import Context, methods_of, to_device
    from theseus_zoo.training.sharding import Parallelism, parallel_for

    torch.set_num_threads(threads)
    # as `theseus_zoo.training.session.Session` builds it: under torchrun, joins the process group
    accelerator = Accelerator(cpu=True, kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
    rank, processes = accelerator.process_index, accelerator.num_processes
    recipe = get_recipe(RECIPE)
    task = build_task(recipe.family, recipe.options, recipe.seed)
    predecessor = task.build_predecessor()
    (method,) = [method for method in methods_of(recipe) if method.name == "theseus"]
    trainee = method.build(Context(task, recipe.for_method(method.full_name), predecessor))
    (stage,) = [stage for stage in trainee.stages if stage.name == "replacing"]
    objective, phase = stage.objective(), stage.phase
    theseus = objective.theseus
    strategy = parallel_for(Parallelism(parallel), accelerator, task)

    train = task.dataset("train")
    per_process = max(1, phase.batch_size // processes)
    indices = list(range(phase.batch_size))[rank::processes][:per_process]
    batch = to_device(task.collate([train[i] for i in indices]), accelerator.device)
    tokens = int(batch["input_ids"].numel())
    seed, rate = worst_routes(len(theseus.sites))
    worst = {**theseus.state_dict(), "rate": rate, "generator_state": torch.Generator().manual_seed(seed).get_state()}

    routes = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiled:
        with record_function("prepare"):
            prepared = strategy.prepare(trainee.model, objective, phase)
        model, optimizer = prepared.model, prepared.optimizer

        def step() -> None:  # the loop's order
            model.train()
            value, _ = objective.loss(model, batch)
            accelerator.reduce(value.detach(), "mean")  # the loop's logged mean: one all-reduce
            strategy.backward(prepared, value, objective.outside_wrapper)
            strategy.clip_grad_norm_(prepared, phase.max_grad_norm or float("inf"))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        theseus.rate = 1.0  # every successor has had a gradient, and AdamW state, as a run has after its first steps
        step()
        rss_before = _status("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM from now on
        for index in range(steps):
            with record_function(f"step {index + 1}"):
                theseus.load_state_dict(worst)
                step()
            routes.append([bool(route) for route in theseus.last_routes.values()])
    rss_growth = _status("VmHWM") - rss_before
    windows = [f"step {index + 1}" for index in range(steps)]
    growths = window_growths(profiled, ("prepare", *windows))
    optimizer_state = [value for state in optimizer.state.values() for value in state.values() if value.dim() > 0]
    held = {
        "parameters": _storages([*model.parameters(), *model.buffers()]),
        "optimizer": _storages(optimizer_state),
    }
    at_start = sum(held.values())  # what a step starts with: gradients are None, every layer resharded
    before = held["parameters"] if parallel == "ddp" else 0  # DDP trains the model in place, allocated earlier
    result = {
        "rank": rank,
        "processes": processes,
        "parallel": parallel,
        "tokens": tokens,
        "routes": routes,
        "held": held,
        "step_growths": [growths[window][0] for window in windows],
        "peak": at_start + max(growths[window][0] for window in windows),
        "peak_during": max((growths[window] for window in windows), key=lambda found: found[0])[1],
        "prepare_peak": before + growths["prepare"][0],
        "rss_growth": rss_growth,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(result, indent=2))


def launch(parallel: str, processes: int, steps: int, threads: int) -> list[dict[str, Any]]:
    """One run under torchrun (one DDP process: a plain process, as ``theseus compress`` runs without torchrun):
    every rank's result."""
    with tempfile.TemporaryDirectory() as folder:
        torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
        command = [
            sys.executable,
            *(torchrun if parallel == "fsdp" or processes > 1 else []),
            "-m",
            "benchmarks.fsdp_measure",
            "--worker",
            parallel,
            "--steps",
            str(steps),
            "--threads",
            str(threads),
            "--out",
            folder,
        ]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        subprocess.run(command, check=True, env=env, cwd=Path(__file__).resolve().parent.parent)
        return [json.loads((Path(folder) / f"rank{rank}.json").read_text()) for rank in range(processes)]


def prediction(parallel: str, processes: int, tokens: int) -> dict[str, float]:
    """The model's bytes per rank for a measured run: its tokens per rank, fp32."""
    return per_rank(SMOLLM2, SUCCESSORS, processes, parallel, tokens=tokens, gpu=False)


def markdown_rows(results: dict[str, Any]) -> str:
    """The table of docs/past-one-gpu.md: the measured peaks of the JSON against the model as it is now."""
    rows = []
    for run in results["runs"]:
        predicted = prediction(run["parallel"], run["processes"], run["ranks"][0]["tokens"])
        for rank in run["ranks"]:
            measured = rank["peak"]
            rows.append(
                [
                    run["parallel"],
                    str(run["processes"]),
                    str(rank["rank"]),
                    str(rank["tokens"]),
                    f"{sum(rank['held'].values()) / GB:.3f}",
                    f"{max(rank['step_growths']) / GB:.3f}",
                    f"{measured / GB:.3f}",
                    f"{predicted['total'] / GB:.3f}",
                    f"{100 * (predicted['total'] - measured) / measured:+.1f}%".replace("-", "−"),
                    f"{rank['prepare_peak'] / GB:.3f}",
                    f"{rank['rss_growth'] / GB:.3f}",
                ]
            )
    return markdown_table(
        [
            "parallel",
            "processes",
            "rank",
            "tokens",
            "held when a step begins (GB)",
            "a step's peak above it (GB)",
            "measured peak (GB)",
            "model (GB)",
            "model − measured",
            "prepare's peak (GB, not compared)",
            "RSS growth over the steps (GB, not compared)",
        ],
        rows,
    )


def markdown(results: dict[str, Any]) -> str:
    """``fsdp-memory.md``: the table and the model's parts per run."""
    parts = []
    for run in results["runs"]:
        predicted = prediction(run["parallel"], run["processes"], run["ranks"][0]["tokens"])
        parts.append([run["parallel"], str(run["processes"]), *(f"{predicted[key] / GB:.3f}" for key in PARTS)])
    return "\n".join(
        [
            "# The per-rank memory model against measured peaks: SmolLM2 30 -> 15 on CPUs (gloo, fp32)\n",
            f"{results['steps']} replacing steps of `{RECIPE}` per run, every step on the worst-case routes (the "
            "first group on its successor, every later group on its predecessor); the measured peak is the stage's "
            "tensors held when a step begins plus the most the step allocated and had not freed (PyTorch's CPU "
            "allocator, `torch.profiler`); the model is `benchmarks.fsdp_memory.per_rank` with the rank's tokens "
            "in fp32 (`benchmarks.fsdp_measure` says what each column counts).\n",
            markdown_rows(results),
            "\nThe model's parts (GB per rank):\n",
            markdown_table(["parallel", "processes", *PARTS], parts),
            f"\nCommand: `{results['command']}`.\n",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", default=["ddp:1", "fsdp:1", "fsdp:2"], help="parallel:processes")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--worker", choices=("ddp", "fsdp"), help=argparse.SUPPRESS)  # one rank, under torchrun
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.steps, args.threads, args.out)
        return
    spelled_runs = [spelled.split(":") for spelled in args.runs]
    if not all(len(run) == 2 and run[0] in ("ddp", "fsdp") and run[1].isdigit() for run in spelled_runs):
        parser.error(f"--runs takes parallel:processes, e.g. fsdp:2, got {' '.join(args.runs)}")
    runs = []
    for parallel, processes in spelled_runs:
        ranks = launch(parallel, int(processes), args.steps, args.threads)
        runs.append({"parallel": parallel, "processes": int(processes), "ranks": ranks})
        print(json.dumps(runs[-1], indent=2), flush=True)
    command = shlex.join(["python", "-m", "benchmarks.fsdp_measure", *(sys.argv[1:] if argv is None else argv)])
    results = {"command": command, "environment": environment(), "steps": args.steps, "runs": runs}
    write_report(results, args.out, NAME, markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
