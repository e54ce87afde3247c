"""A compressed SmolLM2 in llama.cpp: converted by llama.cpp's own converter, run by ``llama-cpp-python``.

    python -m benchmarks.deploy_llama --sdist llama_cpp_python-<version>.tar.gz [--run-dir RUN] [--layers 15]

The 30-layer predecessor (the ``smollm2-135m-instruct`` asset) and a 15-layer successor (``--run-dir``: the
``model/`` of a finished ``causal_lm`` run such as ``smollm2-30to15``; without it, the *untrained* truncated model
that `theseus_zoo.tasks.causal_lm.CausalLMTask.truncated` builds, which tests the pipeline, not a result) are each
converted with the ``convert_hf_to_gguf.py`` shipped in the ``llama-cpp-python`` source distribution (``--outtype
f16``), loaded by ``llama_cpp.Llama`` (one thread) and compared with transformers on the same token ids:

- greedy continuations of 8 prompts for 20 tokens (or to the end-of-sequence token, where transformers' ``generate``
  stops), against transformers' in float16 (token ids equal or not, where they part, and how close a call the parting
  token was in transformers' float32 logits);
- perplexity on the first ``--sequences`` test sequences of the task (BBC News, 128 tokens), against transformers'
  in float32 (ratio; the issue's bar is within 1%);
- prompt (a 128-token prefill) and generation (20 tokens, one at a time) tokens per second, 15 against 30 layers,
  medians over ``--rounds`` rounds in which the two models take turns (ratios per round, then their median).

Writes ``benchmarks/results/deploy-llama.{json,md}`` with the commit and command.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.deploy import provenance, result_header
from benchmarks.harness import command_line, markdown_table, write_report

PROMPTS = (
    "The capital of France is",
    "Once upon a time, there was a",
    "The best way to learn a new language is",
    "In 2008 the stock market",
    "The football match ended with",
    "Scientists have discovered that",
    "The government announced a new plan to",
    "My favourite recipe for dinner is",
)
NEW_TOKENS = 20


def converter(sdist: Path, scratch: Path) -> Path:
    """``convert_hf_to_gguf.py`` (with its ``gguf-py`` and ``conversion`` package) from the source distribution."""
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if "/vendor/llama.cpp/" in m.name and m.name.endswith(".py")]
        archive.extractall(scratch, members=members, filter="data")
    (script,) = scratch.glob("*/vendor/llama.cpp/convert_hf_to_gguf.py")
    return script


def convert(script: Path, folder: Path, out: Path) -> tuple[Path, float]:
    """``folder`` (a transformers checkpoint) as an f16 GGUF file; seconds it took."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(script), str(folder), "--outtype", "f16", "--outfile", str(out)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} failed on {folder}:\n{done.stderr[-3000:]}")
    return out, time.perf_counter() - start


def folders(run_dir: Path | None, layers: int, scratch: Path) -> dict[str, Path]:
    """The predecessor's folder and the successor's (a run's export, or the untrained truncated model saved)."""
    from transformers import AutoModelForCausalLM

    from theseus_zoo.tasks import build_task

    task = build_task("causal_lm", {"num_layers": layers}, 0)
    predecessor = Path(task.model_path())
    if run_dir is not None:
        return {"predecessor": predecessor, "successor": run_dir / "model"}
    model = task.truncated(AutoModelForCausalLM.from_pretrained(predecessor, dtype=torch.float32))
    successor = scratch / f"truncated-{layers}"
    model.save_pretrained(successor)
    task.tokenizer().save_pretrained(successor)
    return {"predecessor": predecessor, "successor": successor}


def _greedy_llama(llm: Any, ids: list[int], stop: set[int]) -> list[int]:
    """Up to ``NEW_TOKENS`` greedy tokens after ``ids``, ending with the first of ``stop`` (as transformers'
    ``generate`` ends at its ``eos_token_id``)."""
    llm.reset()
    llm.eval(ids)
    out = []
    for _ in range(NEW_TOKENS):
        token = int(llm.scores[llm.n_tokens - 1].argmax())
        out.append(token)
        if token in stop:
            break
        llm.eval([token])
    return out


