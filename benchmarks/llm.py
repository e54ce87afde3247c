"""Decoder-LLM depth compression through one evaluation: starts, ShortGPT, LLM-Streamline and finished runs.

    python -m benchmarks.llm [--layers 15] [--split test] [--runs RUN_DIR ...] [--calibration 64]
                             [--streamline-steps 100] [--streamline-lr 1e-4] [--new-tokens 24] [--threads 2]
                             [--options JSON] [--out benchmarks/results] [--name llm-15l] [--resume]

For one depth, on the ``causal_lm`` family's corpus and sequences (``--options`` changes its options: another
model, corpus, sequence length): the predecessor; the untrained ``num_layers``-layer models the plan's inits start
from (``first``, ``every_other``, ``group_last``); ShortGPT (the layers of highest Block Influence, untrained);
LLM-Streamline after its MSE stage, before any LM fine-tuning; and, for every ``theseus compress`` run directory
given with ``--runs``, the test metrics its ``report.json`` holds for each of its models (the Theseus successor
and the fine-tuned baselines: ``truncated``, ``kd``, or ShortGPT / Streamline with ``options.truncation``) and its
exported ``model/`` folder, loaded with plain transformers and measured here.

Every model measured here gets the perplexity on ``--split`` (the same sequences for all) with a bootstrap
standard error, its parameter count, prefill tokens/s (``eval_batch_size`` sequences in one forward, median of 3)
and greedy decode tokens/s (batch 1, KV cache, ``--new-tokens`` tokens), and a greedy continuation of each of
`PROMPTS`. Writes ``<out>/<name>.json`` and ``<out>/<name>.md``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from theseus_zoo.training.results import Report

from .harness import environment, markdown_table, write_report

PROMPTS = ("The capital of France is", "Shares in the company rose after", "The film is a")


def measure(task: Any, model: nn.Module, split: str, new_tokens: int) -> dict[str, Any]:
    """Perplexity (with a bootstrap standard error), parameters, prefill and decode speed, greedy generations."""
    from theseus_zoo.training.stats import bootstrap_standard_error

    model.eval()
    started = time.perf_counter()
    nll = task.predictions(model, split)
    metrics = task.score(nll, split)
    evaluation_seconds = time.perf_counter() - started
    error = bootstrap_standard_error(lambda chosen: task.score(nll, split, chosen)["perplexity"], len(nll))
    batch = task.latency_batch()
    prefill = []
    with torch.no_grad():
        task.forward(model, batch)  # warm-up
        for _ in range(3):
            started = time.perf_counter()
            task.forward(model, batch)
            prefill.append(time.perf_counter() - started)
    tokenizer = task.tokenizer()
    generations, decode = [], []
    for prompt in PROMPTS:
        inputs = tokenizer(prompt, return_tensors="pt", return_token_type_ids=False)  # generate() refuses them
        started = time.perf_counter()
        with torch.no_grad():
            tokens = model.generate(
                **inputs,
                do_sample=False,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=tokenizer.eos_token_id,
            )
        decode.append(new_tokens / (time.perf_counter() - started))
        generations.append(tokenizer.decode(tokens[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))
    return {
        **metrics,
        "perplexity_standard_error": error,
        "evaluation_seconds": evaluation_seconds,
        "parameters": sum(parameter.numel() for parameter in model.parameters()),
        "layers": model.config.num_hidden_layers,
        "prefill_tokens_per_second": batch["input_ids"].numel() / statistics.median(prefill),
        "decode_tokens_per_second": statistics.median(decode),
        "generations": generations,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=15, help="depth of the compressed models")
    parser.add_argument("--split", default="test", choices=("dev", "test"))
    parser.add_argument("--runs", type=Path, nargs="*", default=[], help="theseus compress output directories")
    parser.add_argument("--calibration", type=int, default=64, help="training sequences ShortGPT/Streamline read")
    parser.add_argument("--streamline-steps", type=int, default=100)
    parser.add_argument("--streamline-lr", type=float, default=1e-4)
    parser.add_argument("--new-tokens", type=int, default=24, help="greedy tokens per prompt")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--options", default="{}", help="causal_lm options as JSON (model, dataset, ...)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--name", default=None, help="file name of the results (default: llm-<layers>l)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the models already measured in <out>/<name>.json (same settings; their speeds from then)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    from transformers import AutoModelForCausalLM

    import theseus_core as th
    from theseus_adapters import depth_baselines, hf
    from theseus_zoo.tasks import build_task

    options = {**json.loads(args.options), "num_layers": args.layers, "calibration_sequences": args.calibration}
    task = build_task("causal_lm", options, 0)
    task.check()
    predecessor = task.build_predecessor().eval()
    stem = args.name or f"llm-{args.layers}l"
    settings = {"options": options, "split": args.split, "new_tokens": args.new_tokens}
    settings["streamline"] = {"steps": args.streamline_steps, "lr": args.streamline_lr}
    measured: dict[str, Any] = {}
    if args.resume and (args.out / f"{stem}.json").exists():
        previous = json.loads((args.out / f"{stem}.json").read_text())
        if previous.get("settings") != settings:
            raise SystemExit(
                f"--resume: {args.out / stem}.json was measured with other settings: {previous.get('settings')}"
            )
        measured = previous["models"]
    results: dict[str, Any] = {"environment": environment(), "settings": settings, **settings, "models": {}}

    def record(name: str, build: Callable[[], tuple[nn.Module, dict[str, Any]]]) -> None:
        """Measures the model ``build()`` gives (with what it says of itself) under ``name``, or keeps what
        ``--resume`` found."""
        if name not in measured:
            started = time.perf_counter()
            model, extra = build()
            extra["build_seconds"] = time.perf_counter() - started
            measured[name] = {**measure(task, model, args.split, args.new_tokens), **extra}
        results["models"][name] = measured[name]
        print(f"{name}: perplexity {measured[name]['perplexity']:.2f}", flush=True)

    def start(init: str) -> tuple[nn.Module, dict[str, Any]]:
        model = copy.deepcopy(predecessor)
        plan = hf.plan(model, args.layers, init=init, group_sizes=task.options.group_sizes)
        return th.replace_(model, plan).finalize(), {}

    def shortgpt() -> tuple[nn.Module, dict[str, Any]]:
        pruned = depth_baselines.shortgpt(predecessor, args.layers, task.calibration_batches())
        return pruned.model, {"kept": pruned.sources}

    def streamline() -> tuple[nn.Module, dict[str, Any]]:
        batches = task.calibration_batches()
        pruned = depth_baselines.streamline(
            predecessor, args.layers, batches, steps=args.streamline_steps, lr=args.streamline_lr
        )
        return pruned.model, {"replaced": pruned.replaced, "mse": pruned.mse}

    def exported(run: Path) -> tuple[nn.Module, dict[str, Any]]:
        return AutoModelForCausalLM.from_pretrained(run / "model"), {}

    record("predecessor", lambda: (predecessor, {}))
    for init in ("first", "every_other", "group_last"):
        record(f"start: init={init} (untrained)", functools.partial(start, init))
    record("ShortGPT (untrained)", shortgpt)
    record("LLM-Streamline (MSE stage only)", streamline)
    results["runs"] = {}
    for run in args.runs:
        results["runs"][str(run)] = {
            name: {"test": entry.test, "test_standard_error": entry.test_standard_error}
            for name, entry in Report.load(run).models.items()
        }
        if (run / "model").is_dir():
            record(f"{run.name}: exported successor", functools.partial(exported, run))

    rows = [
        [
            name,
            entry["layers"],
            f"{entry['perplexity']:.2f} ± {entry['perplexity_standard_error']:.2f}",
            f"{entry['parameters'] / 1e6:.1f}M",
            f"{entry['prefill_tokens_per_second']:.0f}",
            f"{entry['decode_tokens_per_second']:.1f}",
        ]
        for name, entry in results["models"].items()
    ]
    header = ["model", "layers", f"{args.split} perplexity ± s.e.", "parameters", "prefill tok/s", "decode tok/s"]
    markdown = f"# Depth compression of a decoder LLM to {args.layers} layers\n\n"
    markdown += f"Options: `{json.dumps(options)}`; threads: {args.threads}.\n\n" + markdown_table(header, rows)
    for run, models in results["runs"].items():
        markdown += f"\nRun `{run}` (its own report, test split, fine-tuned models):\n\n"
        rows = [[name, f"{entry['test']['perplexity']:.2f}"] for name, entry in models.items()]
        markdown += markdown_table(["model", "test perplexity"], rows)
    markdown += "\nGreedy continuations:\n\n"
    for index, prompt in enumerate(PROMPTS):
        markdown += f"- *{prompt}*\n"
        for name, entry in results["models"].items():
            markdown += f"  - {name}: {json.dumps(entry['generations'][index])}\n"
    write_report(results, args.out, stem, markdown)


if __name__ == "__main__":
    main()
