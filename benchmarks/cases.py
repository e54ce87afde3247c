"""The model families the benchmarks measure: predecessor, plan, inputs.

Sizes are chosen so that `make bench` fits in 30 minutes on 2 CPU cores; pass
``--full`` to `benchmarks.run` for paper-sized inputs on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

import theseus_core as th


@dataclass
class Case:
    """One compression to measure.

    ``inputs(size)`` returns ``(args, kwargs)`` for the model: ``size`` is the
    batch size (or the number of nodes for a graph); ``labels(size)`` the targets
    of a cross-entropy loss on the model's output (``logits(output)``).
    """

    name: str
    build: Callable[[], nn.Module]
    plan: Callable[[nn.Module], Any]
    inputs: Callable[[int], tuple[tuple, dict]]
    labels: Callable[[int], torch.Tensor]
    sizes: list[int]  # inference batch sizes for the latency curve
    train_size: int
    ideal_speedup: float  # layer (or FLOP) ratio of the compressed part
    logits: Callable[[Any], torch.Tensor] = lambda output: output
    replace_options: dict[str, Any] = field(default_factory=dict)
    size_label: str = "batch size"
    note: str = ""
    check_recompilation: bool = True  # off where 200 compiled training steps cost too much on a CPU


def _bert_case(name, model_factory, num_layers, seq_len, sizes, train_size, ideal, note) -> Case:
    from theseus_adapters import bert

    def inputs(size: int) -> tuple[tuple, dict]:
        generator = torch.Generator().manual_seed(size)
        ids = torch.randint(1000, 2000, (size, seq_len), generator=generator)
        return (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    return Case(
        name=name,
        build=model_factory,
        plan=lambda model: bert.plan(model, num_layers=num_layers),
        inputs=inputs,
        labels=lambda size: torch.arange(size) % 2,
        sizes=sizes,
        train_size=train_size,
        ideal_speedup=ideal,
        logits=lambda output: output.logits,
        note=note + f"; sequence length {seq_len}",
    )


def bert_base(full: bool) -> Case:
    from transformers import BertConfig, BertForSequenceClassification

    def build() -> nn.Module:
        torch.manual_seed(0)
        return BertForSequenceClassification(BertConfig(num_labels=2))  # BERT-base size, random init

    case = _bert_case(
        "BERT-base 12→6",
        build,
        6,
        seq_len=128 if full else 64,
        sizes=[1, 8, 32] if full else [1, 4, 16],
        train_size=32 if full else 8,
        ideal=2.0,
        note="random-init BERT-base config (no 12-layer BERT weights can be had here)",
    )
    case.check_recompilation = full  # the MiniLM case checks the same layers on a CPU
    return case


def minilm(full: bool) -> Case:
    from transformers import AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification

    from theseus_zoo.data.assets import MissingAssetError, asset_path

    try:
        path = asset_path("all-minilm-l6-v2")
        note = "all-MiniLM-L6-v2 weights (asset), new 2-class head"
    except MissingAssetError:
        path = None
        note = "all-MiniLM-L6-v2 shape, random init (asset not fetched)"

    def build() -> nn.Module:
        torch.manual_seed(0)
        if path is not None:
            return AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
        config = BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
        return BertForSequenceClassification(config)

    return _bert_case(
        "MiniLM-L6 6→3", build, 3, seq_len=64, sizes=[1, 8, 32], train_size=32 if full else 16, ideal=2.0, note=note
    )


def resnet34(full: bool) -> Case:
    from torchvision.models import resnet34 as make_resnet34

    def build() -> nn.Module:
        torch.manual_seed(0)
        return make_resnet34(num_classes=10)

    def plan(model: nn.Module) -> th.Plan:
        from theseus_adapters import resnet

        return resnet.plan(model, blocks=(2, 2, 2, 2))  # (3, 4, 6, 3) -> resnet18's layout

    resolution = 224 if full else 64

    def inputs(size: int) -> tuple[tuple, dict]:
        return (torch.randn(size, 3, resolution, resolution, generator=torch.Generator().manual_seed(size)),), {}

    return Case(
        name="ResNet-34→18",
        build=build,
        plan=plan,
        inputs=inputs,
        labels=lambda size: torch.arange(size) % 10,
        sizes=[1, 8, 32],
        train_size=32 if full else 16,
        ideal_speedup=3.6 / 1.8,  # GFLOPs of resnet34 / resnet18 at 224²
        replace_options={"predecessor_eval": True},
        note=f"torchvision, random init, {resolution}×{resolution} images",
    )


def gcn(full: bool) -> Case:
    from torch_geometric.nn import GCN

    from theseus_adapters import gnn

    features, hidden, classes = 64, 128, 4

    def build() -> nn.Module:
        torch.manual_seed(0)
        model = GCN(features, hidden, num_layers=6, out_channels=classes, norm="batch_norm", dropout=0.1)
        return gnn.to_steps_(model)  # layers as modules, outputs bit-identical (see theseus_adapters.gnn)

    def inputs(size: int) -> tuple[tuple, dict]:
        generator = torch.Generator().manual_seed(size)
        edges = torch.randint(0, size, (2, 10 * size), generator=generator)  # average degree 10
        return (torch.randn(size, features, generator=generator), edges), {}

    return Case(
        name="GCN 6→2 layers",
        build=build,
        plan=lambda model: gnn.plan(model, num_layers=2),
        inputs=inputs,
        labels=lambda size: torch.arange(size) % classes,
        sizes=[1_000, 4_000, 16_000] if not full else [10_000, 100_000, 1_000_000],
        train_size=4_000 if not full else 100_000,
        ideal_speedup=3.0,  # the layer ratio; the successor keeps the cheap first and last layers, so FLOPs drop more
        size_label="nodes",
        note="PyG GCN, hidden 128, batch norm, random graphs of average degree 10, full-batch",
    )


CASES: dict[str, Callable[[bool], Case]] = {"bert-base": bert_base, "minilm": minilm, "resnet": resnet34, "gnn": gcn}
