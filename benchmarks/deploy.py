"""Deployment speed of BinaryBERT successors on CPU: simulated fp32 vs integer kernels, PyTorch vs ONNX Runtime.

    python -m benchmarks.deploy [--repeats 3] [--threads 1] [--run-dir RUN] [--out benchmarks/results]

Four parts, each written to ``benchmarks/results/deploy-*.{json,md}`` with the commit and command that made it:

1. ``deploy-kernels``: one GEMM of all-MiniLM-L6-v2's shapes (1,024 tokens: 384→1536, 1536→384, 384→384) in every
   candidate int8 path (PyTorch ``torch._int_mm``, onednn ``qlinear_pointwise``, fbgemm dynamic quantization, ONNX
   Runtime ``MatMulInteger`` with int8 and uint8 activations) against fp32 ``F.linear`` and ONNX Runtime's fp32
   ``MatMul``: what `theseus_quant.integer` chose, and why.
2. ``deploy-minilm``: whole models of all-MiniLM-L6-v2's shape (6 layers, hidden 384, random weights: speed does not
   depend on their values) at batch 1 / 8 / 32 and sequence 64 / 128: the fp32 predecessor (PyTorch, ONNX Runtime),
   the ternary successor and its TWS binary form (the BinaryBERT export) simulated in fp32 as trained, and both on
   integer kernels (`theseus_quant.to_integer_` in PyTorch; ``model.int8.onnx`` in ONNX Runtime). Every number is a
   median over ``--repeats`` rounds in which each model runs once per shape, interleaved, so ratios compare
   measurements of the same moments on a shared machine.
3. ``deploy-cnn``: ResNet-34 and ResNet-18 of the resnet family's input shape in PyTorch eager and ONNX Runtime
   (batch 1 / 8 / 32).
4. ``deploy-accuracy`` (with ``--run-dir``, a finished quantized bert run): test-set predictions of the exported model
   simulated, on integer kernels in PyTorch, and in ONNX Runtime (int8): accuracy, predictions that changed, largest
   logit difference.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks.harness import command_line, environment, markdown_table, write_report

SHAPES = [(1, 64), (1, 128), (8, 64), (8, 128), (32, 64), (32, 128)]
MINILM = {
    "vocab_size": 30522,
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 512,
    "num_labels": 2,
}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def result_header(command: str) -> dict[str, Any]:
    return {
        "command": command,
        "commit": _commit(),
        "environment": environment(),
        "note": "2-core machine shared with other jobs: absolute times are noisy, ratios come from the same rounds",
    }


def _time(call: Callable[[], Any], inner: int) -> float:
    """Seconds per call, over ``inner`` calls."""
    start = time.perf_counter()
    for _ in range(inner):
        call()
    return (time.perf_counter() - start) / inner


# ------------------------------------------------------------------------------------------------------ kernels


def kernels(repeats: int) -> dict[str, Any]:
    """One GEMM in each candidate path, ms (median of ``repeats``), and whether its integer result is exact."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from theseus_zoo.export.onnx import session

    rows = []
    for m, k, n in [(1024, 384, 1536), (1024, 1536, 384), (1024, 384, 384), (64, 384, 1536)]:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(m, k, generator=generator)
        weight = torch.randn(n, k, generator=generator)
        levels = torch.randint(-127, 128, (m, k), generator=generator, dtype=torch.int8)
        codes = torch.randint(-1, 2, (n, k), generator=generator, dtype=torch.int8)
        exact = levels.long() @ codes.long().T
        packed = torch.ops.onednn.qlinear_prepack(codes, None)
        shifted = (levels.short() + 128).to(torch.uint8)
        scale, zero = torch.ones(n), torch.zeros(n, dtype=torch.int64)
        dynamic = torch.ao.nn.quantized.dynamic.Linear(k, n)

        def onednn(shifted=shifted, packed=packed, scale=scale, zero=zero):
            return torch.ops.onednn.qlinear_pointwise(
                shifted, 1.0, 128, packed, scale, zero, None, 1.0, 0, torch.float32, "none", [], ""
            )

        sessions = {}
        for name, dtype, array in [
            ("ort_s8", TensorProto.INT8, levels.numpy()),
            ("ort_u8", TensorProto.UINT8, shifted.numpy()),
        ]:
            inputs = ["x", "w"] + (["zp"] if name == "ort_u8" else [])
            initializers = [numpy_helper.from_array(codes.T.contiguous().numpy(), "w")]
            if name == "ort_u8":
                initializers.append(numpy_helper.from_array(np.array(128, dtype=np.uint8), "zp"))
            graph = helper.make_graph(
                [helper.make_node("MatMulInteger", inputs, ["y"])],
                name,
                [helper.make_tensor_value_info("x", dtype, [m, k])],
                [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
                initializers,
            )
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
            with tempfile.NamedTemporaryFile(suffix=".onnx", delete=False) as file:
                onnx.save(model, file.name)
                sessions[name] = (session(file.name), array)
        fp32_graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])],
            "fp32",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
            [numpy_helper.from_array(weight.T.contiguous().numpy(), "w")],
        )
        with tempfile.NamedTemporaryFile(suffix=".onnx", delete=False) as file:
            onnx.save(helper.make_model(fp32_graph, opset_imports=[helper.make_opsetid("", 18)]), file.name)
            fp32_session = session(file.name)

        calls: dict[str, Callable[[], Any]] = {
            "torch fp32 F.linear": lambda x=x, weight=weight: torch.nn.functional.linear(x, weight),
            "torch._int_mm": lambda levels=levels, codes=codes: torch._int_mm(levels, codes.T),
            "onednn qlinear_pointwise (u8, zp 128)": onednn,
            "fbgemm dynamic Linear (own scales)": lambda x=x, dynamic=dynamic: dynamic(x),
            "ORT fp32 MatMul": lambda x=x, s=fp32_session: s.run(None, {"x": x.numpy()}),
            "ORT MatMulInteger s8×s8": lambda s=sessions["ort_s8"]: s[0].run(None, {"x": s[1]}),
            "ORT MatMulInteger u8×s8 (zp 128)": lambda s=sessions["ort_u8"]: s[0].run(None, {"x": s[1]}),
        }
        checks = {
            "torch._int_mm": torch.equal(torch._int_mm(levels, codes.T).long(), exact),
            "onednn qlinear_pointwise (u8, zp 128)": torch.equal(onednn().round().long(), exact),
            "ORT MatMulInteger s8×s8": _same(sessions["ort_s8"], exact),
            "ORT MatMulInteger u8×s8 (zp 128)": _same(sessions["ort_u8"], exact),
        }
        inner = 3 if m > 64 else 20
        times: dict[str, list[float]] = {name: [] for name in calls}
        for call in calls.values():
            call()
        for _ in range(repeats):
            for name, call in calls.items():
                if name == "torch._int_mm":
                    times[name].append(_time(call, 1))  # 20-50× slower: one call is enough
                else:
                    times[name].append(_time(call, inner))
        fp32 = statistics.median(times["torch fp32 F.linear"])
        for name, values in times.items():
            ms = statistics.median(values) * 1e3
            rows.append(
                {
                    "shape": f"{m}×{k} · {k}×{n}",
                    "path": name,
                    "ms": ms,
                    "vs_fp32": fp32 * 1e3 / ms,
                    "exact": checks.get(name, "n/a (fp32 or own scales)"),
                }
            )
    return {"rows": rows}


