"""ONNX export per family on tiny models: each file loads in ONNX Runtime and matches PyTorch within 1e-4; a model
that cannot be exported is refused in one line. Skipped without the ``onnx`` extra."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from theseus_zoo import cli
from theseus_zoo.export.onnx import QUANTIZED_TOLERANCE, TOLERANCE, ExportRefusedError, export_onnx, export_run, session

pytestmark = pytest.mark.filterwarnings("ignore")
WORDS = [
    "a",
    "gripping",
    "funny",
    "and",
    "humane",
    "film",
    "flat",
    "the",
    "plot",
    "goes",
    "nowhere",
    "slowly",
    "for",
    "two",
    "long",
    "hours",
]


def _run_dir(root, family: str, options: dict | None = None):
    """A run directory as `theseus compress` leaves it: recipe.json and model/."""
    (root / "model").mkdir(parents=True)
    (root / "recipe.json").write_text(json.dumps({"family": family, "options": options or {}}))
    return root


def _bert_run(root, num_labels: int, quantized: bool, num_layers: int = 2, reshape=None):
    """A bert run directory: a tiny BERT of ``num_layers`` (``reshape(model)``, when given, is what is saved) with
    its tokenizer; ``quantized``: binary weights, 8-bit activations, split ternary."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    import theseus_quant as tq

    run = _run_dir(root, "bert")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",", ".", *WORDS]) + "\n")
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(run / "model")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(WORDS) + 7,
        hidden_size=16,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        intermediate_size=24,
        num_labels=num_labels,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = BertForSequenceClassification(config).eval()
    if not quantized:
        (model if reshape is None else reshape(model)).save_pretrained(run / "model")
        return run
    from theseus_quant.bert import quantize_attention_

    tq.quantize_(model, 2, 8)
    quantize_attention_(model, 8)
    tq.split_ternary_(model)
    model.config.save_pretrained(run / "model")
    tq.save_quantized(model, run / "model", 8)
    return run