def _nll_llama(llm: Any, ids: list[int]) -> float:
    """Summed next-token NLL of ``ids`` (the first token is given)."""
    llm.reset()
    llm.eval(ids)
    logits = torch.from_numpy(llm.scores[: len(ids)].copy()).double()
    return -torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(ids[1:])[:, None]).sum().item()


def load(gguf: Path) -> Any:
    """``gguf`` in ``llama_cpp.Llama``: one thread, a context of 256 tokens, every position's logits kept."""
    from llama_cpp import Llama

    return Llama(model_path=str(gguf), n_ctx=256, n_batch=256, n_threads=1, logits_all=True, verbose=False)


def measure(folder: Path, gguf: Path, sequences: torch.Tensor, tokenizer: Any) -> dict[str, Any]:
    """Greedy agreement and perplexity ratio of one model in llama.cpp against transformers."""
    from transformers import AutoModelForCausalLM

    llm = load(gguf)
    fp16 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float16).eval()
    fp32 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    eos = fp16.generation_config.eos_token_id
    stop = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    greedy = []
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = tokenizer(prompt)["input_ids"]
            theirs = fp16.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)[0, len(ids) :]
            ours = _greedy_llama(llm, ids, stop)
            theirs = theirs.tolist()
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
            entry = {
                "prompt": prompt,
                "equal": ours == theirs,
                "first_difference": first,
                "text": tokenizer.decode(ours),
            }
            if first is not None:  # how close a call it was: transformers' fp32 logits of the two tokens there
                logits = fp32(torch.tensor([ids + theirs[:first]]), use_cache=False).logits[0, -1]
                entry["fp32_logit_gap"] = (logits[theirs[first]] - logits[ours[first]]).item()
            greedy.append(entry)
        nll_ours = nll_theirs = 0.0
        tokens = 0
        for sequence in sequences:
            ids = sequence.tolist()
            nll_ours += _nll_llama(llm, ids)
            logits = fp32(torch.tensor([ids]), use_cache=False).logits[0].double()
            nll_theirs += -torch.log_softmax(logits[:-1], -1).gather(1, sequence[1:, None]).sum().item()
            tokens += len(ids) - 1
    return {
        "gguf_bytes": gguf.stat().st_size,
        "greedy_equal": sum(g["equal"] for g in greedy),
        "greedy": greedy,
        "perplexity_llama_cpp": math.exp(nll_ours / tokens),
        "perplexity_transformers": math.exp(nll_theirs / tokens),
    }


def speeds(ggufs: dict[str, Path], prefill: list[int], rounds: int) -> dict[str, dict[str, float]]:
    """Prompt tokens/s (``prefill`` in one call) and generation tokens/s (``NEW_TOKENS`` greedy tokens, one at a
    time) of each model, the models taking turns within each of ``rounds`` rounds after a warm-up round: medians, and
    each model's median per-round ratio to the first model, so ratios compare moments of the same load."""
    llms = {name: load(gguf) for name, gguf in ggufs.items()}
    seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in llms}
    for round_index in range(rounds + 1):
        turns = list(llms.items())
        for name, llm in turns if round_index % 2 else reversed(turns):  # each goes first in every other round
            llm.reset()
            start = time.perf_counter()
            llm.eval(prefill)
            prompt = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(NEW_TOKENS):
                llm.eval([int(llm.scores[llm.n_tokens - 1].argmax())])
            if round_index:  # the first round warms caches and pages in the weights
                seconds[name].append((prompt, time.perf_counter() - start))
    first = next(iter(seconds.values()))
    return {
        name: {
            "prompt_tokens_per_s": len(prefill) / statistics.median(p for p, _ in timings),
            "generation_tokens_per_s": NEW_TOKENS / statistics.median(g for _, g in timings),
            "prompt_speed_ratio": statistics.median(p0 / p for (p0, _), (p, _) in zip(first, timings, strict=True)),
            "generation_speed_ratio": statistics.median(g0 / g for (_, g0), (_, g) in zip(first, timings, strict=True)),
        }
        for name, timings in seconds.items()
    }


