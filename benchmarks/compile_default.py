"""Compile time and steady-state training-step time of `replace_(..., compile=...)` on the models that broke
a dynamic-shape compile: timm resnet26d and mobilevit_xxs, Swin (torchvision swin_t), and a ViT.

Each (model, compile options) runs in its own process: replace with the model's plan, then training steps at
rate 0.5 (routes change, so every branch compiles). "first steps" is the wall time of the warm-up steps, which
is dominated by compilation; "step" is the median of the steps after it. Writes
benchmarks/results/compile-default.{json,md}.

    python -m benchmarks.compile_default [--settings eager static old] [--only swin vit] [--steps 12]

Rows already in the results file for other (case, setting) pairs are kept.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

CASES = {
    "timm resnet26d (adapter, blocks 1-1-1-1), 64×64": "resnet26d",
    "timm mobilevit_xxs (stages.1[1:3]), 64×64": "mobilevit",
    "torchvision swin_t (features.1[0:2], features.5[0:6] in 3), 64×64": "swin",
    "torchvision ViT-Ti/16-like (encoder.layers in 3), 64×64": "vit",
}

SETTINGS = {
    "eager": ("eager (compile=False)", False),
    "static": ("compile=True (dynamic=False, the default)", True),
    "old": ("compile={'dynamic': None} (the old default)", {"dynamic": None}),
}


def build(kind: str):
    import torch

    import theseus_core as th

    torch.manual_seed(0)
    if kind == "resnet26d":
        import timm

        from theseus_adapters import resnet

        model = timm.create_model("resnet26d", num_classes=10)
        return model, resnet.plan(model, (1, 1, 1, 1))
    if kind == "mobilevit":
        import timm

        model = timm.create_model("mobilevit_xxs", num_classes=10)
        return model, [th.ModuleSpec("stages.1[1:3]", th.copy_module(0))]
    if kind == "swin":
        import torchvision

        model = torchvision.models.swin_t(num_classes=10)
        specs = [th.ModuleSpec("features.1[0:2]", th.copy_module(0))]
        specs += th.plan(model, "features.5", num_groups=3, successor=th.copy_module(0))
        return model, specs
    if kind == "vit":
        from torchvision.models.vision_transformer import VisionTransformer

        model = VisionTransformer(64, 16, num_layers=12, num_heads=3, hidden_dim=192, mlp_dim=768, num_classes=10)
        return model, th.plan(model, "encoder.layers", num_groups=3, successor=th.copy_module(0))
    raise ValueError(kind)


def measure(kind: str, options: dict, steps: int, warm_up: int) -> dict:
    """Runs in the child process."""
    import torch
    from torch._dynamo.utils import counters

    import theseus_core as th

    model, specs = build(kind)
    images = torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(8) % 10
    theseus = th.replace_(model, specs, example_inputs=(images,), compile=options)
    optimizer = torch.optim.SGD(theseus.successor_parameters(), lr=0.01)
    theseus.rate = 0.5
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model.train()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        if loss.requires_grad:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return {
        "first_steps_s": sum(times[:warm_up]),
        "step_s": statistics.median(times[warm_up:]),
        "graphs": counters["stats"]["unique_graphs"],
    }


def run_child(kind: str, options: dict, steps: int, warm_up: int, timeout: int) -> dict:
    code = (
        "import json, sys\nfrom benchmarks.compile_default import measure\n"
        f"print('RESULT', json.dumps(measure({kind!r}, {options!r}, {steps}, {warm_up})))"
    )
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout} s"}
    for line in result.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "Error:" in line] or lines  # dynamo ends with a hint, not the error
    return {"error": errors[-1].strip()[:200] if errors else f"exit {result.returncode}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warm-up", type=int, default=6)
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--settings", nargs="*", choices=list(SETTINGS), default=["eager", "static"])
    parser.add_argument("--only", nargs="*", help="kinds to run (resnet26d, mobilevit, swin, vit)")
    args = parser.parse_args()
    settings = {SETTINGS[name][0]: SETTINGS[name][1] for name in args.settings}
    path = RESULTS / "compile-default.json"
    kept = json.loads(path.read_text()) if path.exists() else []
    rows = []
    for name, kind in CASES.items():
        if args.only and kind not in args.only:
            continue
        for label, options in settings.items():
            print(f"{name}: {label} ...", flush=True)
            rows.append(
                {"case": name, "compile": label, **run_child(kind, options, args.steps, args.warm_up, args.timeout)}
            )
            print("  ", rows[-1], flush=True)
    done = {(row["case"], row["compile"]) for row in rows}
    rows = [row for row in kept if (row["case"], row["compile"]) not in done] + rows
    rows.sort(key=lambda row: (list(CASES).index(row["case"]), row["compile"]))
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        "Training steps at rate 0.5, batch 8, one CPU thread (OMP_NUM_THREADS=1) on a 2-core machine shared with other",
        "runs: absolute times are inflated; compare rows. `python -m benchmarks.compile_default`.",
        "",
        f"| case | compile | first {args.warm_up} steps (s, mostly compiling) | step after (s) | graphs |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['case']} | {row['compile']} | failed: {row['error']} | | |")
        else:
            timing = f"{row['first_steps_s']:.1f} | {row['step_s']:.3f}"
            lines.append(f"| {row['case']} | {row['compile']} | {timing} | {row['graphs']} |")
    (RESULTS / "compile-default.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
