"""SmolLM2 30 -> 15 under FSDP2 on two CPU processes (gloo) against one process: the same losses, gradient norms,
dev metrics and routes, and the same exported model.

    python -m benchmarks.fsdp_check [--steps 6] [--runs runs/fsdp-check] [--activation-checkpointing]
                                    [--out benchmarks/results]

Runs ``theseus compress --recipe smollm2-30to15`` with its methods (Theseus and the ``truncated`` baseline) made
short by a ``--config`` override (`overrides`: ``--steps`` replacing steps, evaluated at half and at the end, the
rate at 1 from two thirds of them, 16 dev and 16 test sequences), once as one plain process (``--parallel ddp``'s
path, as a run without torchrun takes it) and once as two processes under ``torchrun --standalone
--nproc_per_node 2`` over gloo with ``--parallel fsdp`` (with ``--activation-checkpointing``, a third run, two
processes again, with layers recomputed in the backward pass). Every process has one thread. The runs go into
``<runs>/steps-<steps>/`` (``one``, ``fsdp``, ``fsdp-ac``): one whose ``report.json`` is there is reused, one
stopped before it is resumed from its checkpoint (``--resume``), one stopped before its first checkpoint starts
anew.

What is compared (`compare_records`, `compare_logits`), each sharded run against the one-process run:

- per record of ``metrics.jsonl`` (a step of a stage): the logged loss (the mean over ranks), the gradient norm
  (none on a step where every group ran its predecessor: nothing to learn), and every dev metric at an evaluation,
  as relative differences ``|sharded − one| / |one|``;
- the routes: ``metrics.jsonl`` of one process does not record them, so what is compared is what the records show,
  that every rank of the sharded run holds the same routing state at each evaluation (its fingerprints,
  `theseus_zoo.training.session.Session.evaluate`) and that the steps without a gradient are the same steps as in
  one process;
- the exported models (``<run>/model``, loaded with transformers): their logits on a fixed input of `INPUT_IDS`,
  the largest absolute difference and that over the largest logit, and whether
  ``torch.allclose(rtol=1e-3, atol=1e-3)`` holds;
- the test metrics of every model in ``report.json``, as relative differences.

Each run's entry also has the sha256 of its ``metrics.jsonl`` and exported weights (`digests`), so that runs equal
bit for bit show it.

Writes ``<out>/fsdp-smollm2.json`` and ``.md``; `markdown_rows` renders the table of docs/past-one-gpu.md from the
JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .harness import environment, markdown_table, write_report

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RECIPE = "smollm2-30to15"
NAME = "fsdp-smollm2"
TOLERANCE = 1e-3
INPUT_IDS = [list(range(1000, 1064)), list(range(20000, 20064))]
"""The fixed input of the logits compared: two sequences of 64 token ids of SmolLM2's vocabulary."""


@dataclass(frozen=True)
class Run:
    """One ``theseus compress`` of the check: ``processes`` (1: a plain process; 2: torchrun over gloo) and the
    arguments it adds."""

    name: str
    processes: int
    arguments: tuple[str, ...] = ()


ONE = Run("one", 1)
FSDP = Run("fsdp", 2, ("--parallel", "fsdp"))
FSDP_CHECKPOINTED = Run("fsdp-ac", 2, ("--parallel", "fsdp", "--activation-checkpointing"))


