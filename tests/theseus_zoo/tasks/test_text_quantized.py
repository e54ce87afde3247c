# ruff: noqa: F811 - the tests take the imported fixture tiny_model as an argument
"""The bert family's quantized successors and the BinaryBERT recipe, on a tiny random BERT and a csv."""

import copy
import csv
import json

import pytest
import torch

from theseus_quant import BinarySplitLinear, QuantEmbedding, QuantLinear
from theseus_quant.bert import QuantBertSelfAttention
from theseus_zoo import cli
from theseus_zoo.recipes import get_recipe
from theseus_zoo.tasks import text
from theseus_zoo.training.checkpoints import read_checkpoint
from theseus_zoo.training.run_directory import CHECKPOINT

from ..training.test_robustness import comparable, dies_after_save
from .test_text import sentences, tiny_model  # noqa: F401 - tiny_model: the module fixture, a 4-layer BERT folder

RECIPE = "minilm-rt-binarybert"
PHASES = ["predecessor", "replacing", "refine:theseus", "baseline:kd", "refine:baseline:kd"]
PHASES += ["baseline:direct", "refine:baseline:direct"]
SAVES_PER_PHASE = 3  # at its start, at its one evaluation, when done


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "reviews.csv"
    with open(path, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["text", "label"])
        writer.writerows(sentences(60, 3))
    return path


def options(tiny_model, reviews, **more):
    return {"model": str(tiny_model), "dataset": str(reviews), "num_layers": 4, **more}


def compress(tmp_path, options, out="run", *extra, **fields):
    """The recipe as registered but for the model, the data and a few steps a phase (one evaluation each)."""
    config = {
        "options": options,
        "predecessor": {"steps": 3, "eval_every": 3, "batch_size": 16, "lr": 1e-3, "warmup_steps": 0},
        "replacing": {"steps": 4, "eval_every": 4, "batch_size": 16, "lr": 1e-3},
        "steps_to_one": 2,
        "refine": {"steps": 2, "eval_every": 2, "batch_size": 16, "lr": 1e-3},
        **fields,
    }
    path = tmp_path / f"{out}.json"
    path.write_text(json.dumps(config))
    args = ["compress", "--recipe", RECIPE, "--config", str(path), "--out", str(tmp_path / out), "--no-progress"]
    return cli.main([*args, *extra])


@pytest.fixture(scope="module")
def whole(tiny_model, reviews, tmp_path_factory):
    root = tmp_path_factory.mktemp("whole")
    assert compress(root, options(tiny_model, reviews)) == 0
    return root / "run"


def test_the_recipe_compares_theseus_with_ternary_kd_and_direct_binarization_from_one_predecessor():
    recipe = get_recipe(RECIPE)
    assert recipe.options["quantize"] == "ternary" and recipe.options["num_layers"] == 6  # same depth
    assert recipe.baselines == ("kd", "direct") and recipe.refine is not None
    assert recipe.kd_weight > 0  # Theseus sees the predecessor's logits as kd does: the curriculum is the difference
    assert "hours on 2 cores" in recipe.description  # the measured estimate of the 3-seed run


def test_every_model_is_binary_after_its_refine_phase_and_the_report_gives_sizes(whole):
    report = json.loads((whole / "report.json").read_text())
    assert list(report["phases"]) == PHASES
    assert set(report["models"]) == {"predecessor", "theseus", "baseline:kd", "baseline:direct"}
    assert "ternary weight splitting" in report["refinement"]
    sizes = {name: entry["size_on_disk_bytes"] for name, entry in report["models"].items()}
    assert all(sizes[name] < sizes["predecessor"] for name in sizes if name != "predecessor")
    assert all("test_standard_error" in entry for entry in report["models"].values())
    assert "size on disk (MB)" in (whole / "report.md").read_text()
    structure = json.loads((whole / "model" / text.QUANTIZATION).read_text())
    assert set(structure["layers"].values()) == {"split"} and len(structure["attention"]) == 4
    assert "bert.embeddings.word_embeddings" in structure["layers"]


def test_the_packed_export_reloads_as_the_model_that_was_trained(whole, tiny_model, reviews):
    loaded = text.load_exported(whole / "model")
    assert isinstance(loaded.bert.encoder.layer[0].attention.self.query, BinarySplitLinear)
    trained = copy.deepcopy(loaded)  # the same structure, with the latent weights the run ended with
    trained.load_state_dict(read_checkpoint(whole / CHECKPOINT)["done"]["refine:theseus"]["weights"])
    task = text.TextClassificationTask({**get_recipe(RECIPE).options, **options(tiny_model, reviews)}, 0)
    batch = task.collate(task.dataset("test"))
    batch.pop("labels")
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, trained.eval()(**batch).logits)
    report = json.loads((whole / "report.json").read_text())
    assert task.predictions(loaded, "test").tolist() == report["models"]["theseus"]["test_predictions"]


