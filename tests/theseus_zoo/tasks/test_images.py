"""The ResNet family on Fashion-MNIST: idx files, splits, and `theseus compress` end to end on fake idx files."""

import copy
import gzip
import json
import re
import subprocess
import sys

import pytest
import torch
import torchvision

import theseus_core as th
from theseus_zoo import cli
from theseus_zoo.data import fashion_mnist
from theseus_zoo.tasks import images
from theseus_zoo.training import session

from .predecessor_sharing import assert_shares_predecessor

NUM_TRAIN, NUM_TEST = 64, 20
TINY = {
    "methods": None,  # the paper's Theseus and the default baselines (the recipe runs its best variant)
    "options": {"dev_size": 16, "test_size": None},
    "predecessor": {"steps": 2, "batch_size": 4, "eval_every": 2},
    "replacing": {"steps": 3, "batch_size": 4, "eval_every": 3},
    "steps_to_one": 1,
}


def idx_bytes(array: torch.Tensor) -> bytes:
    """An idx file of unsigned bytes: magic 0 0 8 ndim, the sizes as big-endian uint32, the data."""
    header = bytes([0, 0, 0x08, array.dim()]) + b"".join(size.to_bytes(4, "big") for size in array.shape)
    return header + array.to(torch.uint8).contiguous().numpy().tobytes()


