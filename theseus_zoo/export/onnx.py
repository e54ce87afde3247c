"""ONNX export, verified in ONNX Runtime: `export_onnx` for any module, `export_run` for a run directory.

`export_onnx` writes ``torch.onnx.export(..., dynamo=True)`` output (opset 18, dynamic batch and length / node axes),
loads the file in an ``onnxruntime.InferenceSession`` on the CPU and runs it on the export's inputs and on inputs of
other shapes, comparing each output with PyTorch's: a file whose maximum absolute difference exceeds the tolerance
(`TOLERANCE`, ``1e-4`` in fp32; `QUANTIZED_TOLERANCE`, ``1e-2``, for models with quantized activations, whose outputs
jump where an activation crosses a rounding boundary) is deleted and the export fails. A model that cannot be
exported (an op with no ONNX form, Python control flow on tensor values) is refused in one line that names it
(`ExportRefusedError`).

`export_run` reads a ``theseus compress`` run directory (``recipe.json`` and the exported ``model/``) and writes
``model.onnx`` beside the model for the families with an ONNX form: those whose `Task` implements
`theseus_zoo.tasks.protocols.ExportsOnnx` (a family from an entry point too), with the wrappers below:

- ``bert``: inputs ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the tokenizer makes them), output
  ``logits`` (classes, or one column for a regression head). A quantized (BinaryBERT) export also gets
  ``model.int8.onnx``: `theseus_quant.to_integer_`'s model, every quantized Linear an ONNX ``MatMulInteger``
  (`theseus_quant.onnx`), compared with the simulated model it came from.
- ``resnet``: input ``images`` ``[batch, 3, 28, 28]`` (``config.json`` says the preprocessing), output ``logits``.
- ``gnn``: inputs ``x`` ``[nodes, features]`` and ``edge_index`` ``[2, edges]``, output ``logits`` per node.
- ``causal_lm`` refuses (decoders deploy through llama.cpp: ``make bench-deploy``); ``toy`` has no ONNX form.

Needs the ``onnx`` extra: ``pip install -e '.[onnx]'`` in the clone (onnx, onnxscript, onnxruntime).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

TOLERANCE = 1e-4
"""Largest absolute difference between ONNX Runtime's and PyTorch's fp32 outputs that an export may have."""
QUANTIZED_TOLERANCE = 1e-2
"""The same for a model with quantized activations (BinaryBERT), in fp32 or on integer kernels. Such a model is a step
function of its inputs: a difference of one ulp upstream (ONNX Runtime's fused GELU, LayerNorm, or another summation
order) can move an activation across a rounding boundary of its 8-bit quantizer, which moves the next layer's output
by one level (step · α) and the logits by about 1e-4 to 1e-3 on all-MiniLM-L6-v2's shape (measured:
``benchmarks/results/deploy-minilm.md``). Whether that changes predictions is measured on a test set
(``deploy-accuracy.md``)."""
OPSET = 18
SENTENCES = ("a gripping, funny and humane film.", "flat.", "the plot goes nowhere, slowly, for two long hours")
"""What a text export is traced and checked on (three lengths, so that padding is exercised)."""


class ExportRefusedError(ValueError):
    """The model cannot be exported to ONNX (or its export does not match PyTorch): the message is one line."""


@dataclass(frozen=True)
class OnnxExport:
    """One verified ONNX file: its size, the largest absolute difference from PyTorch over the checked inputs (and
    how many were checked), and the ONNX operators it uses."""

    path: Path
    bytes_on_disk: int
    max_abs_diff: float
    checked: int
    ops: tuple[str, ...]

    def __str__(self) -> str:
        return (
            f"{self.path}: {self.bytes_on_disk:,} bytes, ONNX Runtime matches PyTorch within {self.max_abs_diff:.2g} "
            f"(max abs, {self.checked} inputs)"
        )


def _one_line(error: BaseException) -> str:
    """The first non-empty line of the innermost error's message (torch.export's errors run to pages)."""
    while error.__cause__ is not None:
        error = error.__cause__
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]


def require_onnx() -> None:
    """Raises `ExportRefusedError` naming the extra to install when onnx, onnxscript or onnxruntime is missing."""
    missing = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        raise ExportRefusedError(f"ONNX export needs {', '.join(missing)}: pip install -e '.[onnx]' in the clone")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silences file descriptors 1 and 2: torch.export prints whole graphs when it gives up; the refusal is one line."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 1)
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def session(path: str | os.PathLike, threads: int = 1) -> Any:
    """An ``onnxruntime.InferenceSession`` on the CPU with ``threads`` intra-op threads and one inter-op thread."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])