def overrides(steps: int) -> dict[str, Any]:
    """The ``--config`` that makes the recipe a short run: ``steps`` replacing steps (the baseline's too), evaluated
    at half of them and at the end, the rate at 1 from two thirds of them, 16 dev and 16 test sequences."""
    return {
        "replacing": {"steps": steps, "eval_every": max(1, steps // 2)},
        "steps_to_one": max(1, 2 * steps // 3),
        "options": {"dev_sequences": 16, "test_sequences": 16},
    }


def relative(reference: float, other: float) -> float:
    """``|other − reference| / |reference|``; the absolute difference where ``reference`` is 0."""
    difference = abs(other - reference)
    return difference / abs(reference) if reference else difference


def compare_records(alone: Sequence[dict[str, Any]], sharded: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The records of ``metrics.jsonl`` of a sharded run against one process's, record by record.

    Returns ``records`` (per record: ``phase``, ``step``, ``loss`` and ``grad_norm`` as ``[one, sharded,
    relative difference]``, ``grad_norm`` ``None`` where neither has one, and ``dev``: per dev metric the relative
    difference), ``max`` (the largest relative difference of ``loss``, ``grad_norm`` and ``dev``, over every
    record and metric) and ``routes`` (``evaluations``: the sharded records with per-rank routing fingerprints, the
    evaluations of Theseus' replacing stage;
    ``ranks_agree``: whether each of them has one fingerprint on every rank; ``same_steps_without_gradient``:
    whether the steps with no gradient norm are the same in both runs).

    Raises `ValueError` when the two runs did not log the same stages and steps, or logged dev metrics at different
    steps: nothing to compare record by record."""
    steps = [(record["phase"], record["step"]) for record in alone]
    if steps != [(record["phase"], record["step"]) for record in sharded]:
        raise ValueError("the runs logged different stages or steps; compare runs of the same recipe and config")
    rows = []
    for one, other in zip(alone, sharded, strict=True):
        if ("dev" in one) != ("dev" in other) or ("dev" in one and set(one["dev"]) != set(other["dev"])):
            raise ValueError(f"the runs evaluated differently at step {one['step']} of {one['phase']}")
        norms = one.get("grad_norm"), other.get("grad_norm")
        rows.append(
            {
                "phase": one["phase"],
                "step": one["step"],
                "loss": [one["loss"], other["loss"], relative(one["loss"], other["loss"])],
                "grad_norm": None if norms == (None, None) else [*norms, _relative_or_inf(*norms)],
                "dev": {key: relative(value, other["dev"][key]) for key, value in one.get("dev", {}).items()},
            }
        )
    # per evaluation of a stage that routes (a baseline's records have ``None`` for routes)
    fingerprints = [record["ranks"] for record in sharded if record.get("ranks") and record["ranks"][0]["routes"]]
    return {
        "records": rows,
        "max": {
            "loss": max(row["loss"][2] for row in rows),
            "grad_norm": max((row["grad_norm"][2] for row in rows if row["grad_norm"]), default=0.0),
            "dev": max((value for row in rows for value in row["dev"].values()), default=0.0),
        },
        "routes": {
            "evaluations": len(fingerprints),
            "ranks_agree": all(len({rank["routes"] for rank in ranks}) == 1 for ranks in fingerprints),
            "same_steps_without_gradient": [record.get("grad_norm") is None for record in alone]
            == [record.get("grad_norm") is None for record in sharded],
        },
    }


def _relative_or_inf(one: float | None, other: float | None) -> float:
    """A gradient norm logged by one run and not the other differs without bound."""
    return math.inf if one is None or other is None else relative(one, other)


def compare_logits(one: Any, other: Any) -> dict[str, Any]:
    """Two tensors of logits: the largest absolute difference, that over the largest absolute logit of ``one``,
    and whether ``torch.allclose(other, one, rtol=1e-3, atol=1e-3)`` holds."""
    import torch

    difference = float((other - one).abs().max())
    largest = float(one.abs().max())
    return {
        "max_abs": difference,
        "max_relative": difference / largest if largest else difference,
        "largest_logit": largest,
        "allclose": bool(torch.allclose(other, one, rtol=TOLERANCE, atol=TOLERANCE)),
    }


def exported_logits(run: Path) -> Any:
    """The logits of ``<run>/model`` (the Theseus export) on `INPUT_IDS`, in fp32, without a cache."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run / "model", dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor(INPUT_IDS), use_cache=False).logits


def records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def tested(run: Path) -> dict[str, dict[str, float]]:
    """Per model of ``<run>/report.json``, its test metrics (numbers only)."""
    models = json.loads((run / "report.json").read_text())["models"]
    return {
        name: {key: value for key, value in entry["test"].items() if isinstance(value, (int, float))}
        for name, entry in models.items()
    }


def compare_runs(one: Path, sharded: Path) -> dict[str, Any]:
    """Everything the check compares between the finished runs in ``one`` and ``sharded``."""
    found = compare_records(records(one), records(sharded))
    found["logits"] = compare_logits(exported_logits(one), exported_logits(sharded))
    alone, other = tested(one), tested(sharded)
    found["test"] = {
        model: {key: relative(value, other[model][key]) for key, value in metrics.items()}
        for model, metrics in alone.items()
    }
    found["max"]["test"] = max(value for metrics in found["test"].values() for value in metrics.values())
    return found


def digests(run: Path) -> dict[str, str]:
    """sha256 of the run's ``metrics.jsonl`` and exported weights: equal digests, runs equal bit for bit."""
    files = {"metrics_sha256": run / "metrics.jsonl", "model_sha256": run / "model" / "model.safetensors"}
    return {key: hashlib.sha256(path.read_bytes()).hexdigest() for key, path in files.items()}


def command(run: Run, runs: Path, config: Path) -> list[str]:
    """The command line of ``run`` (``--resume`` where a checkpoint of it is there to continue)."""
    out = runs / run.name
    compress = ["-m", "theseus_zoo.cli", "compress", "--recipe", RECIPE, "--config", str(config), "--out", str(out)]
    compress += ["--no-progress", "--threads", "1", *run.arguments]
    if (out / "checkpoint.pt").exists():
        compress.append("--resume")
    if run.processes == 1:
        return [sys.executable, *compress]
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(run.processes)]
    return [sys.executable, *launcher, *compress]


def finished(out: Path) -> bool:
    return (out / "report.json").exists()


def launch(run: Run, runs: Path, config: Path) -> None:
    """``run`` into ``<runs>/<name>`` unless it finished there; a directory with no checkpoint is started anew."""
    out = runs / run.name
    if finished(out):
        print(f"{out}: finished, reused", flush=True)
        return
    if out.exists() and not (out / "checkpoint.pt").exists():
        shutil.rmtree(out)  # stopped before its first checkpoint: nothing to resume
    line = command(run, runs, config)
    print(shlex.join(line), flush=True)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    subprocess.run(line, check=True, env=env, cwd=ROOT)


def markdown_rows(results: dict[str, Any]) -> str:
    """The table of docs/past-one-gpu.md: per sharded run, the largest relative differences against one process."""
    rows = []
    for name, found in results["comparisons"].items():
        run = results["runs"][name]
        routes = found["routes"]
        rows.append(
            [
                f"`{' '.join(run['arguments'])}`",
                str(run["processes"]),
                str(len(found["records"])),
                f"{found['max']['loss']:.1e}",
                f"{found['max']['grad_norm']:.1e}",
                f"{found['max']['dev']:.1e}",
                f"{found['max']['test']:.1e}",
                f"{routes['evaluations']} × same on every rank"
                + ("" if routes["ranks_agree"] else " (**not**)")
                + (", same steps without gradient" if routes["same_steps_without_gradient"] else ", **other steps**"),
                f"{found['logits']['max_abs']:.1e}",
                f"{found['logits']['max_relative']:.1e}",
                "yes" if found["logits"]["allclose"] else "**no**",
            ]
        )
    return markdown_table(
        [
            "sharded run",
            "processes",
            "records",
            "loss",
            "gradient norm",
            "dev metrics",
            "test metrics",
            "routes",
            "logits: max abs",
            "logits: max abs / largest",
            "logits within 1e-3",
        ],
        rows,
    )


def record_rows(found: dict[str, Any]) -> str:
    """One sharded run against one process, record by record."""
    rows = []
    for row in found["records"]:
        norm = row["grad_norm"]
        rows.append(
            [
                row["phase"],
                str(row["step"]),
                f"{row['loss'][0]:.6f}",
                f"{row['loss'][1]:.6f}",
                f"{row['loss'][2]:.1e}",
                "-" if norm is None else f"{norm[0]:.6f}",
                "-" if norm is None else f"{norm[1]:.6f}",
                "-" if norm is None else f"{norm[2]:.1e}",
                f"{max(row['dev'].values()):.1e}" if row["dev"] else "-",
            ]
        )
    header = ["stage", "step", "loss, one", "loss, sharded", "relative", "grad norm, one", "grad norm, sharded"]
    return markdown_table([*header, "relative", "dev metrics: largest relative"], rows)


def markdown(results: dict[str, Any]) -> str:
    """``fsdp-smollm2.md``: the summary table, then every sharded run record by record."""
    parts = [
        f"# `{RECIPE}` under FSDP2 on two CPU processes (gloo) against one process\n",
        f"{results['steps']} replacing steps of Theseus and of the `truncated` baseline (config "
        f"`{json.dumps(results['config'])}`), one thread per process; differences relative to the one-process run "
        "(`benchmarks.fsdp_check` says what each column compares).\n",
        markdown_rows(results),
    ]
    for name, found in results["comparisons"].items():
        parts += [f"\n## `{' '.join(results['runs'][name]['arguments'])}`, record by record\n", record_rows(found)]
    parts.append(f"\nCommand: `{results['command']}`.\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="replacing steps of each method (default: 6)")
    parser.add_argument("--runs", type=Path, default=Path("runs/fsdp-check"), help="where the runs go")
    parser.add_argument("--activation-checkpointing", action="store_true", help="a third run, with it")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps must be at least 2 (one evaluation before the end), got {args.steps}")
    runs = args.runs.resolve() / f"steps-{args.steps}"
    runs.mkdir(parents=True, exist_ok=True)
    config = runs / "config.json"
    config.write_text(json.dumps(overrides(args.steps)) + "\n")
    chosen = [ONE, FSDP, *([FSDP_CHECKPOINTED] if args.activation_checkpointing else [])]
    for run in chosen:
        launch(run, runs, config)
    comparisons = {run.name: compare_runs(runs / ONE.name, runs / run.name) for run in chosen[1:]}
    line = shlex.join(["python", "-m", "benchmarks.fsdp_check", *(sys.argv[1:] if argv is None else argv)])
    results = {
        "command": line,
        "environment": environment(),
        "recipe": RECIPE,
        "steps": args.steps,
        "config": overrides(args.steps),
        "input_ids": INPUT_IDS,
        "runs": {
            run.name: {"processes": run.processes, "arguments": list(run.arguments), **digests(runs / run.name)}
            for run in chosen
        },
        "comparisons": comparisons,
    }
    write_report(results, args.out, NAME, markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