def markdown(result: dict[str, Any]) -> str:
    rows = []
    for name, r in result["models"].items():
        ratio = r["perplexity_llama_cpp"] / r["perplexity_transformers"]
        rows.append(
            [
                name,
                f"{r['gguf_bytes'] / 1e6:.1f}",
                f"{r['greedy_equal']} / {len(PROMPTS)}",
                f"{r['perplexity_llama_cpp']:.2f}",
                f"{r['perplexity_transformers']:.2f}",
                f"{ratio:.4f}",
                f"{r['prompt_tokens_per_s']:.1f}",
                f"{r['generation_tokens_per_s']:.1f}",
            ]
        )
    models = result["models"]
    successor = models["successor"]
    speed = (
        f"Successor vs predecessor in llama.cpp (median of per-round ratios over {result['rounds']} rounds in which "
        f"the models took turns): prompt {successor['prompt_speed_ratio']:.2f}×, generation "
        f"{successor['generation_speed_ratio']:.2f}×.\n"
    )
    parted = [
        f'{name}, "{g["prompt"]}": from token {g["first_difference"] + 1}, where transformers\' fp32 logits of '
        f"its token and llama.cpp's differ by {g['fp32_logit_gap']:.3f}"
        for name, r in models.items()
        for g in r["greedy"]
        if not g["equal"] and "fp32_logit_gap" in g
    ]
    if parted:
        speed += "\nGreedy continuations that part: " + "; ".join(parted) + ".\n"
    return (
        "# SmolLM2 in llama.cpp (f16 GGUF from llama.cpp's converter) against transformers\n\n"
        + provenance(result)
        + f"Successor: {result['successor']}. llama-cpp-python {result['llama_cpp_version']} built from its sdist; "
        f"{result['sequences']} test sequences of 128 tokens; one thread.\n\n"
        + markdown_table(
            [
                "model",
                "GGUF MB",
                "greedy 20 tokens equal to transformers f16",
                "perplexity llama.cpp",
                "perplexity transformers fp32",
                "ratio",
                "prompt tokens/s",
                "generation tokens/s",
            ],
            rows,
        )
        + "\n"
        + speed
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, required=True, help="llama_cpp_python-<version>.tar.gz")
    parser.add_argument("--run-dir", type=Path, help="a finished causal_lm run (default: untrained truncation)")
    parser.add_argument("--layers", type=int, default=15)
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds, the models taking turns in each")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    torch.set_num_threads(1)
    import llama_cpp

    from theseus_zoo.tasks import build_task

    command = command_line("benchmarks.deploy_llama", argv)
    task = build_task("causal_lm", {"num_layers": args.layers}, 0)
    sequences = task.dataset("test")[: args.sequences]
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        script = converter(args.sdist, scratch / "llama.cpp")
        result = {
            **result_header(command),
            "llama_cpp_version": llama_cpp.__version__,
            "successor": (
                f"the export of {args.run_dir}"
                if args.run_dir
                else f"the untrained {args.layers}-layer truncation (pipeline check, not a compression result)"
            ),
            "sequences": len(sequences),
            "models": {},
        }
        ggufs = {}
        for name, folder in folders(args.run_dir, args.layers, scratch).items():
            ggufs[name], seconds = convert(script, folder, scratch / f"{name}.gguf")
            result["models"][name] = {
                "convert_seconds": seconds,
                **measure(folder, ggufs[name], sequences, task.tokenizer()),
            }
            print(name, {k: v for k, v in result["models"][name].items() if k != "greedy"}, flush=True)
        result["rounds"] = args.rounds
        for name, measured in speeds(ggufs, sequences[0].tolist(), args.rounds).items():
            result["models"][name].update(measured)
    write_report(result, args.out, "deploy-llama", markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
