"""The ResNet family: torchvision ResNets on Fashion-MNIST, ResNet-34 → ResNet-18 by default.

No pretrained weights can be fetched offline, so a run first trains the
predecessor from scratch (the recipe's ``predecessor`` phase), then compresses
it with `theseus_adapters.resnet` (each stage cut into groups, one successor
block per group, started from the stage's first blocks), then trains the
baselines. The compact model is an ordinary torchvision ResNet: ResNet-34
compressed to ``blocks=(2, 2, 2, 2)`` exports a state_dict that
``torchvision.models.resnet18(num_classes=10)`` loads with ``strict=True``
(`load_exported` does it from ``config.json``).

Inputs. Images stay at their native 28×28: the torchvision stem (7×7 stride-2
convolution, max-pool) takes them to 7×7, and the four stages to 7, 4, 2 and
1 pixels. Pixels are scaled to [0, 1], normalised with the training set's mean
and standard deviation, and the gray channel is repeated three times, so that
the model is torchvision's own architecture, ``conv1`` with 3 input channels
included (a 1-channel ``conv1`` would break the strict load into a stock
``resnet18``). No augmentation.

Data. The Fashion-MNIST idx files come from the ``fashion-mnist`` asset
(``python -m theseus_zoo.assets fetch fashion-mnist``), from any folder holding
them (option ``data_dir``; gzipped or not), or from torchvision's downloader
when a network exists (option ``source="torchvision"``, not exercised by the
tests). Splits are fixed and independent of the run seed and of library
versions: the 60,000 training images are ordered by ``sha256(f"{data_seed}:{i}")``;
the first ``dev_size`` form ``dev``, the next ``train_size`` (default: all the
rest) ``train``; ``test`` is the official 10,000-image test set (or a fixed
subset of ``test_size`` images, chosen by the same kind of key).

Cost, and the default recipe ``resnet-fashion-mnist``. Measured on this
project's machine (2 cores of an AMD EPYC shared with other jobs, eager fp32,
batch 64): a ResNet-34 training step at 28×28 runs about 70 images/s on one
thread of a free core and about 40 under load, ResNet-18 about 135 and 80; a
second thread made both slower on the busy machine (11–24 and 32–45 images/s).
ResNet-34 at 28×28 costs about 70 M multiply-adds per image (3.6 G at 224×224),
and the backward pass takes two thirds of a step. So every phase is short: the
predecessor trains 160 steps of 64 images (10,240 images, a sixth of an epoch)
and reaches about 0.80 test accuracy, far from converged; replacing (lr 5e-4,
p = 1 at step 25) and each baseline get 100 steps; the dev set (1,000 images)
is evaluated twice a phase; the test set is a fixed 5,000 of the official
10,000 (all 10,000 took two of the run's minutes, five models evaluated). A run
takes about 8.5 minutes of CPU time with one thread (20 minutes of wall time
when two runs share the 2 busy cores). Every compressed model then ends above
the predecessor, which they all keep training. ``resnet-fashion-mnist-gpu`` is
the same comparison with a predecessor trained about 9 epochs, for a GPU::

    theseus compress --recipe resnet-fashion-mnist --out runs/resnet-fashion-mnist
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import torch
import torch.nn.functional as F
from torch import nn

import theseus_core as th
from theseus_adapters import resnet

from .assets import MissingAssetError, asset_path, cache_dir
from .recipe import Phase, Recipe, register_recipe
from .task import register_family

ASSET = "fashion-mnist"
FILES = {  # split of the official distribution: (images, labels), each possibly with ".gz"
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
NUM_CLASSES = len(CLASS_NAMES)
MEAN, STD = 0.2860, 0.3530  # of the 60,000 training images' pixels scaled to [0, 1]

ARCHITECTURES = {  # torchvision constructor -> (residual block class, blocks per stage)
    "resnet18": ("BasicBlock", (2, 2, 2, 2)),
    "resnet34": ("BasicBlock", (3, 4, 6, 3)),
    "resnet50": ("Bottleneck", (3, 4, 6, 3)),
    "resnet101": ("Bottleneck", (3, 4, 23, 3)),
    "resnet152": ("Bottleneck", (3, 8, 36, 3)),
}
SOURCES = ("asset", "torchvision")
EVAL_BATCH = 500  # images per forward pass in `evaluate`
LATENCY_BATCH = 128  # test images per forward pass when the report times predecessor and successor

OPTIONS: dict[str, Any] = {
    "architecture": "resnet34",
    "blocks": (2, 2, 2, 2),
    "init": "first",
    "dev_size": 1000,
    "train_size": None,
    "test_size": None,
    "data_seed": 0,
    "data_dir": None,
    "source": "asset",
}


# ------------------------------------------------------------------------ data
def read_idx(path: str | Path) -> torch.Tensor:
    """The array in an idx file of unsigned bytes (all of (Fashion-)MNIST's files), gzipped (``.gz``) or not.

    Returns:
        A ``torch.uint8`` tensor of the shape the header gives: ``(N, 28, 28)`` for images, ``(N,)`` for labels.

    Raises:
        ValueError: not an idx file of unsigned bytes, or one whose size disagrees with its header.
    """
    path = Path(path)
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise ValueError(f"{path} is not a readable gzip file ({error}); fetch the data again") from None
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] != 0x08:
        raise ValueError(
            f"{path} is not an idx file of unsigned bytes (magic {data[:4].hex() or 'missing'}, expected 000008..); "
            f"give the Fashion-MNIST idx files"
        )
    dims = data[3]
    header = 4 + 4 * dims
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    expected = 1
    for size in shape:
        expected *= size
    if len(data) < header or len(data) - header != expected:
        raise ValueError(
            f"{path}: the header gives shape {tuple(shape)}, but the file holds {len(data) - header} bytes"
        )
    return torch.frombuffer(bytearray(data[header:]), dtype=torch.uint8).reshape(shape)


def find_files(directory: str | Path) -> dict[str, tuple[Path, Path]]:
    """Per official split (``train``, ``test``), the paths of its images and labels files in ``directory``
    (``name.gz`` or ``name``). Raises `ValueError` naming the first file missing."""
    directory = Path(directory)
    found = {}
    for split, names in FILES.items():
        paths = []
        for name in names:
            candidates = [directory / f"{name}.gz", directory / name]
            path = next((candidate for candidate in candidates if candidate.is_file()), None)
            if path is None:
                raise ValueError(
                    f"{directory} holds no {name}.gz (nor {name}); give data_dir a folder with the four "
                    f"Fashion-MNIST idx files, or leave it unset for the cached asset"
                )
            paths.append(path)
        found[split] = (paths[0], paths[1])
    return found


def read_fashion_mnist(directory: str | Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The official ``train`` and ``test`` sets in ``directory``: ``(images, labels)`` with images
    ``uint8 (N, 28, 28)`` and labels ``int64 (N,)`` in ``[0, 10)``. Raises `ValueError` for bad files."""
    data = {}
    for split, (images_path, labels_path) in find_files(directory).items():
        images, labels = read_idx(images_path), read_idx(labels_path)
        if images.dim() != 3 or labels.dim() != 1 or len(images) != len(labels):
            raise ValueError(
                f"{images_path} and {labels_path} must hold (N, height, width) images and N labels, "
                f"got shapes {tuple(images.shape)} and {tuple(labels.shape)}"
            )
        if len(labels) and int(labels.max()) >= NUM_CLASSES:
            raise ValueError(f"{labels_path} holds label {int(labels.max())}; Fashion-MNIST has {NUM_CLASSES} classes")
        data[split] = (images, labels.long())
    return data


def split_order(size: int, seed: int, salt: str = "") -> list[int]:
    """Indices ``0 … size-1`` ordered by ``sha256(f"{salt}{seed}:{i}")``: a fixed shuffle that no library
    version changes."""
    return sorted(range(size), key=lambda i: hashlib.sha256(f"{salt}{seed}:{i}".encode()).digest())


class ImageSplit(Sequence):
    """A split as a sequence of ``(image, label)`` examples: image ``uint8 (28, 28)``, label an ``int``.

    ``images`` and ``labels`` hold the whole split as two tensors, for evaluation in large batches.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    @overload
    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]: ...

    @overload
    def __getitem__(self, index: slice) -> ImageSplit: ...

    def __getitem__(self, index: int | slice) -> tuple[torch.Tensor, int] | ImageSplit:
        if isinstance(index, slice):
            return ImageSplit(self.images[index], self.labels[index])
        return self.images[index], int(self.labels[index])

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        return (self[i] for i in range(len(self)))


def make_splits(
    data: dict[str, tuple[torch.Tensor, torch.Tensor]],
    *,
    dev_size: int,
    train_size: int | None = None,
    test_size: int | None = None,
    data_seed: int = 0,
) -> dict[str, ImageSplit]:
    """``train``, ``dev`` and ``test`` from the official sets, as the module docstring describes (each split
    in ascending file order). Raises `ValueError` when the sizes ask for more images than there are."""
    train_images, train_labels = data["train"]
    test_images, test_labels = data["test"]
    if dev_size + (train_size or 1) > len(train_labels):
        raise ValueError(
            f"dev_size={dev_size} plus train_size={train_size} asks for more than the {len(train_labels)} images of "
            f"the training set; choose smaller sizes"
        )
    if (test_size or 0) > len(test_labels):
        raise ValueError(f"test_size={test_size} asks for more than the {len(test_labels)} test images; choose fewer")
    order = split_order(len(train_labels), data_seed)
    dev = sorted(order[:dev_size])
    train = sorted(order[dev_size:] if train_size is None else order[dev_size : dev_size + train_size])
    test = list(range(len(test_labels)))
    if test_size is not None:
        test = sorted(split_order(len(test_labels), data_seed, salt="test:")[:test_size])
    return {
        "train": ImageSplit(train_images[train], train_labels[train]),
        "dev": ImageSplit(train_images[dev], train_labels[dev]),
        "test": ImageSplit(test_images[test], test_labels[test]),
    }


def to_inputs(images: torch.Tensor) -> torch.Tensor:
    """Model inputs from ``uint8 (N, H, W)`` gray images: ``float32 (N, 3, H, W)``, normalised, the gray
    channel repeated three times."""
    normalised = (images.float() / 255 - MEAN) / STD
    return normalised.unsqueeze(1).repeat(1, 3, 1, 1)


# ---------------------------------------------------------------------- models
def build_resnet(block: str, layers: Sequence[int], num_classes: int = NUM_CLASSES) -> nn.Module:
    """``torchvision.models.resnet.ResNet(block, layers, num_classes=...)``, randomly initialised: what
    ``torchvision.models.resnet18(num_classes=...)`` builds for ``("BasicBlock", (2, 2, 2, 2))``."""
    from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

    blocks = {"BasicBlock": BasicBlock, "Bottleneck": Bottleneck}
    if block not in blocks:
        raise ValueError(f"block must be one of {', '.join(blocks)}, got {block!r}")
    return ResNet(blocks[block], list(layers), num_classes=num_classes)


def constructor_name(block: str, layers: Sequence[int]) -> str | None:
    """The ``torchvision.models`` constructor with this block and these blocks per stage (``"resnet18"``),
    or ``None`` when torchvision has none."""
    return next((name for name, shape in ARCHITECTURES.items() if shape == (block, tuple(layers))), None)


def load_exported(directory: str | Path) -> nn.Module:
    """The model that `ResNetTask.export` wrote in ``directory``, loaded with ``strict=True``, in eval mode:
    ``torchvision.models.<constructor>(num_classes=...)`` (or ``ResNet(block, layers)`` when torchvision has no
    constructor for the block counts). Its inputs are `to_inputs` of the gray images (see ``config.json``)."""
    directory = Path(directory)
    config = json.loads((directory / "config.json").read_text())
    if config["constructor"] is not None:
        import torchvision

        model = getattr(torchvision.models, config["constructor"])(num_classes=config["num_classes"])
    else:
        model = build_resnet(config["block"], config["layers"], config["num_classes"])
    model.load_state_dict(torch.load(directory / "model.pt", weights_only=True), strict=True)
    return model.eval()


# ------------------------------------------------------------------------ task
class ResNetTask:
    """`Task` for torchvision ResNets on Fashion-MNIST (the module docstring gives inputs, splits and cost).

    Options:
        architecture: The predecessor, a torchvision constructor name: ``resnet18``, ``resnet34``, ``resnet50``,
            ``resnet101``, ``resnet152``. (default: ``"resnet34"``)
        blocks: Successor blocks per stage, each at most the predecessor's and fewer in total (passed to
            `theseus_adapters.resnet.plan`). (default: ``(2, 2, 2, 2)``: resnet34 → resnet18)
        init: Which predecessor blocks the successors start from (`theseus_adapters.resnet.plan`); the
            ``truncated`` and ``kd`` baselines always start from the first blocks of each stage.
            (default: ``"first"``)
        dev_size: Training images held out as the dev set. (default: ``1000``)
        train_size: Training images used, after the dev set (``None``: all the others). (default: ``None``)
        test_size: Test images (``None``: the official 10,000). (default: ``None``)
        data_seed: Seed of the fixed split, independent of the run seed. (default: ``0``)
        data_dir: A folder with the four idx files (``None``: the ``fashion-mnist`` asset); with
            ``source="torchvision"``, torchvision's root folder. (default: ``None``)
        source: ``"asset"`` reads the files; ``"torchvision"`` first runs
            ``torchvision.datasets.FashionMNIST(data_dir, download=True)`` (needs a network; ``data_dir``
            defaults to ``$THESEUS_CACHE/torchvision``). (default: ``"asset"``)
    """

    metric = "accuracy"

    def __init__(self, options: dict[str, Any], seed: int) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(f"unknown resnet options {unknown}; known: {', '.join(OPTIONS)}")
        chosen = {**OPTIONS, **options}
        self.architecture: str = chosen["architecture"]
        self.blocks = chosen["blocks"]
        self.init = chosen["init"]
        self.dev_size, self.train_size, self.test_size = chosen["dev_size"], chosen["train_size"], chosen["test_size"]
        self.data_seed, self.data_dir, self.source = chosen["data_seed"], chosen["data_dir"], chosen["source"]
        self._splits: dict[str, ImageSplit] | None = None

    # ------------------------------------------------------------------ checks
    def check(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(
                f"unknown architecture {self.architecture!r}; choose one of {', '.join(ARCHITECTURES)} "
                f"(torchvision constructors)"
            )
        block, layers = ARCHITECTURES[self.architecture]
        blocks = self.blocks
        if (
            isinstance(blocks, (str, bytes))
            or not isinstance(blocks, Sequence)
            or len(blocks) != len(layers)
            or any(
                not isinstance(b, int) or isinstance(b, bool) or not 1 <= b <= n
                for b, n in zip(blocks, layers, strict=True)
            )
            or sum(blocks) >= sum(layers)
        ):
            raise ValueError(
                f"blocks must give {len(layers)} block counts, each between 1 and {self.architecture}'s "
                f"{layers} and fewer in total, got {blocks!r}; e.g. {ARCHITECTURES['resnet18'][1]}"
            )
        self.blocks = tuple(blocks)
        with torch.device("meta"):  # the adapter's own checks of `init`, on a model without memory
            resnet.plan(build_resnet(block, layers), self.blocks, init=self.init)
        for name in ("dev_size", "train_size", "test_size", "data_seed"):
            value = getattr(self, name)
            optional = name in ("train_size", "test_size")
            if not (optional and value is None) and (
                not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "data_seed" else 1)
            ):
                what = "an integer >= 0" if name == "data_seed" else "an integer >= 1"
                raise ValueError(f"{name} must be {what}{' or null' if optional else ''}, got {value!r}")
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {self.source!r}")
        self._load()  # missing or bad files, and sizes larger than the data, fail here, before any training

    def _directory(self) -> Path:
        if self.source == "torchvision":
            from torchvision.datasets import FashionMNIST

            root = Path(self.data_dir) if self.data_dir is not None else cache_dir() / "torchvision"
            try:  # downloads the four files (both sets) and keeps the .gz files in its raw folder
                return Path(FashionMNIST(str(root), train=True, download=True).raw_folder)
            except (OSError, RuntimeError) as error:
                reason = " ".join(str(error).split())  # one line
                raise ValueError(
                    f"torchvision could not download Fashion-MNIST into {root} ({reason}); without a network use "
                    f"source='asset' (python -m theseus_zoo.assets fetch {ASSET})"
                ) from None
        if self.data_dir is not None:
            return Path(self.data_dir)
        try:
            return asset_path(ASSET)
        except MissingAssetError as error:
            raise ValueError(str(error)) from None

    def _load(self) -> dict[str, ImageSplit]:
        if self._splits is None:
            self._splits = make_splits(
                read_fashion_mnist(self._directory()),
                dev_size=self.dev_size,
                train_size=self.train_size,
                test_size=self.test_size,
                data_seed=self.data_seed,
            )
        return self._splits

    # ------------------------------------------------------------------ models
    @property
    def successor_block(self) -> str:
        return ARCHITECTURES[self.architecture][0]

    def build_predecessor(self) -> nn.Module:
        return build_resnet(*ARCHITECTURES[self.architecture])

    def plan(self, model: nn.Module) -> th.Plan:
        return resnet.plan(model, tuple(self.blocks), init=self.init)

    def truncated(self, predecessor: nn.Module) -> nn.Module:
        """A copy of the predecessor keeping the first ``blocks[i]`` blocks of stage ``i``: the successor's
        architecture as `resnet.plan` with ``init="first"`` initialises it (stem, head and the stages' bottom
        blocks, whose first keeps the stage's downsampling)."""
        model = copy.deepcopy(predecessor)
        for name, count in zip(resnet.stage_names(model), self.blocks, strict=True):
            setattr(model, name, getattr(model, name)[:count])
        return model

    def scratch(self) -> nn.Module:
        return build_resnet(self.successor_block, self.blocks)

    # -------------------------------------------------------------- data, loss
    def dataset(self, split: str) -> ImageSplit:
        splits = self._load()
        if split not in splits:
            raise ValueError(f"unknown split {split!r}; Fashion-MNIST has {', '.join(splits)}")
        return splits[split]

    def collate(self, examples: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = zip(*examples, strict=True)
        return to_inputs(torch.stack(images)), torch.tensor(labels)

    def criterion(self, logits: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(logits, batch[1])

    def logits(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        # While replacing, theseus_core keeps the frozen batch norms' statistics (the stem's and the
        # predecessor blocks'): nothing to do here after the trainer's model.train().
        return model(batch[0])

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        model.eval()
        data, device = self.dataset(split), next(model.parameters()).device
        correct = 0
        for start in range(0, len(data), EVAL_BATCH):
            # channels_last inputs: 1.2-1.5x faster eval forward on the CPU (oneDNN), same architecture
            inputs = to_inputs(data.images[start : start + EVAL_BATCH]).to(device, memory_format=torch.channels_last)
            predictions = model(inputs).argmax(dim=1).cpu()
            correct += int((predictions == data.labels[start : start + EVAL_BATCH]).sum())
        return {"accuracy": correct / len(data)}

    def latency_batch(self) -> torch.Tensor:
        return to_inputs(self.dataset("test").images[:LATENCY_BATCH])

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(batch)

    def example_inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """What `replace_` runs the model on to verify the surgery: ``model(*args, **kwargs)``."""
        return (self.latency_batch()[:8],), {}

    # ------------------------------------------------------------------ export
    def config(self, model: nn.Module) -> dict[str, Any]:
        """What ``config.json`` holds: the torchvision constructor (or block and layers) and the inputs."""
        layers = [len(getattr(model, name)) for name in resnet.stage_names(model)]
        return {
            "constructor": constructor_name(self.successor_block, layers),
            "block": self.successor_block,
            "layers": layers,
            "num_classes": NUM_CLASSES,
            "class_names": list(CLASS_NAMES),
            "inputs": {
                "shape": [3, 28, 28],
                "preprocessing": "gray pixels / 255, then (x - mean) / std, repeated to 3 channels",
                "mean": MEAN,
                "std": STD,
            },
        }

    def export(self, model: nn.Module, directory: Path) -> list[Path]:
        """``model.pt`` (a state_dict) and ``config.json``: ``torchvision.models.resnet18(num_classes=10)`` loads
        the default recipe's model with ``strict=True`` (`load_exported` reads the config)."""
        directory.mkdir(parents=True, exist_ok=True)
        weights, config = directory / "model.pt", directory / "config.json"
        torch.save(model.state_dict(), weights)
        config.write_text(json.dumps(self.config(model), indent=2) + "\n")
        return [weights, config]


register_family("resnet")(ResNetTask)

RESNET_FASHION_MNIST = register_recipe(
    Recipe(
        name="resnet-fashion-mnist",
        family="resnet",
        description="torchvision ResNet-34 -> ResNet-18 on Fashion-MNIST 28x28, all trained from scratch in ~9 "
        "CPU-minutes: short phases, the predecessor far from converged",
        options={"architecture": "resnet34", "blocks": (2, 2, 2, 2), "dev_size": 1000, "test_size": 5000},
        predecessor=Phase(steps=160, lr=1e-3, batch_size=64, eval_every=80),
        replacing=Phase(steps=100, lr=5e-4, batch_size=64, eval_every=50),
        steps_to_one=25,
        patience=None,
    )
)

RESNET_FASHION_MNIST_GPU = register_recipe(
    Recipe(
        name="resnet-fashion-mnist-gpu",
        family="resnet",
        description="ResNet-34 -> ResNet-18 on Fashion-MNIST, the predecessor trained ~9 epochs (for a GPU; not run "
        "yet)",
        options={"architecture": "resnet34", "blocks": (2, 2, 2, 2), "dev_size": 5000},
        predecessor=Phase(steps=4000, lr=1e-3, batch_size=128, eval_every=500),
        replacing=Phase(steps=3000, lr=3e-4, batch_size=128, eval_every=250),
        steps_to_one=1500,
        patience=4,
    )
)
