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
(``theseus fetch fashion-mnist``), from any folder holding
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
and reaches about 0.80 test accuracy, far from converged; Theseus, run as its
best measured variant (``theseus+warmup+kd``: 20 of its steps on blockwise
warm-up, then replacing with the KD loss, lr 5e-4, p = 1 at step 25), and the
truncated and KD baselines get 100 steps each; the dev set (1,000 images)
is evaluated twice a phase; the test set is a fixed 5,000 of the official
10,000 (all 10,000 took two of the run's minutes, five models evaluated). A run
with the paper's Theseus and three baselines took about 8.5 minutes of CPU
time with one thread (20 minutes of wall time when two runs share the 2 busy
cores). Every compressed model then ends above
the predecessor, which they all keep training. ``resnet-fashion-mnist-gpu`` is
the same comparison with a predecessor trained about 9 epochs, for a GPU::

    theseus compress --recipe resnet-fashion-mnist --out runs/resnet-fashion-mnist
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

import theseus_core as th
from theseus_adapters import resnet

from ..data.assets import MissingAssetError, asset_path, cache_dir
from ..data.fashion_mnist import (
    ASSET,
    CLASS_NAMES,
    MEAN,
    NUM_CLASSES,
    STD,
    ImageSplit,
    make_splits,
    read_fashion_mnist,
    to_inputs,
)
from . import ScoresAccuracy
from .exported import hold_export
from .options import parse_options

ARCHITECTURES = {  # torchvision constructor -> (residual block class, blocks per stage)
    "resnet18": ("BasicBlock", (2, 2, 2, 2)),
    "resnet34": ("BasicBlock", (3, 4, 6, 3)),
    "resnet50": ("Bottleneck", (3, 4, 6, 3)),
    "resnet101": ("Bottleneck", (3, 4, 23, 3)),
    "resnet152": ("Bottleneck", (3, 8, 36, 3)),
}
EVAL_BATCH = 500  # images per forward pass in `evaluate`
LATENCY_BATCH = 128  # test images per forward pass when the report times predecessor and successor


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
    constructor for the block counts; `theseus_adapters.resnet.successor_blocks.build_from_config` for heterogeneous
    successors). Its inputs are `to_inputs` of the gray images (see ``config.json``)."""
    directory = Path(directory)
    model = _build_exported(json.loads((directory / "config.json").read_text()))
    model.load_state_dict(torch.load(directory / "model.pt", weights_only=True), strict=True)
    return model.eval()


def _build_exported(config: dict[str, Any]) -> nn.Module:
    if "light_blocks" in config:  # heterogeneous successors: the adapter's config rebuilds them
        from theseus_adapters.resnet import successor_blocks

        return successor_blocks.build_from_config(config["light_blocks"])
    if config["constructor"] is not None:
        import torchvision

        return getattr(torchvision.models, config["constructor"])(num_classes=config["num_classes"])
    return build_resnet(config["block"], config["layers"], config["num_classes"])


# ------------------------------------------------------------------------ task
@dataclass(frozen=True)
class ResNetOptions:
    """The resnet family's options.

    Args:
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
        successor: Heterogeneous successors, registered in `theseus_adapters.resnet`: ``"mobilenet_v2"`` (an
            inverted residual), ``"shufflenet_v2"``, ``"depthwise_separable"`` or ``"narrow_basic"`` (a BasicBlock
            of half the inner width, started from the group's first block; BasicBlock architectures only) replace
            each group of blocks (the baselines train the same architecture, `ResNetTask.truncated`); ``None`` is a
            block of the predecessor's type.
            (default: ``None``)
    """

    architecture: Literal["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"] = "resnet34"
    blocks: tuple[int, ...] = (2, 2, 2, 2)
    init: str | tuple[int, ...] = "first"
    dev_size: int = field(default=1000, metadata={"min": 1})
    train_size: int | None = field(default=None, metadata={"min": 1})
    test_size: int | None = field(default=None, metadata={"min": 1})
    data_seed: int = field(default=0, metadata={"min": 0})
    data_dir: str | None = None
    source: Literal["asset", "torchvision"] = "asset"
    successor: Literal["mobilenet_v2", "shufflenet_v2", "depthwise_separable", "narrow_basic"] | None = None


class ResNetTask(ScoresAccuracy):
    """`Task` for torchvision ResNets on Fashion-MNIST (the module docstring gives inputs, splits and cost); options
    in `ResNetOptions`."""

    compression_options = ("blocks", "init", "successor")  # `--predecessor-from` takes any of them alike

    def __init__(self, options: dict[str, Any], seed: int) -> None:
        parsed = parse_options(ResNetOptions, options, "resnet")
        self.architecture, self.blocks, self.init = parsed.architecture, parsed.blocks, parsed.init
        self.dev_size, self.train_size, self.test_size = parsed.dev_size, parsed.train_size, parsed.test_size
        self.data_seed, self.data_dir, self.source = parsed.data_seed, parsed.data_dir, parsed.source
        self.successor = parsed.successor
        self._splits: dict[str, ImageSplit] | None = None

    @property
    def assets(self) -> tuple[str, ...]:
        """``("fashion-mnist",)`` where the images come from the asset (`ReadsAssets`)."""
        return (ASSET,) if self.source == "asset" and self.data_dir is None else ()

    # ------------------------------------------------------------------ checks
    def check(self) -> None:
        block, layers = ARCHITECTURES[self.architecture]
        blocks = self.blocks
        if (
            len(blocks) != len(layers)
            or any(not 1 <= b <= n for b, n in zip(blocks, layers, strict=True))
            or sum(blocks) >= sum(layers)
        ):
            raise ValueError(
                f"blocks must give {len(layers)} block counts, each between 1 and {self.architecture}'s "
                f"{layers} and fewer in total, got {blocks!r}; e.g. {ARCHITECTURES['resnet18'][1]}"
            )
        if self.successor == "narrow_basic" and block != "BasicBlock":  # its factory would refuse at replace_
            raise ValueError(
                f"successor narrow_basic narrows BasicBlocks; {self.architecture} is built of {block}s: choose another "
                "successor"
            )
        with torch.device("meta"):  # the adapter's own checks of `init`, on a model without memory
            resnet.plan(build_resnet(block, layers), self.blocks, init=self.init, successor=self.successor)
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
                    f"source='asset' (theseus fetch {ASSET})"
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
        return resnet.plan(model, tuple(self.blocks), init=self.init, successor=self.successor)

    def candidates(self, model: nn.Module) -> tuple[dict[str, list[th.ModuleSpec]], Any]:
        """`OffersCandidates`: per group of the plan, ``keep``, ``skip``, ``basic`` and the light blocks
        (`theseus_adapters.resnet.candidates`); a choice finalizes into an ordinary ResNet (`flatten_stages`)."""
        return resnet.candidates(model, tuple(self.blocks)), resnet.flatten_stages

    def truncated(self, predecessor: nn.Module) -> nn.Module:
        """A copy of the predecessor keeping the first ``blocks[i]`` blocks of stage ``i``: the successor's
        architecture as `resnet.plan` with ``init="first"`` initialises it (stem, head and the stages' bottom
        blocks, whose first keeps the stage's downsampling). With heterogeneous successors: the successor model as the
        plan builds it, untrained (the predecessor's stem and head, new blocks of the other kind, or for
        ``"narrow_basic"`` each group's first block narrowed), so that the baselines train the very architecture
        Theseus exports, from the weights Theseus starts from."""
        model = copy.deepcopy(predecessor)
        if self.successor is not None:
            return th.replace_(model, self.plan(model)).finalize()
        for name, count in zip(resnet.stage_names(model), self.blocks, strict=True):
            setattr(model, name, getattr(model, name)[:count])
        return model

    def scratch(self) -> nn.Module:
        """The successor's architecture, every weight random (heterogeneous successors included)."""
        if self.successor is not None:
            return self.truncated(self.build_predecessor())
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

    # Per-example predictions (`ScoresAccuracy`): reports carry bootstrap standard errors and paired comparisons,
    # also across the recipes that share a predecessor, whose test sets are the same fixed images.
    @torch.no_grad()
    def predictions(self, model: nn.Module, split: str) -> torch.Tensor:
        """The predicted class of every image of the split (float, in the split's order)."""
        model.eval()
        data, device = self.dataset(split), next(model.parameters()).device
        predicted = []
        for start in range(0, len(data), EVAL_BATCH):
            # channels_last inputs: 1.2-1.5x faster eval forward on the CPU (oneDNN), same architecture
            inputs = to_inputs(data.images[start : start + EVAL_BATCH]).to(device, memory_format=torch.channels_last)
            predicted.append(model(inputs).argmax(dim=1).cpu())
        return torch.cat(predicted).float()

    def labels(self, split: str) -> torch.Tensor:
        return self.dataset(split).labels.float()

    def latency_batch(self) -> torch.Tensor:
        return to_inputs(self.dataset("test").images[:LATENCY_BATCH])

    def forward(self, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        return model(batch)

    def example_inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """What `replace_` runs the model on to verify the surgery: ``model(*args, **kwargs)``."""
        return (self.latency_batch()[:8],), {}

    # ------------------------------------------------------------------ export
    def config(self, model: nn.Module) -> dict[str, Any]:
        """What ``config.json`` holds: the torchvision constructor (or block and layers) and the inputs; for
        heterogeneous successors, or a stage left with no block, also ``light_blocks``, the config that rebuilds the
        model without theseus."""
        layers = [len(getattr(model, name)) for name in resnet.stage_names(model)]
        from theseus_adapters.resnet import successor_blocks

        light = {}  # heterogeneous successors (a light-block recipe's, or a budget search's choice)
        if 0 in layers or any(
            isinstance(module, tuple(successor_blocks.BLOCKS.values())) for module in model.modules()
        ):
            # a stage of no blocks (a search skipped all its groups) is no torchvision ResNet either
            light = {"light_blocks": successor_blocks.export_config(model)}
        return {
            **light,
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

    def export_onnx(self, model_dir: Path, out: Path) -> list[Any]:
        """`ExportsOnnx`: ``model.onnx``, input ``images`` ``[batch, 3, 28, 28]``, output ``logits``."""
        from ..export.onnx import Images, export_onnx

        model = load_exported(model_dir)
        shape = json.loads((model_dir / "config.json").read_text()).get("inputs", {}).get("shape", [3, 28, 28])
        generator = torch.Generator().manual_seed(0)
        images = {"images": torch.randn(2, *shape, generator=generator)}
        others = [{"images": torch.randn(n, *shape, generator=generator)} for n in (1, 5)]
        axes = {"images": {0: "batch"}}
        return [export_onnx(Images(model), images, out / "model.onnx", dynamic_axes=axes, check_inputs=others)]

    def export(self, model: nn.Module, directory: Path) -> list[Path]:
        """``model.pt`` (a state_dict) and ``config.json``: ``torchvision.models.resnet18(num_classes=10)`` loads
        the default recipe's model with ``strict=True`` (`load_exported` reads the config), and computes what ``model``
        does, or the export refuses (`theseus_zoo.tasks.exported.hold_export`)."""
        directory.mkdir(parents=True, exist_ok=True)
        weights, config = directory / "model.pt", directory / "config.json"
        torch.save(model.state_dict(), weights)
        config.write_text(json.dumps(self.config(model), indent=2) + "\n")
        reload = lambda: load_exported(directory)  # noqa: E731 - strict
        return hold_export([weights, config], model, reload, self.forward, self.latency_batch()[:8])