@pytest.mark.parametrize("refined", [True, False])
def test_a_quantized_export_reloads_with_identical_logits(tmp_path, tiny_model, reviews, refined):
    task = text.TextClassificationTask(options(tiny_model, reviews, quantize="ternary"), 0)
    predecessor = task.build_predecessor()
    model = task.truncated(predecessor)  # ternary: 2-bit weights, 8-bit activations and attention
    if refined:
        task.refine_(model)
    with torch.no_grad():  # weights off their initialisation, clips off 2.5, as after training
        for name, parameter in model.named_parameters():
            parameter.add_(0.01 * torch.randn_like(parameter) if "clip" not in name else 0.1)
    kinds = {type(m) for m in model.modules()}
    assert QuantBertSelfAttention in kinds and QuantLinear in kinds and QuantEmbedding in kinds
    assert (BinarySplitLinear in kinds) == refined
    task.export(model, tmp_path / "model")
    loaded = text.load_exported(tmp_path / "model")
    batch = task.collate(task.dataset("test"))
    batch.pop("labels")
    model.eval()
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, model(**batch).logits)


def test_the_direct_baseline_binarizes_the_predecessor_weights_directly(tiny_model, reviews):
    task = text.TextClassificationTask(options(tiny_model, reviews, quantize="ternary"), 0)
    predecessor = task.build_predecessor()
    direct = task.direct(predecessor)
    query = direct.bert.encoder.layer[0].attention.self.query
    assert isinstance(query, QuantLinear) and query.weight_bits == 1
    expected = predecessor.bert.encoder.layer[0].attention.self.query.weight
    assert torch.equal(query.weight, expected) and query.weight is not expected  # latent: full precision, a copy
    before = [type(m) for m in direct.modules()]
    task.refine_(direct)  # nothing ternary left: nothing to split
    assert [type(m) for m in direct.modules()] == before


def test_a_run_killed_in_a_refine_phase_resumes_to_the_same_result(
    tmp_path,
    monkeypatch,
    whole,
    tiny_model,
    reviews,
):
    # Right after refine:baseline:kd's evaluation: the resumed run rebuilds Theseus' split model and kd's (their
    # phases done), resumes inside kd's refine phase, then trains direct as the whole run did.
    undo = dies_after_save(monkeypatch, SAVES_PER_PHASE * PHASES.index("refine:baseline:kd") + 2)
    assert compress(tmp_path, options(tiny_model, reviews)) == 130
    undo()
    state = read_checkpoint(tmp_path / "run" / CHECKPOINT)
    assert list(state["done"]) == PHASES[:4] and state["current"]["phase"] == "refine:baseline:kd"
    assert compress(tmp_path, options(tiny_model, reviews), "run", "--resume") == 0
    run = tmp_path / "run"
    assert (run / "metrics.jsonl").read_bytes() == (whole / "metrics.jsonl").read_bytes()
    assert comparable(run) == comparable(whole)
    assert (run / "model" / text.PACKED).read_bytes() == (whole / "model" / text.PACKED).read_bytes()


@pytest.mark.parametrize(
    ("changes", "fields", "message"),
    [
        ({"quantize": "quaternary"}, {}, "bert option quantize must be one of 'ternary', 'binary' or null"),
        ({"quantize": None, "activation_bits": 4}, {}, "activation_bits goes with quantize"),
        ({"activation_bits": 6}, {}, "bert option activation_bits must be one of 8, 4"),
        ({"num_layers": 5}, {}, "num_layers must be an integer in [1, 4] for"),
        ({"quantize": "binary"}, {}, "the recipe has a refine phase, but the bert family has nothing to refine"),
        ({}, {"refine": None}, "the direct baseline is the refined form built directly from the predecessor"),
        ({}, {"refine": {"steps": 0}}, "refine.steps must be an integer >= 1"),
    ],
)
def test_bad_options_end_in_one_line_before_anything_is_written(
    tmp_path,
    capsys,
    tiny_model,
    reviews,
    changes,
    fields,
    message,
):
    assert compress(tmp_path, {**options(tiny_model, reviews), **changes}, **fields) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert not (tmp_path / "run").exists()