def fake_set(size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise with a bright square whose place gives the class: learnable, and cheap."""
    labels = torch.arange(size) % fashion_mnist.NUM_CLASSES
    pictures = torch.randint(0, 60, (size, 28, 28), generator=generator, dtype=torch.uint8)
    for picture, label in zip(pictures, labels.tolist(), strict=True):
        row, column = divmod(label, 5)
        picture[4 + 12 * row : 12 + 12 * row, 2 + 5 * column : 7 + 5 * column] = 255
    return pictures, labels


@pytest.fixture
def fake_cache(tmp_path, monkeypatch):
    """A ``$THESEUS_CACHE`` holding a fetched ``fashion-mnist`` asset of 64 training and 20 test images."""
    generator = torch.Generator().manual_seed(0)
    folder = tmp_path / "cache" / "fashion-mnist"
    folder.mkdir(parents=True)
    for split, size in [("train", NUM_TRAIN), ("test", NUM_TEST)]:
        pictures, labels = fake_set(size, generator)
        for name, array in zip(fashion_mnist.FILES[split], (pictures, labels), strict=True):
            (folder / f"{name}.gz").write_bytes(gzip.compress(idx_bytes(array)))
    (folder / ".complete").write_text("fake\n")
    monkeypatch.setenv("THESEUS_CACHE", str(tmp_path / "cache"))
    return folder


def test_read_idx_reads_gzipped_and_plain_files_and_rejects_bad_ones(tmp_path):
    array = torch.randint(0, 256, (5, 3, 4), dtype=torch.uint8)
    (tmp_path / "a").write_bytes(idx_bytes(array))
    (tmp_path / "a.gz").write_bytes(gzip.compress(idx_bytes(array)))
    assert torch.equal(fashion_mnist.read_idx(tmp_path / "a"), array)
    assert torch.equal(fashion_mnist.read_idx(tmp_path / "a.gz"), array)
    labels = torch.tensor([3, 0, 9], dtype=torch.uint8)
    (tmp_path / "labels").write_bytes(idx_bytes(labels))
    assert fashion_mnist.read_idx(tmp_path / "labels").tolist() == [3, 0, 9]
    (tmp_path / "short").write_bytes(idx_bytes(array)[:-1])
    with pytest.raises(ValueError, match=r"shape \(5, 3, 4\), but the file holds 59 bytes"):
        fashion_mnist.read_idx(tmp_path / "short")
    (tmp_path / "floats").write_bytes(bytes([0, 0, 0x0D, 1, 0, 0, 0, 1]) + b"\0" * 4)
    with pytest.raises(ValueError, match="not an idx file of unsigned bytes"):
        fashion_mnist.read_idx(tmp_path / "floats")
    (tmp_path / "broken.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="not a readable gzip file"):
        fashion_mnist.read_idx(tmp_path / "broken.gz")


def test_splits_are_fixed_disjoint_and_independent_of_the_run_seed(fake_cache):
    task = images.ResNetTask({"dev_size": 10, "train_size": 30, "test_size": 12}, seed=0)
    task.check()
    other_seed = images.ResNetTask({"dev_size": 10, "train_size": 30, "test_size": 12}, seed=5)
    other_seed.check()
    train, dev, test = (task.dataset(split) for split in ("train", "dev", "test"))
    assert (len(train), len(dev), len(test)) == (30, 10, 12)
    for split in ("train", "dev", "test"):
        assert torch.equal(task.dataset(split).images, other_seed.dataset(split).images)
    all_train = fashion_mnist.read_fashion_mnist(fake_cache)["train"][0]
    position = {bytes(picture.numpy()): index for index, picture in enumerate(all_train)}  # noise: all distinct
    train_ids = {position[bytes(p.numpy())] for p in train.images}
    dev_ids = {position[bytes(p.numpy())] for p in dev.images}
    assert len(train_ids) == 30 and len(dev_ids) == 10 and not train_ids & dev_ids
    other_data_seed = images.ResNetTask({"dev_size": 10, "data_seed": 1}, seed=0)
    other_data_seed.check()
    assert len(other_data_seed.dataset("train")) == NUM_TRAIN - 10
    assert not torch.equal(other_data_seed.dataset("dev").images, dev.images)
    inputs, labels = task.collate([train[0], train[1]])
    assert inputs.shape == (2, 3, 28, 28) and torch.equal(inputs[:, 0], inputs[:, 2]) and labels.dtype == torch.long


def test_truncated_baseline_is_the_successor_as_the_plan_initialises_it(fake_cache):
    task = images.ResNetTask({}, seed=0)
    predecessor = task.build_predecessor()
    model = copy.deepcopy(predecessor)
    theseus_init = th.replace_(model, task.plan(model)).finalize().state_dict()
    truncated = task.truncated(predecessor).state_dict()
    assert truncated.keys() == theseus_init.keys() == torchvision.models.resnet18().state_dict().keys()
    assert all(torch.equal(truncated[key], theseus_init[key]) for key in truncated)
    assert task.scratch().state_dict().keys() == truncated.keys()


def test_compress_exports_a_torchvision_resnet18_and_keeps_frozen_batch_norm_statistics(
    fake_cache, tmp_path, monkeypatch
):
    saved = {}  # a ResNet-34 checkpoint is ~350 MB, written some 15 times a run; keep the last state in memory
    monkeypatch.setattr(session, "atomic_save", lambda state, path: saved.update(state=state))
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "run"
    args = ["compress", "--recipe", "resnet-fashion-mnist", "--config", str(config), "--out", str(out)]
    assert cli.main([*args, "--no-progress"]) == 0

    report = json.loads((out / "report.json").read_text())
    baselines = {"baseline:truncated", "baseline:scratch", "baseline:kd"}
    assert set(report["models"]) == {"predecessor", "theseus", *baselines}
    resnet18_parameters = sum(p.numel() for p in torchvision.models.resnet18(num_classes=10).parameters())
    assert {report["models"][name]["parameters"] for name in ["theseus", *baselines]} == {resnet18_parameters}
    assert report["speedup"] > 0
    # Per-image predictions, so that runs sharing the test set pair their differences (also across recipes)
    assert report["test_labels"] == images.ResNetTask({"dev_size": 16}, seed=0).labels("test").tolist()
    assert all(len(entry["test_predictions"]) == NUM_TEST for entry in report["models"].values())
    assert set(report["comparisons"]) == {"predecessor", *baselines}

    assert json.loads((out / "model" / "config.json").read_text())["constructor"] == "resnet18"
    exported = torchvision.models.resnet18(num_classes=10)
    exported.load_state_dict(torch.load(out / "model" / "model.pt", weights_only=True), strict=True)
    task = images.ResNetTask({"dev_size": 16}, seed=0)
    task.check()
    accuracy = task.evaluate(exported, "test")["accuracy"]
    assert accuracy == report["models"]["theseus"]["test"]["accuracy"]
    assert images.load_exported(out / "model").state_dict().keys() == exported.state_dict().keys()

    # The trainer calls model.train() before every replacing step and replaces with default options: the
    # frozen batch norms (the stem's, and the predecessor blocks' in the sites) must keep their statistics.
    done = saved["state"]["done"]
    predecessor, replacing = done["predecessor"]["weights"], done["replacing"]["weights"]
    assert done["replacing"]["best_step"] == 3  # evaluated once, at the end, after 2 steps at p = 1
    statistics = ("running_mean", "running_var", "num_batches_tracked")
    for key in ("bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"):  # the stem, outside every group
        assert torch.equal(replacing[key], predecessor[key]), key
        assert torch.equal(exported.state_dict()[key], predecessor[key]), key
    # In the replacing model, block i of group g of a stage is `<stage>.<g>.predecessor.layers.<i>`.
    starts: dict[str, list[int]] = {}
    for spec in task.plan(task.build_predecessor()):  # paths like "layer3[3:6]"
        stage, start = re.fullmatch(r"(layer\d)\[(\d+):\d+\]", spec.path).groups()
        starts.setdefault(stage, []).append(int(start))
    checked = 0
    for key, value in replacing.items():
        site = re.fullmatch(r"(layer\d)\.(\d+)\.predecessor\.layers\.(\d+)\.(.+)", key)
        if site and key.endswith(statistics):
            stage, group, index, rest = site.groups()
            assert torch.equal(value, predecessor[f"{stage}.{starts[stage][int(group)] + int(index)}.{rest}"]), key
            checked += 1
        successor = re.fullmatch(r"(layer\d)\.(\d+)\.successor\.inner\.(.+\.num_batches_tracked)", key)
        if successor:  # successor j started from block j of its stage (init="first"), and trained its statistics
            stage, group, rest = successor.groups()
            assert value > predecessor[f"{stage}.{group}.{rest}"], key
    assert checked == 3 * 35  # 3 statistics x (2 batch norms x 16 blocks + 3 shortcut batch norms)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"architecture": "resnet35"}, "resnet option architecture must be one of 'resnet18', 'resnet34'"),
        ({"blocks": [3, 4, 6, 3]}, "blocks must give 4 block counts, each between 1 and resnet34's (3, 4, 6, 3)"),
        ({"blocks": [2, 2, 2]}, "blocks must give 4 block counts"),
        ({"blocks": [2, 5, 2, 2]}, "blocks must give 4 block counts"),
        ({"init": "middle"}, "init must be one of"),
        ({"dev_size": 0}, "resnet option dev_size must be >= 1, got 0"),
        ({"dev_size": 60, "train_size": 10}, "asks for more than the 64 images of the training set"),
        ({"dev_size": 16, "test_size": 21}, "test_size=21 asks for more than the 20 test images"),
        ({"source": "hub"}, "resnet option source must be one of 'asset', 'torchvision'"),
        ({"colour": True}, "unknown resnet options ['colour']"),
        ({"architecture": "resnet50", "successor": "narrow_basic"}, "successor narrow_basic narrows BasicBlocks"),
    ],
)
def test_bad_options_fail_in_one_line_before_training(options, message, fake_cache, tmp_path, capsys):
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"options": options}))
    args = ["compress", "--recipe", "resnet-fashion-mnist", "--config", str(config), "--out", str(tmp_path / "run")]
    assert cli.main(args) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_a_missing_asset_or_data_dir_says_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("THESEUS_CACHE", str(tmp_path / "empty"))
    args = ["compress", "--recipe", "resnet-fashion-mnist", "--out", str(tmp_path / "run")]
    assert cli.main(args) == 2
    error = capsys.readouterr().err
    assert "theseus fetch fashion-mnist" in error and error.count("\n") == 1
    config = tmp_path / "dir.json"
    config.write_text(json.dumps({"options": {"data_dir": str(tmp_path)}}))
    assert cli.main([*args, "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert "holds no train-images-idx3-ubyte.gz" in error and error.count("\n") == 1


def test_listing_the_recipes_imports_no_model_library():
    script = (
        "import sys\nfrom theseus_zoo.recipes import list_recipes\n"
        "assert 'resnet-fashion-mnist-mobilenet-v2' in [r.name for r in list_recipes('resnet-*')]\n"
        "assert not {'torch', 'torchvision', 'transformers'} & set(sys.modules), 'a model library imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_heterogeneous_successors_export_a_model_that_rebuilds_without_theseus(fake_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(session, "atomic_save", lambda state, path: None)  # no 350 MB checkpoints in a test
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**TINY, "options": {**TINY["options"], "successor": "mobilenet_v2"}}))
    out = tmp_path / "run"
    args = ["compress", "--recipe", "resnet-fashion-mnist", "--config", str(config), "--out", str(out)]
    assert cli.main([*args, "--no-progress"]) == 0
    report = json.loads((out / "report.json").read_text())
    resnet18_parameters = sum(p.numel() for p in torchvision.models.resnet18(num_classes=10).parameters())
    assert report["models"]["theseus"]["parameters"] < resnet18_parameters
    baselines = [name for name in report["models"] if name.startswith("baseline:")]
    assert baselines and {report["models"][name]["parameters"] for name in baselines} == {
        report["models"]["theseus"]["parameters"]  # every baseline trains the light architecture too
    }
    exported = images.load_exported(out / "model")
    assert sum(p.numel() for p in exported.parameters()) == report["models"]["theseus"]["parameters"]
    assert {type(block).__name__ for block in exported.layer2} == {"InvertedResidual"}
    task = images.ResNetTask({**TINY["options"], "successor": "mobilenet_v2"}, seed=0)
    task.check()
    assert task.evaluate(exported, "test")["accuracy"] == report["models"]["theseus"]["test"]["accuracy"]


@pytest.mark.parametrize(
    ("change", "shared"),
    [
        ({"successor": "shufflenet_v2"}, True),
        ({"blocks": [1, 1, 1, 1], "init": "last"}, True),
        ({"dev_size": 17}, False),
        ({"architecture": "resnet50"}, False),
    ],
)
def test_recipes_that_differ_only_in_the_successor_share_a_predecessor(change, shared, tmp_path):
    assert_shares_predecessor(
        "resnet-fashion-mnist-converged", change, shared, images.ResNetTask.compression_options, tmp_path
    )


def test_heterogeneous_baselines_train_the_architecture_theseus_exports(fake_cache):
    task = images.ResNetTask({"successor": "shufflenet_v2"}, seed=0)
    predecessor = task.build_predecessor()
    model = copy.deepcopy(predecessor)
    theseus_init = th.replace_(model, task.plan(model)).finalize().state_dict()
    truncated = task.truncated(predecessor).state_dict()
    assert {key: value.shape for key, value in truncated.items()} == {k: v.shape for k, v in theseus_init.items()}
    stem_and_head = [key for key in truncated if key.startswith(("conv1.", "bn1.", "fc."))]
    assert stem_and_head and all(torch.equal(truncated[key], predecessor.state_dict()[key]) for key in stem_and_head)
    scratch = task.scratch().state_dict()
    assert scratch.keys() == truncated.keys() and not torch.equal(scratch["conv1.weight"], truncated["conv1.weight"])


def test_a_stage_a_search_emptied_exports_and_reloads_through_the_task(fake_cache, tmp_path):
    """Every group of a stage that keeps its shape skipped (layer1: a budget search may) leaves the stage without
    blocks, which no torchvision constructor builds: the task's export describes it, and `load_exported` rebuilds it
    strictly, computing the same."""
    task = images.ResNetTask(TINY["options"], seed=0)
    model = task.build_predecessor().eval()
    model.layer1 = torch.nn.Sequential()
    task.export(model, tmp_path / "model")
    rebuilt = images.load_exported(tmp_path / "model")
    assert [len(getattr(rebuilt, f"layer{index}")) for index in range(1, 5)] == [0, 4, 6, 3]  # resnet34
    batch = task.latency_batch()[:4]
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(batch), model(batch))