def _same(ort: tuple[Any, Any], exact: torch.Tensor) -> bool:
    """Whether an ONNX Runtime MatMulInteger session gives ``exact`` on its input."""
    ort_session, array = ort
    return bool((ort_session.run(None, {"x": array})[0] == exact.numpy()).all())


def kernels_markdown(result: dict[str, Any]) -> str:
    rows = [[r["shape"], r["path"], f"{r['ms']:.2f}", f"{r['vs_fp32']:.2f}×", r["exact"]] for r in result["rows"]]
    return (
        "# One GEMM in each int8 path (one thread)\n\n"
        + provenance(result)
        + markdown_table(["GEMM", "path", "ms (median)", "speed vs torch fp32", "integer result exact"], rows)
    )


def provenance(result: dict[str, Any]) -> str:
    env = result["environment"]
    return (
        f"Command: `{result['command']}` at commit `{result['commit'][:12]}`, on {env['processor']} "
        f"({env['cpu_count']} cores, torch {env['torch']}, {env['torch_threads']} thread(s)). {result['note']}.\n\n"
    )


# ------------------------------------------------------------------------------------------------------- models


def _config() -> Any:
    from transformers import BertConfig

    return BertConfig(**MINILM, attn_implementation="sdpa")


def _models() -> dict[str, nn.Module]:
    """The fp32 predecessor and the simulated ternary and binary successors of all-MiniLM-L6-v2's shape."""
    from transformers import BertForSequenceClassification

    import theseus_quant as tq
    from theseus_quant.bert import quantize_attention_

    torch.manual_seed(0)
    predecessor = BertForSequenceClassification(_config()).eval()
    ternary = copy.deepcopy(predecessor)
    tq.quantize_(ternary, 2, 8)  # BinaryBERT's: every encoder Linear and the word embeddings; 8-bit inputs
    quantize_attention_(ternary, 8)
    binary = copy.deepcopy(ternary)
    tq.split_ternary_(binary)  # the minilm-rt-binarybert export: every quantized layer a TWS binary pair
    return {"predecessor": predecessor, "ternary": ternary.eval(), "binary": binary.eval()}