def run_session(ort_session: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The first output of ``ort_session`` on ``inputs`` (named as the graph's inputs), as a tensor."""
    return torch.from_numpy(ort_session.run(None, {k: v.numpy() for k, v in inputs.items()})[0])


def export_onnx(
    model: nn.Module,
    inputs: dict[str, torch.Tensor],
    path: str | os.PathLike,
    *,
    dynamic_axes: dict[str, dict[int, str]] | None = None,
    check_inputs: Sequence[dict[str, torch.Tensor]] = (),
    output_name: str = "logits",
    translations: dict[Any, Callable] | None = None,
    reference: nn.Module | None = None,
    tolerance: float = TOLERANCE,
) -> OnnxExport:
    """Exports ``model(**inputs)`` (one tensor output) to ``path`` and verifies it in ONNX Runtime.

    Args:
        model: In eval mode; called with keyword arguments named as the ONNX inputs.
        inputs: The tracing inputs (also checked).
        path: The ``.onnx`` file to write.
        dynamic_axes: ``{input: {axis: name}}`` of the axes that may change size. (default: none)
        check_inputs: More inputs to compare on, e.g. of other sizes. (default: none)
        output_name: The graph's output. (default: ``"logits"``)
        translations: ``custom_translation_table`` for custom ops (`theseus_quant.onnx.TRANSLATIONS`).
        reference: The model whose outputs ONNX Runtime must match. (default: ``model``)
        tolerance: Largest allowed absolute difference. (default: `TOLERANCE`, 1e-4)

    Returns:
        An `OnnxExport`.

    Raises:
        ExportRefusedError: torch cannot export the model (one line naming it and the cause), or ONNX Runtime's outputs
            differ by more than ``tolerance`` (the file is then removed).
    """
    require_onnx()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model.eval()
    names = list(inputs)
    shapes = {name: dict((dynamic_axes or {}).get(name, {})) for name in names}
    dims = {axis: torch.export.Dim.DYNAMIC for axes in shapes.values() for axis in axes.values()}
    try:
        with _quiet():
            program = torch.onnx.export(
                model,
                (),
                kwargs=inputs,
                dynamo=True,
                opset_version=OPSET,
                input_names=names,
                output_names=[output_name],
                dynamic_shapes={
                    name: {axis: dims[label] for axis, label in axes.items()} for name, axes in shapes.items()
                },
                custom_translation_table=translations,
                optimize=True,
                verbose=False,
            )
            program.save(os.fspath(path))
    except Exception as error:  # torch.export and the ONNX translation raise many kinds
        raise ExportRefusedError(f"{type(model).__name__} cannot be exported to ONNX: {_one_line(error)}") from error
    reference = model if reference is None else reference
    ort_session = session(path)
    worst = 0.0
    all_inputs = [inputs, *check_inputs]
    with torch.no_grad():
        for example in all_inputs:
            expected = reference(**example)
            got = run_session(ort_session, example)
            if got.shape != expected.shape:
                path.unlink()
                raise ExportRefusedError(
                    f"{path.name}: ONNX Runtime gives shape {tuple(got.shape)}, PyTorch {expected.shape}"
                )
            worst = max(worst, (got - expected).abs().max().item())
    if worst > tolerance:
        path.unlink()
        raise ExportRefusedError(
            f"{path.name}: ONNX Runtime differs from PyTorch by {worst:.3g} > {tolerance:g}; removed"
        )
    import onnx

    ops = tuple(sorted({node.op_type for node in onnx.load(os.fspath(path), load_external_data=False).graph.node}))
    return OnnxExport(path, _size(path), worst, len(all_inputs), ops)


def _size(path: Path) -> int:
    """Bytes of the ONNX file and its external data file, if torch wrote one beside it."""
    data = path.with_name(path.name + ".data")
    return path.stat().st_size + (data.stat().st_size if data.exists() else 0)


# ------------------------------------------------------------------------------------------------------ families


class Logits(nn.Module):
    """A Hugging Face sequence classifier that returns its ``logits`` only (ONNX graphs return tensors)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits


def text_inputs(directory: str | os.PathLike, sentences: Sequence[str] = SENTENCES) -> dict[str, torch.Tensor]:
    """The tokenizer saved in ``directory`` applied to ``sentences`` (padded): ``input_ids``, ``attention_mask`` and,
    when the tokenizer makes them, ``token_type_ids``."""
    from transformers import AutoTokenizer

    batch = AutoTokenizer.from_pretrained(directory)(list(sentences), padding=True, return_tensors="pt")
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}


class Images(nn.Module):
    """``model(images)`` with the ONNX input's name."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images)


class NodeModel(nn.Module):
    """``model(x, edge_index)`` with the ONNX inputs' names."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.model(x, edge_index)


def random_graph(nodes: int, features: int, edges: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """``x`` ``[nodes, features]`` and a random ``edge_index`` ``[2, edges]`` (the inputs of a PyG node model)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(nodes, features, generator=generator)
    return {"x": x, "edge_index": torch.randint(0, nodes, (2, edges), generator=generator)}


def export_run(run_dir: str | os.PathLike, out: str | os.PathLike | None = None) -> list[OnnxExport]:
    """Exports the model of a ``theseus compress`` run to ONNX and verifies it (module docstring).

    Args:
        run_dir: The run directory (``recipe.json`` and ``model/``).
        out: Where to write. (default: ``run_dir/model``)

    Raises:
        FileNotFoundError: Not a finished run directory.
        ExportRefusedError: A family without an ONNX form, or a model that cannot be exported (one line).
    """
    run_dir = Path(run_dir)
    recipe_file, model_dir = run_dir / "recipe.json", run_dir / "model"
    if not recipe_file.exists() or not model_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a finished run: it needs recipe.json and model/ (theseus compress)")
    from theseus_zoo.tasks import build_task
    from theseus_zoo.tasks.protocols import ExportsOnnx

    recipe = json.loads(recipe_file.read_text())
    family = recipe["family"]
    out = model_dir if out is None else Path(out)
    task = build_task(family, recipe.get("options", {}), recipe.get("seed", 0))
    if not isinstance(task, ExportsOnnx):
        raise ExportRefusedError(
            f"the {family} family has no ONNX export (its Task does not implement "
            "theseus_zoo.tasks.protocols.ExportsOnnx)"
        )
    return task.export_onnx(model_dir, out)