@pytest.mark.parametrize(
    ("num_labels", "quantized"),
    [(3, False), pytest.param(1, False, marks=pytest.mark.slow), pytest.param(2, True, marks=pytest.mark.slow)],
)
def test_a_bert_run_exports_and_matches_in_onnx_runtime(tmp_path, capsys, num_labels, quantized):
    """Classification and regression heads; a quantized (binary, TWS) run also gets the integer graph, which must
    match the simulated model."""
    run = _bert_run(tmp_path, num_labels, quantized)
    assert cli.main(["export", "--onnx", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = ["model.onnx", "model.int8.onnx"] if quantized else ["model.onnx"]
    assert [line.split(":")[0].rsplit("/", 1)[-1] for line in lines] == names
    assert all("ONNX Runtime matches PyTorch within" in line for line in lines)
    import onnx

    graph = onnx.load(str(run / "model" / names[-1]))
    assert ("MatMulInteger" in {node.op_type for node in graph.graph.node}) == quantized
    outputs = session(run / "model" / "model.onnx").get_outputs()
    assert outputs[0].name == "logits" and outputs[0].shape[-1] == num_labels


def test_a_quantized_model_exports_its_integer_graph_on_matmul_integer_and_matches_the_simulated_model(tmp_path):
    """What a quantized run's ``model.int8.onnx`` is made of (`theseus_quant.onnx.TRANSLATIONS`), on two Linears:
    each quantized Linear a ``MatMulInteger``, no float matrix product left, and ONNX Runtime within
    `QUANTIZED_TOLERANCE` of the simulated model on a batch of another size (a whole quantized BERT run's export:
    the test above, slow)."""
    import theseus_quant as tq
    from theseus_quant.onnx import TRANSLATIONS

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    tq.quantize_(model, weight_bits=2, activation_bits=8, skip=[])
    model.eval()
    integer = copy.deepcopy(model)
    tq.to_integer_(integer)
    exported = export_onnx(
        integer,
        {"input": torch.randn(3, 16)},
        tmp_path / "model.int8.onnx",
        dynamic_axes={"input": {0: "batch"}},
        check_inputs=[{"input": torch.randn(7, 16)}],
        translations=TRANSLATIONS,
        reference=model,
        tolerance=QUANTIZED_TOLERANCE,
    )
    assert "MatMulInteger" in exported.ops and not {"MatMul", "Gemm"} & set(exported.ops)
    assert exported.checked == 2 and exported.max_abs_diff <= QUANTIZED_TOLERANCE


def test_a_bert_run_whose_layers_a_search_shaped_differently_exports_and_matches(tmp_path, capsys):
    """A budget search's export: layers of several forms (no attention, no FFN, half the FFN, the first layer of
    its group), which the config describes (`slim.LAYER_FORMS_KEY`) and `hf.load_pretrained` rebuilds; the ONNX
    graph runs each layer as shaped and matches PyTorch on sentences of other lengths and batch sizes."""
    pytest.importorskip("scipy")
    import theseus_core as th
    from theseus_adapters import hf, hf_candidates, slim

    def searched(model):  # four groups of 2, 2, 1 and 1 layers, each given a form of its own
        ids = torch.randint(0, len(WORDS) + 7, (2, 7), generator=torch.Generator().manual_seed(1))
        found, hook = hf_candidates.candidates(model, hf.plan(model, 4))
        library = th.CandidateLibrary(model, found, example_kwargs={"input_ids": ids}, on_finalize=hook)
        choice = dict(zip(library.paths, ["no_attention", "no_ffn", "ffn_half", "one"], strict=True))
        searched = th.replace_(model, library.plan(choice), example_kwargs={"input_ids": ids}).finalize().eval()
        assert len({str(form) for form in getattr(searched.config, slim.LAYER_FORMS_KEY)}) == 4
        return searched

    run = _bert_run(tmp_path, 2, quantized=False, num_layers=6, reshape=searched)
    assert cli.main(["export", "--onnx", str(run)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert "model.onnx" in line and "ONNX Runtime matches PyTorch within" in line


def test_a_resnet_run_exports_and_matches(tmp_path):
    from torchvision.models.resnet import BasicBlock, ResNet

    run = _run_dir(tmp_path, "resnet")
    model = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)
    torch.save(model.state_dict(), run / "model" / "model.pt")
    config = {"constructor": None, "block": "BasicBlock", "layers": [1, 1, 1, 1], "num_classes": 10}
    (run / "model" / "config.json").write_text(json.dumps({**config, "inputs": {"shape": [3, 28, 28]}}))
    (exported,) = export_run(run)
    assert exported.max_abs_diff <= TOLERANCE and exported.checked == 3
    assert session(exported.path).get_inputs()[0].name == "images"


@pytest.mark.parametrize(
    "searched",
    [pytest.param(False, id="gcn", marks=pytest.mark.slow), pytest.param(True, id="gcn-with-searched-layers")],
)
def test_a_gnn_run_exports_and_matches_on_graphs_of_other_sizes(tmp_path, searched):
    """A plain GCN, and one whose convs a budget search replaced by a `NodeLinear` and a `MeanConv`."""
    from torch_geometric.nn import GCN

    from theseus_adapters import gnn

    run = _run_dir(tmp_path, "gnn", {"model": "gcn"})
    config = {"in_channels": 5, "hidden_channels": 8, "num_layers": 3, "out_channels": 3, "norm": "batch_norm"}
    model = GCN(**config)
    if searched:
        model.convs[0], model.convs[1] = gnn.NodeLinear(5, 8), gnn.MeanConv(8, 8)
    torch.save(model.state_dict(), run / "model" / "model.pt")
    (run / "model" / "config.json").write_text(json.dumps(gnn.export_config(model, config)))
    (exported,) = export_run(run)
    assert exported.max_abs_diff <= TOLERANCE and exported.checked == 3  # 20, 7 and 50 nodes


class DataDependent(nn.Module):
    """Python control flow on a tensor's value: torch.export cannot trace it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.sum() > 0 else x


def test_a_model_that_cannot_be_exported_is_refused_in_one_line(tmp_path):
    with pytest.raises(ExportRefusedError) as refused:
        export_onnx(DataDependent(), {"x": torch.randn(3)}, tmp_path / "bad.onnx")
    message = str(refused.value)
    assert message.startswith("DataDependent cannot be exported to ONNX: ") and "\n" not in message
    assert not (tmp_path / "bad.onnx").exists()


def test_the_cli_refuses_a_family_without_onnx_form_in_one_line(tmp_path, capsys):
    run = _run_dir(tmp_path, "causal_lm")
    assert cli.main(["export", "--onnx", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "llama.cpp" in err
    assert cli.main(["export", "--onnx", str(tmp_path / "nothing")]) == 2
    assert "not a finished run" in capsys.readouterr().err


FAMILY_PLUGIN = '''
"""A model family defined outside theseus, with an ONNX form: the toy's, exported through the protocol."""
import json

import torch

from theseus_core.testing import ToyStack
from theseus_zoo.export.onnx import export_onnx
from theseus_zoo.tasks.toy import ToyTask


class ExportableToy(ToyTask):
    def export_onnx(self, model_dir, out):
        config = json.loads((model_dir / "config.json").read_text())
        model = ToyStack(**config)
        model.load_state_dict(torch.load(model_dir / "model.pt", weights_only=True), strict=True)
        x = torch.randn(4, config["in_features"], generator=torch.Generator().manual_seed(0))
        return [export_onnx(model.eval(), {"x": x}, out / "model.onnx", dynamic_axes={"x": {0: "batch"}},
                            check_inputs=[{"x": x[:1]}])]
'''


def test_a_family_from_an_entry_point_exports_through_its_protocol(tmp_path, monkeypatch, capsys):
    from theseus_zoo.tasks import FAMILIES, build_task

    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "theseus_test_family.py").write_text(FAMILY_PLUGIN)
    dist = plugin / "theseus_test_family-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: theseus-test-family\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[theseus_zoo.families]\nexportable-toy = theseus_test_family:ExportableToy\n"
    )
    monkeypatch.syspath_prepend(str(plugin))
    monkeypatch.setattr(FAMILIES, "_entries", dict(FAMILIES._entries))  # the plugin's family leaves with the test
    task = build_task("exportable-toy", {}, 0)
    run = _run_dir(tmp_path / "run", "exportable-toy")
    task.export(task.build_predecessor(), run / "model")
    assert cli.main(["export", "--onnx", str(run)]) == 0
    assert (run / "model" / "model.onnx").exists() and "model.onnx" in capsys.readouterr().out
    toy = _run_dir(tmp_path / "toy", "toy")  # the built-in toy implements no ExportsOnnx: refused by protocol
    assert cli.main(["export", "--onnx", str(toy)]) == 2
    assert "does not implement theseus_zoo.tasks.protocols.ExportsOnnx" in capsys.readouterr().err