def _inputs(batch: int, length: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch * 1000 + length)
    ids = torch.randint(1000, 30000, (batch, length), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def models(repeats: int, workdir: Path) -> dict[str, Any]:
    """ms per forward of each runtime at each shape, and the ratios (module docstring, part 2)."""
    import theseus_quant as tq
    from theseus_quant.onnx import TRANSLATIONS
    from theseus_zoo.export.onnx import QUANTIZED_TOLERANCE, Logits, export_onnx, run_session, session

    built = _models()
    integer = {}
    for name in ("ternary", "binary"):
        integer[name] = copy.deepcopy(built[name])
        tq.to_integer_(integer[name])
    example = _inputs(2, 16)
    axes = {name: {0: "batch", 1: "length"} for name in example}
    checks = [_inputs(3, 40)]
    exports = {
        "predecessor": export_onnx(Logits(built["predecessor"]), example, workdir / "predecessor.onnx", dynamic_axes=axes, check_inputs=checks),  # noqa: E501
        "ternary": export_onnx(Logits(integer["ternary"]), example, workdir / "ternary.int8.onnx", dynamic_axes=axes, check_inputs=checks, translations=TRANSLATIONS, reference=Logits(built["ternary"]), tolerance=QUANTIZED_TOLERANCE),  # noqa: E501
        "binary": export_onnx(Logits(integer["binary"]), example, workdir / "binary.int8.onnx", dynamic_axes=axes, check_inputs=checks, translations=TRANSLATIONS, reference=Logits(built["binary"]), tolerance=QUANTIZED_TOLERANCE),  # noqa: E501
    }  # fmt: skip
    sessions = {name: session(export.path) for name, export in exports.items()}

    def torch_call(model: nn.Module, inputs: dict[str, torch.Tensor]) -> Callable[[], Any]:
        return lambda: model(**inputs).logits

    def ort_call(name: str, inputs: dict[str, torch.Tensor]) -> Callable[[], Any]:
        return lambda: run_session(sessions[name], inputs)

    runtimes = {
        "predecessor fp32 (PyTorch)": lambda inputs: torch_call(built["predecessor"], inputs),
        "ternary simulated fp32 (PyTorch)": lambda inputs: torch_call(built["ternary"], inputs),
        "binary simulated fp32 (PyTorch)": lambda inputs: torch_call(built["binary"], inputs),
        "ternary int8 (PyTorch, onednn)": lambda inputs: torch_call(integer["ternary"], inputs),
        "binary int8 (PyTorch, onednn)": lambda inputs: torch_call(integer["binary"], inputs),
        "predecessor fp32 (ONNX Runtime)": lambda inputs: ort_call("predecessor", inputs),
        "ternary int8 (ONNX Runtime)": lambda inputs: ort_call("ternary", inputs),
        "binary int8 (ONNX Runtime)": lambda inputs: ort_call("binary", inputs),
    }
    rows = []
    with torch.no_grad():
        for batch, length in SHAPES:
            inputs = _inputs(batch, length)
            calls = {name: make(inputs) for name, make in runtimes.items()}
            reference = calls["binary simulated fp32 (PyTorch)"]()
            differences = {
                "binary int8 (PyTorch, onednn)": (calls["binary int8 (PyTorch, onednn)"]() - reference)
                .abs()
                .max()
                .item(),
                "binary int8 (ONNX Runtime)": (calls["binary int8 (ONNX Runtime)"]() - reference).abs().max().item(),
            }
            for call in calls.values():
                call()  # warm-up: onednn prepacks, ORT plans
            inner = max(1, 2048 // (batch * length))
            times: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(repeats):
                for name, call in calls.items():
                    times[name].append(_time(call, inner))
            ms = {name: statistics.median(values) * 1e3 for name, values in times.items()}
            rows.append({"batch": batch, "length": length, "ms": ms, "max_abs_logit_diff_vs_simulated": differences})
            print(f"batch {batch} length {length}: " + ", ".join(f"{k} {v:.1f}" for k, v in ms.items()), flush=True)
    sizes = {name: export.bytes_on_disk for name, export in exports.items()}
    matches = {name: export.max_abs_diff for name, export in exports.items()}
    return {"rows": rows, "onnx_bytes": sizes, "onnx_max_abs_diff": matches}


RATIOS = [
    ("binary int8 (PyTorch, onednn)", "binary simulated fp32 (PyTorch)"),
    ("binary int8 (PyTorch, onednn)", "predecessor fp32 (PyTorch)"),
    ("binary int8 (ONNX Runtime)", "binary simulated fp32 (PyTorch)"),
    ("binary int8 (ONNX Runtime)", "predecessor fp32 (PyTorch)"),
    ("binary int8 (ONNX Runtime)", "predecessor fp32 (ONNX Runtime)"),
    ("ternary int8 (PyTorch, onednn)", "ternary simulated fp32 (PyTorch)"),
    ("ternary int8 (PyTorch, onednn)", "predecessor fp32 (PyTorch)"),
    ("ternary int8 (ONNX Runtime)", "predecessor fp32 (ONNX Runtime)"),
    ("predecessor fp32 (ONNX Runtime)", "predecessor fp32 (PyTorch)"),
    ("binary simulated fp32 (PyTorch)", "predecessor fp32 (PyTorch)"),
]


def models_markdown(result: dict[str, Any]) -> str:
    names = list(result["rows"][0]["ms"])
    times = [[f"{r['batch']} × {r['length']}", *(f"{r['ms'][n]:.1f}" for n in names)] for r in result["rows"]]
    ratios = [
        [f"{fast} vs {slow}", *(f"{r['ms'][slow] / r['ms'][fast]:.2f}×" for r in result["rows"])]
        for fast, slow in RATIOS
    ]
    shapes = [f"{r['batch']} × {r['length']}" for r in result["rows"]]
    diffs = [
        [f"{r['batch']} × {r['length']}", *(f"{v:.2g}" for v in r["max_abs_logit_diff_vs_simulated"].values())]
        for r in result["rows"]
    ]
    onnx_rows = [
        [name, f"{result['onnx_bytes'][name]:,}", f"{result['onnx_max_abs_diff'][name]:.2g}"]
        for name in result["onnx_bytes"]
    ]
    return (
        "# all-MiniLM-L6-v2-shaped BinaryBERT successors on CPU: simulated vs integer, PyTorch vs ONNX Runtime\n\n"
        + provenance(result)
        + "Milliseconds per forward (median), batch × sequence length:\n\n"
        + markdown_table(["batch × length", *names], times)
        + "\nSpeed ratios (how many times faster the first is), same rounds:\n\n"
        + markdown_table(["comparison", *shapes], ratios)
        + "\nLargest absolute logit difference from the simulated binary model:\n\n"
        + markdown_table(["batch × length", *result["rows"][0]["max_abs_logit_diff_vs_simulated"]], diffs)
        + "\nONNX files (verified against the simulated model at export, max abs diff):\n\n"
        + markdown_table(["model", "bytes", "max abs diff"], onnx_rows)
    )


# --------------------------------------------------------------------------------------------------------- cnn


def cnn(repeats: int, workdir: Path) -> dict[str, Any]:
    """ResNet-34 (the predecessor's shape) and ResNet-18 (the successor's) on 3 × 28 × 28 images, 10 classes, random
    weights: PyTorch eager against ONNX Runtime at batch 1 / 8 / 32, ms (median of ``repeats`` interleaved rounds)."""
    from torchvision.models import resnet18, resnet34

    from theseus_zoo.export.onnx import Images, export_onnx, run_session, session

    torch.manual_seed(0)
    built = {
        "predecessor ResNet-34": resnet34(num_classes=10).eval(),
        "successor ResNet-18": resnet18(num_classes=10).eval(),
    }
    example = {"images": torch.randn(2, 3, 28, 28)}
    exports = {
        name: export_onnx(Images(model), example, workdir / f"{name.split()[-1]}.onnx", dynamic_axes={"images": {0: "batch"}}, check_inputs=[{"images": torch.randn(5, 3, 28, 28)}])  # noqa: E501
        for name, model in built.items()
    }  # fmt: skip
    sessions = {name: session(export.path) for name, export in exports.items()}
    rows = []
    with torch.no_grad():
        for batch in (1, 8, 32):
            images = {"images": torch.randn(batch, 3, 28, 28)}
            calls = {}
            for name, model in built.items():
                calls[f"{name} (PyTorch)"] = lambda model=model, images=images: model(images["images"])
                calls[f"{name} (ONNX Runtime)"] = lambda name=name, images=images: run_session(sessions[name], images)
            for call in calls.values():
                call()
            inner = max(1, 32 // batch)
            times: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(repeats):
                for name, call in calls.items():
                    times[name].append(_time(call, inner))
            rows.append({"batch": batch, "ms": {n: statistics.median(v) * 1e3 for n, v in times.items()}})
    return {
        "rows": rows,
        "onnx_bytes": {n: e.bytes_on_disk for n, e in exports.items()},
        "onnx_max_abs_diff": {n: e.max_abs_diff for n, e in exports.items()},
    }


def cnn_markdown(result: dict[str, Any]) -> str:
    names = list(result["rows"][0]["ms"])
    times = [[r["batch"], *(f"{r['ms'][n]:.1f}" for n in names)] for r in result["rows"]]
    pairs = [
        ("successor ResNet-18 (ONNX Runtime)", "successor ResNet-18 (PyTorch)"),
        ("successor ResNet-18 (ONNX Runtime)", "predecessor ResNet-34 (ONNX Runtime)"),
        ("successor ResNet-18 (ONNX Runtime)", "predecessor ResNet-34 (PyTorch)"),
        ("successor ResNet-18 (PyTorch)", "predecessor ResNet-34 (PyTorch)"),
    ]
    ratios = [[f"{a} vs {b}", *(f"{r['ms'][b] / r['ms'][a]:.2f}×" for r in result["rows"])] for a, b in pairs]
    files = [[n, f"{result['onnx_bytes'][n]:,}", f"{result['onnx_max_abs_diff'][n]:.2g}"] for n in result["onnx_bytes"]]
    return (
        "# ResNet-34 → ResNet-18 (3 × 28 × 28, 10 classes): PyTorch eager vs ONNX Runtime\n\n"
        + provenance(result)
        + "Milliseconds per forward (median):\n\n"
        + markdown_table(["batch", *names], times)
        + "\nSpeed ratios, same rounds:\n\n"
        + markdown_table(["comparison", *(f"batch {r['batch']}" for r in result["rows"])], ratios)
        + "\nONNX files (max abs diff from PyTorch at export):\n\n"
        + markdown_table(["model", "bytes", "max abs diff"], files)
    )


# ----------------------------------------------------------------------------------------------------- accuracy


def accuracy(run_dir: Path, workdir: Path) -> dict[str, Any]:
    """Test predictions of a quantized bert run's export: simulated, integer (PyTorch), int8 ONNX Runtime."""
    import json

    import theseus_quant as tq
    from theseus_zoo.export.onnx import export_run, run_session, session
    from theseus_zoo.tasks import build_task
    from theseus_zoo.tasks.text import load_exported

    recipe = json.loads((run_dir / "recipe.json").read_text())
    task = build_task(recipe["family"], recipe["options"], recipe["seed"])
    simulated = load_exported(run_dir / "model").eval()
    integer = copy.deepcopy(simulated)
    tq.to_integer_(integer)
    exports = {e.path.name: e for e in export_run(run_dir, workdir)}
    int8 = session(exports["model.int8.onnx"].path)
    examples = task.dataset("test")
    labels, logits = [], {"simulated": [], "integer (PyTorch)": [], "int8 (ONNX Runtime)": []}
    with torch.no_grad():
        for start in range(0, len(examples), 64):
            batch = task.collate(examples[start : start + 64])
            labels.append(batch.pop("labels"))
            logits["simulated"].append(simulated(**batch).logits)
            logits["integer (PyTorch)"].append(integer(**batch).logits)
            names = [i.name for i in int8.get_inputs()]
            logits["int8 (ONNX Runtime)"].append(run_session(int8, {k: v for k, v in batch.items() if k in names}))
    label = torch.cat(labels)
    full = {name: torch.cat(values) for name, values in logits.items()}
    reference = full["simulated"].argmax(-1)
    rows = {
        name: {
            "accuracy": (values.argmax(-1) == label).float().mean().item(),
            "changed_predictions": int((values.argmax(-1) != reference).sum()),
            "max_abs_logit_diff": (values - full["simulated"]).abs().max().item(),
        }
        for name, values in full.items()
    }
    return {"run_dir": str(run_dir), "recipe": recipe["name"], "examples": len(label), "rows": rows}


def accuracy_markdown(result: dict[str, Any]) -> str:
    rows = [
        [name, f"{r['accuracy']:.4f}", r["changed_predictions"], f"{r['max_abs_logit_diff']:.2g}"]
        for name, r in result["rows"].items()
    ]
    return (
        f"# Test predictions of `{result['run_dir']}` ({result['recipe']}) in each runtime\n\n"
        + provenance(result)
        + f"{result['examples']} test examples.\n\n"
        + markdown_table(["runtime", "accuracy", "predictions changed vs simulated", "max abs logit diff"], rows)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--parts", nargs="+", default=["kernels", "models"], choices=["kernels", "models", "cnn", "accuracy"]
    )
    parser.add_argument("--run-dir", type=Path, help="a finished quantized bert run, for the accuracy part")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    command = command_line("benchmarks.deploy", argv)
    with tempfile.TemporaryDirectory() as scratch:
        if "kernels" in args.parts:
            result = {**result_header(command), **kernels(args.repeats)}
            write_report(result, args.out, "deploy-kernels", kernels_markdown(result))
            print(kernels_markdown(result))
        if "models" in args.parts:
            result = {**result_header(command), **models(args.repeats, Path(scratch))}
            write_report(result, args.out, "deploy-minilm", models_markdown(result))
            print(models_markdown(result))
        if "cnn" in args.parts:
            result = {**result_header(command), **cnn(args.repeats, Path(scratch))}
            write_report(result, args.out, "deploy-cnn", cnn_markdown(result))
            print(cnn_markdown(result))
        if "accuracy" in args.parts:
            if args.run_dir is None:
                parser.error("the accuracy part needs --run-dir")
            result = {**result_header(command), **accuracy(args.run_dir, Path(scratch))}
            write_report(result, args.out, "deploy-accuracy", accuracy_markdown(result))
            print(accuracy_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
