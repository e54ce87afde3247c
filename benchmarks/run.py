"""Speed, memory and compile benchmarks: replacing vs fine-tuning, successor vs predecessor.

    python -m benchmarks.run [--cases bert-base,minilm,resnet] [--full] [--out benchmarks/results]

For each case it measures, in one run:
1. inference latency of the predecessor and the finalized successor over batch
   sizes (eager), and at one batch size compiled with torch.compile;
2. time per training step and training memory of replacing at p = 0, 0.5, 1
   against fine-tuning the whole predecessor;
3. the engine's own overhead: a replacement step at p = 0 against the same
   predecessor with the same frozen parameters and no wrapper;
4. graphs compiled over N training steps with changing routes (compile=True).
Writes ``<out>/<case>.json`` and ``.md``, ``<out>/summary.md`` and ``<out>/latency.png``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn
from torch._dynamo.utils import counters

import theseus_core as th
from theseus_zoo.training.timing import interleaved_seconds, median_ratio

from .cases import CASES, Case
from .harness import environment, markdown_table, training_memory, write_report

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def call(model: nn.Module, case: Case, size: int) -> Any:
    args, kwargs = case.inputs(size)
    return model(*(a.to(DEVICE) for a in args), **{k: v.to(DEVICE) for k, v in kwargs.items()})


def loss_of(model: nn.Module, case: Case, size: int) -> torch.Tensor:
    return F.cross_entropy(case.logits(call(model, case, size)), case.labels(size).to(DEVICE))


def compress(case: Case, predecessor: nn.Module, **options: Any) -> tuple[nn.Module, th.Theseus]:
    model = copy.deepcopy(predecessor)
    return model, th.replace_(model, case.plan(model), seed=0, **{**case.replace_options, **options})


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def inference(case: Case, predecessor: nn.Module, successor: nn.Module, repeats: int) -> dict[str, Any]:
    """Latency of predecessor and successor, measured in turns; the speedup is the median per-turn ratio."""
    results: dict[str, Any] = {"eager": {}, "compiled": {}}

    def measure(models: dict[str, nn.Module], size: int) -> dict[str, float]:
        runs = {name: (lambda m=model: call(m, case, size)) for name, model in models.items()}
        with torch.no_grad():
            times = interleaved_seconds(runs, warmup=2, repeats=repeats, device=DEVICE)
        row = {name: statistics.median(seconds) for name, seconds in times.items()}
        row["speedup"] = median_ratio(times["predecessor"], times["successor"])
        if "successor eager" in times:
            row["compile_speedup"] = median_ratio(times["successor eager"], times["successor"])
        return row

    models = {"predecessor": predecessor, "successor": successor}
    for size in case.sizes:
        results["eager"][size] = measure(models, size)
    size = case.sizes[len(case.sizes) // 2]
    torch._dynamo.reset()
    compiled, compile_seconds = {}, {}
    for name, model in models.items():
        compiled[name] = torch.compile(model)
        start = time.perf_counter()
        with torch.no_grad():
            call(compiled[name], case, size)
        compile_seconds[f"{name}_compile_s"] = time.perf_counter() - start
    results["compiled"][size] = {**measure({**compiled, "successor eager": successor}, size), **compile_seconds}
    return results


def training(case: Case, predecessor: nn.Module, steps: int) -> dict[str, Any]:
    """Seconds per optimizer step and training memory: fine-tuning the predecessor against replacing at
    p = 0, 0.5, 1. The four configurations take turns step by step."""
    runs, models = {}, {}
    fine_tune = copy.deepcopy(predecessor)
    models["fine-tune predecessor"] = (fine_tune, list(fine_tune.parameters()))
    for rate in (0.0, 0.5, 1.0):
        model, theseus = compress(case, predecessor)
        theseus.rate = rate
        models[f"replace p={rate:g}"] = (model, list(theseus.successor_parameters()))
    for name, (model, parameters) in models.items():
        runs[name] = _training_step(model, torch.optim.AdamW(parameters, lr=1e-5), case)
    times = interleaved_seconds(runs, warmup=2, repeats=steps, device=DEVICE)
    base = times["fine-tune predecessor"]
    results = {}
    for name, (model, _) in models.items():
        # at p = 0.5 the memory depends on the routes: the largest of a few draws
        memory = max(
            (training_memory(model, lambda m=model: loss_of(m, case, case.train_size)) for _ in range(4)),
            key=lambda m: m["total"],
        )
        results[name] = {
            "step_s": statistics.mean(times[name]),  # a mean: at p = 0.5 steps differ by route
            "time_vs_fine_tune": median_ratio(times[name], base),
            "memory_mib": memory,
        }
    return results


def _training_step(model: nn.Module, optimizer: torch.optim.Optimizer, case: Case):
    def step() -> None:
        model.train()
        loss = loss_of(model, case, case.train_size)
        if loss.requires_grad:  # all groups on the frozen predecessor: nothing to update
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def engine_overhead(case: Case, predecessor: nn.Module, repeats: int) -> dict[str, float]:
    """p = 0 through the sites against the bare predecessor with the same frozen parameters.

    ``train_others=True`` leaves the head trainable so both run a backward pass."""
    wrapped = copy.deepcopy(predecessor)
    names = {id(parameter): name for name, parameter in wrapped.named_parameters()}  # before the surgery
    theseus = th.replace_(wrapped, case.plan(wrapped), seed=0, **{**case.replace_options, "train_others": True})
    theseus.rate = 0.0
    bare = copy.deepcopy(predecessor)
    for site in theseus.sites:  # the groups' parameters, frozen in the wrapped model, frozen in the bare one too
        for parameter in site.predecessor.parameters():
            bare.get_parameter(names[id(parameter)]).requires_grad_(False)

    def step(model: nn.Module) -> None:
        model.train()
        loss = loss_of(model, case, case.train_size)
        if loss.requires_grad:  # nothing to train outside the groups (the GCN): a forward-only comparison
            loss.backward()
        model.zero_grad(set_to_none=True)

    times = interleaved_seconds(
        {"wrapped": lambda: step(wrapped), "bare": lambda: step(bare)}, warmup=2, repeats=repeats, device=DEVICE
    )
    return {
        "wrapped_s": statistics.median(times["wrapped"]),
        "bare_s": statistics.median(times["bare"]),
        "ratio": median_ratio(times["wrapped"], times["bare"]),
    }


def recompilations(case: Case, predecessor: nn.Module, steps: int, warm_up: int) -> dict[str, Any]:
    torch._dynamo.reset()
    counters.clear()
    model, theseus = compress(case, predecessor, compile=True)
    optimizer = torch.optim.AdamW(list(theseus.successor_parameters()), lr=1e-5)
    theseus.rate = 0.5
    model.train()
    graphs, routes = [], set()
    start = time.perf_counter()
    for _ in range(steps):
        loss = loss_of(model, case, case.train_size)
        if loss.requires_grad:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        graphs.append(counters["stats"]["unique_graphs"])
        routes.add(tuple(theseus.last_routes.values()))
    return {
        "steps": steps,
        "warm_up_steps": warm_up,
        "graphs_after_warm_up": graphs[warm_up - 1],
        "graphs_at_end": graphs[-1],
        "graphs_compiled_after_warm_up": graphs[-1] - graphs[warm_up - 1],
        "last_new_graph_at_step": max(i for i, g in enumerate(graphs) if i == 0 or g != graphs[i - 1]) + 1,
        "distinct_route_combinations": len(routes),
        "sites": len(theseus.sites),
        "graph_breaks": sum(counters["graph_break"].values()),
        "seconds": time.perf_counter() - start,
    }


def benchmark(case: Case, args: argparse.Namespace) -> dict[str, Any]:
    print(f"== {case.name} ({case.note})", flush=True)
    predecessor = case.build().to(DEVICE).eval()
    successor, theseus = compress(case, predecessor)
    successor = theseus.finalize().eval()
    results: dict[str, Any] = {
        "case": case.name,
        "note": case.note,
        "environment": environment(),
        "parameters": {"predecessor": count(predecessor), "successor": count(successor)},
        "ideal_speedup": case.ideal_speedup,
    }
    print("  inference ...", flush=True)
    results["inference"] = inference(case, predecessor, successor, args.repeats)
    print("  training steps ...", flush=True)
    results["training"] = training(case, predecessor, args.steps)
    print("  engine overhead ...", flush=True)
    results["overhead"] = engine_overhead(case, predecessor, args.repeats * 2)
    if args.recompile_steps and case.check_recompilation:
        print(f"  recompilations over {args.recompile_steps} steps ...", flush=True)
        results["recompilation"] = recompilations(case, predecessor, args.recompile_steps, args.warm_up)
    return results


def report(results: dict[str, Any], case: Case) -> str:
    lines = [
        f"### {case.name}\n",
        f"{case.note}. Parameters: predecessor {results['parameters']['predecessor']:,}, "
        f"successor {results['parameters']['successor']:,}. Ideal speedup (layer/FLOP ratio): "
        f"{case.ideal_speedup:.2f}×.\n",
    ]
    rows = [
        [f"{size} (eager)", r["predecessor"] * 1e3, r["successor"] * 1e3, f"{r['speedup']:.2f}×"]
        for size, r in results["inference"]["eager"].items()
    ]
    for size, r in results["inference"]["compiled"].items():
        rows.append([f"{size} (compiled)", r["predecessor"] * 1e3, r["successor"] * 1e3, f"{r['speedup']:.2f}×"])
        compile_note = (
            f"torch.compile makes the successor {r['compile_speedup']:.2f}× as fast as eager at {case.size_label} "
            f"{size} (compiling took {r['predecessor_compile_s']:.0f} s and {r['successor_compile_s']:.0f} s).\n"
        )
    lines.append(markdown_table([case.size_label, "predecessor ms", "successor ms", "speedup"], rows))
    lines.append(compile_note)
    base = results["training"]["fine-tune predecessor"]
    rows = [
        [
            name,
            r["step_s"] * 1e3,
            f"{r['time_vs_fine_tune']:.2f}×",
            r["memory_mib"]["total"],
            r["memory_mib"]["activations"],
            f"{r['memory_mib']['total'] / base['memory_mib']['total']:.2f}×",
        ]
        for name, r in results["training"].items()
    ]
    lines.append(
        "\n"
        + markdown_table(
            ["training step", "ms", "time vs fine-tune", "memory MiB", "activations MiB", "memory vs fine-tune"], rows
        )
    )
    overhead = results["overhead"]
    lines.append(
        f"\nEngine overhead (p = 0 through the sites vs the bare predecessor, same frozen parameters): "
        f"{overhead['ratio']:.3f}× ({overhead['wrapped_s'] * 1e3:.1f} ms vs {overhead['bare_s'] * 1e3:.1f} ms).\n"
    )
    if "recompilation" in results:
        r = results["recompilation"]
        lines.append(
            f"\ntorch.compile over {r['steps']} training steps at p = 0.5 ({r['distinct_route_combinations']} "
            f"distinct route combinations over {r['sites']} sites): {r['graphs_after_warm_up']} graphs after "
            f"{r['warm_up_steps']} warm-up steps, {r['graphs_compiled_after_warm_up']} compiled after that (last new "
            f"graph at step "
            f"{r['last_new_graph_at_step']}).\n"
        )
    return "\n".join(lines)


def plot(all_results: dict[str, dict[str, Any]], cases: dict[str, Case], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    figure, axes = plt.subplots(1, len(all_results), figsize=(4.5 * len(all_results), 3.6), squeeze=False)
    for axis, (key, results) in zip(axes[0], all_results.items(), strict=True):
        eager = results["inference"]["eager"]
        sizes = [int(s) for s in eager]
        for name, style in (("predecessor", "o-"), ("successor", "s-")):
            axis.plot(sizes, [eager[s][name] * 1e3 for s in eager], style, label=f"{name} (eager)")
        for size, r in results["inference"]["compiled"].items():
            axis.plot([int(size)], [r["successor"] * 1e3], "k*", markersize=10, label="successor (compiled)")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel(cases[key].size_label)
        axis.set_ylabel("latency (ms)")
        axis.set_title(cases[key].name)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(f"Inference latency ({environment()['device']}, torch {torch.__version__})", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--full", action="store_true", help="paper-sized inputs (for a GPU)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per configuration")
    parser.add_argument("--recompile-steps", type=int, default=200)
    parser.add_argument("--warm-up", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.cases.split(",") if name.strip()]
    unknown = [name for name in names if name not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {', '.join(CASES)}")
    cases = {name: CASES[name](args.full) for name in names}
    all_results, sections = {}, []
    started = time.perf_counter()
    for name, case in cases.items():
        results = benchmark(case, args)
        markdown = report(results, case)
        write_report(results, args.out, name, markdown)
        all_results[name], sections = results, [*sections, markdown]
        print(markdown, flush=True)
    env = environment()
    header = (
        f"Measured on {env['device']} ({env['processor']}, {env['cpu_count']} cores, {env['torch_threads']} threads), "
        f"torch {env['torch']}, Python {env['python']}, in {time.perf_counter() - started:.0f} s.\n"
        f"Command: `python -m benchmarks.run --cases {','.join(names)}{' --full' if args.full else ''}`\n\n"
    )
    (args.out / "summary.md").write_text(header + "\n".join(sections))
    plot(all_results, cases, args.out / "latency.png")
    print(f"wrote {args.out}/summary.md and latency.png")


if __name__ == "__main__":
    main()
