"""The GNN family: node classification on one whole graph with PyTorch Geometric's ``BasicGNN`` models.

Family ``"gnn"``. The predecessor, a deep GCN or GraphSAGE (6 layers), is fine-tuned on the graph, then
`theseus_adapters.gnn` compresses it to a few layers (2), each successor layer starting as a copy of its group's
first layer (the group that ends the model copies the last layer, which maps to the classes). The exported
model is an ordinary ``torch_geometric.nn`` model (a budget search that chose layers of another kind lists them in
the config, and `load_exported` rebuilds it)::

    theseus fetch polblogs
    theseus compress --recipe gcn-polblogs --out runs/gcn-polblogs

Datasets (none has node features of its own: `node_features` builds them with PyG transforms):

- ``"polblogs"``: political blogs and their hyperlinks, leaning liberal or conservative (Adamic and Glance
  2005), read from graph-tool's binary ``gt`` file by `read_gt` (1,490 blogs, 19,090 links); the task takes
  the largest connected component (1,222 blogs), as Nettack and Pro-GNN do. Asset ``polblogs``.
- ``"drosophila"``: the mushroom body connectome of the Drosophila larva (Eichler et al. 2017), both
  hemispheres as one graph of two components (209 + 213 neurons; an edge per connected pair), cell types
  I, K, O, P (input, Kenyon, output and projection neurons). Asset ``drosophila``.
- ``"karate"``: Zachary's karate club as ``torch_geometric.datasets.KarateClub`` ships it (34 members,
  4 communities); built in.

Learning is transductive and full-graph: the examples of a split are its node ids, a batch is the whole graph
plus the ids whose cross-entropy counts, and evaluation runs the graph once and scores the split's nodes.
Message passing uses the undirected graph without self-loops; features may use the edges' direction. Splits are
stratified by class and drawn from a fixed seed (`DATA_SEED`), not the run's: every seed of a recipe sees the
same split, so seeds vary training only; with ``split_per_seed`` each seed draws its own split (repeated random
splits: the seeds then vary the split as well, and a dev split of a hundred nodes is averaged over several).

Options (``dataset`` is required):

- ``dataset``: one of `DATASETS`.
- ``model``: ``"gcn"``, ``"sage"``, ``"gin"`` or ``"gat"`` (`MODELS`: PyG's GCN, GraphSAGE, GIN, GAT).
  (default: ``"gcn"``)
- ``predecessor_layers``: layers of the predecessor. (default: ``6``)
- ``num_layers``: layers of the compressed model, ``1 <= num_layers < predecessor_layers``. (default: ``2``)
- ``group_sizes``: predecessor layers per successor layer, e.g. ``[4, 2]``. (default: as even as possible)
- ``hidden``, ``dropout``, ``norm``, ``jk``: the model's ``hidden_channels``, ``dropout``, ``norm`` and ``jk``
  (``None``, ``"last"`` or ``"max"``: the adapter cannot shrink ``"cat"`` or ``"lstm"``).
  (default: ``64``, ``0.5``, ``"batch_norm"``, ``None``)
- ``features``: names from `FEATURES`, concatenated. (default: ``["degree", "random_walk"]``)
- ``walk_length``: steps of the ``random_walk`` feature. (default: ``16``)
- ``split``: ``[train, dev]`` fractions of each class; the rest is test. (default: the dataset's)
- ``split_per_seed``: draw the split from the run's seed instead of `DATA_SEED`. (default: ``False``)
- ``distill_on``: the nodes whose logits distillation matches (the ``kd`` baseline, ``kd_weight``): ``"labelled"``
  (the training nodes, as the task loss) or ``"all"`` (every node of the graph: the teacher's soft labels reach
  the unlabelled nodes too). (default: ``"labelled"``)
- ``predecessor_eval``: keep the frozen predecessor groups in eval mode while replacing (no dropout in them,
  `theseus_core.replace_`'s ``predecessor_eval``). (default: ``False``)
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

import theseus_core as th

from .. import metrics
from ..data.assets import MissingAssetError
from ..data.graphs import DATA_SEED, DATASETS, FEATURES, NodeGraph, build_graph
from .exported import hold_export
from .options import parse_options

MODELS = {"gcn": "GCN", "sage": "GraphSAGE", "gin": "GIN", "gat": "GAT"}
"""``model`` option -> class in ``torch_geometric.nn``."""

GraphBatch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""``(x, edge_index, nodes, labels)``: the whole graph and the nodes whose loss counts, with their labels."""


def load_exported(directory: str | Path, model: str = "gcn") -> nn.Module:
    """The model `GraphTask.export` wrote in ``directory`` for the ``model`` option (`MODELS`), loaded with
    ``strict=True``, in eval mode: ``torch_geometric.nn.GCN(**config)`` (``GraphSAGE`` for ``"sage"``, ...), with the
    layers a budget search put in place of convs when the config lists them (``"theseus_layers"``:
    `theseus_adapters.gnn.build_from_config`)."""
    import torch_geometric.nn

    from theseus_adapters import gnn

    directory = Path(directory)
    config = json.loads((directory / "config.json").read_text())
    weights = torch.load(directory / "model.pt", weights_only=True)
    return gnn.build_from_config(getattr(torch_geometric.nn, MODELS[model]), config, weights).eval()


@dataclass(frozen=True)
class GraphOptions:
    """The gnn family's options (the module docstring says what each means)."""

    dataset: str | None = None
    model: Literal["gcn", "sage", "gin", "gat"] = "gcn"
    predecessor_layers: int = field(default=6, metadata={"min": 2})
    num_layers: int = field(default=2, metadata={"min": 1})
    group_sizes: tuple[int, ...] | None = None
    hidden: int = field(default=64, metadata={"min": 1})
    dropout: float = field(default=0.5, metadata={"min": 0, "max": 1})
    norm: str | None = "batch_norm"
    jk: str | None = None
    features: tuple[str, ...] = ("degree", "random_walk")
    walk_length: int = field(default=16, metadata={"min": 1})
    split: tuple[float, float] | None = None
    split_per_seed: bool = False
    distill_on: Literal["labelled", "all"] = "labelled"
    predecessor_eval: bool = False


class GraphTask:
    """`Task` for node classification with a PyG ``BasicGNN``; options in `GraphOptions` and the module doc."""

    metric = "accuracy"
    compression_options = ("num_layers", "group_sizes", "distill_on", "predecessor_eval")
    """Options that shape only the compression (`CompressionOptions`): ``--predecessor-from`` takes a run's
    predecessor whatever they are, so the cells of one graph, split and predecessor share it."""

    def __init__(self, options: dict[str, Any], seed: int) -> None:
        parsed = parse_options(GraphOptions, options, "gnn")
        self.dataset_name, self.model_name = parsed.dataset, parsed.model
        self.predecessor_layers, self.num_layers, self.group_sizes = (
            parsed.predecessor_layers,
            parsed.num_layers,
            parsed.group_sizes,
        )
        self.hidden, self.dropout, self.norm, self.jk = parsed.hidden, parsed.dropout, parsed.norm, parsed.jk
        self.features, self.walk_length, self.split = parsed.features, parsed.walk_length, parsed.split
        self.split_seed = seed if parsed.split_per_seed else DATA_SEED
        self.distill_on, self.predecessor_eval = parsed.distill_on, parsed.predecessor_eval
        self._graph: NodeGraph | None = None

    @property
    def replace_options(self) -> dict[str, Any]:
        """Options of `theseus_core.replace_` for the replacing phase."""
        return {"predecessor_eval": self.predecessor_eval}

    # --------------------------------------------------------------- checks, model and data
    def check(self) -> None:
        if not isinstance(self.dataset_name, str) or self.dataset_name not in DATASETS:
            given = "no dataset" if self.dataset_name is None else f"unknown dataset {self.dataset_name!r}"
            raise ValueError(f"{given}: set the gnn option dataset to one of {', '.join(DATASETS)}")
        if not self.num_layers < self.predecessor_layers:
            raise ValueError(
                f"num_layers must be an integer in [1, predecessor_layers={self.predecessor_layers}), got "
                f"{self.num_layers!r}: the compressed model needs fewer layers than the predecessor"
            )
        if self.jk not in (None, "last", "max"):
            raise ValueError(
                f"jk must be None, 'last' or 'max' (Theseus cannot shrink 'cat' or 'lstm'), got {self.jk!r}"
            )
        if not self.features or any(f not in FEATURES for f in self.features):
            raise ValueError(f"features must be a non-empty list of {', '.join(FEATURES)}; got {self.features!r}")
        split = self.split if self.split is not None else DATASETS[self.dataset_name].split
        if not all(f > 0 for f in split) or sum(split) >= 1:
            raise ValueError(f"split must be [train, dev] fractions > 0 summing to less than 1, got {split!r}")
        try:
            self.graph()
        except MissingAssetError as error:
            raise ValueError(str(error)) from None
        try:
            predecessor = self.build(self.predecessor_layers)
        except (ValueError, KeyError, TypeError, AssertionError) as error:
            message = " ".join(str(error).split()) or type(error).__name__
            raise ValueError(f"cannot build the {MODELS[self.model_name]} from the options: {message}") from None
        self.plan(predecessor)  # the adapter checks group_sizes and what it can copy, before any training

    @property
    def assets(self) -> tuple[str, ...]:
        """The dataset where it is an asset (`ReadsAssets`; the karate club comes with PyG)."""
        from ..data.assets import ASSETS

        return (self.dataset_name,) if self.dataset_name in ASSETS else ()

    def graph(self) -> NodeGraph:
        """The dataset with its features and split, built once (raises `MissingAssetError` for a missing asset)."""
        if self._graph is None:
            dataset = DATASETS[self.dataset_name]
            split = self.split if self.split is not None else dataset.split
            self._graph = build_graph(dataset.load(), self.features, self.walk_length, split, self.split_seed)
        return self._graph

    def config(self, num_layers: int) -> dict[str, Any]:
        """Constructor arguments of the model class (``torch_geometric.nn.<MODELS[model]>``)."""
        graph = self.graph()
        return {
            "in_channels": graph.x.size(1),
            "hidden_channels": self.hidden,
            "num_layers": num_layers,
            "out_channels": len(graph.classes),
            "dropout": self.dropout,
            "norm": self.norm,
            "jk": self.jk,
        }

    def build(self, num_layers: int) -> nn.Module:
        import torch_geometric.nn

        return getattr(torch_geometric.nn, MODELS[self.model_name])(**self.config(num_layers))

    def build_predecessor(self) -> nn.Module:
        return self.build(self.predecessor_layers)

    def dataset(self, split: str) -> list[int]:
        return self.graph().splits[split].tolist()

    def collate(self, examples: list[int]) -> GraphBatch:
        graph = self.graph()
        nodes = torch.tensor(examples, dtype=torch.long)
        return graph.x, graph.edge_index, nodes, graph.y[nodes]

    # -------------------------------------------------------------------------------- training
    def logits(self, model: nn.Module, batch: GraphBatch) -> torch.Tensor:
        """The batch's nodes' logits, or every node's with ``distill_on="all"`` (the criterion picks the batch's)."""
        x, edge_index, nodes, _ = batch
        logits = model(x, edge_index)
        return logits if self.distill_on == "all" else logits[nodes]

    def criterion(self, logits: torch.Tensor, batch: GraphBatch) -> torch.Tensor:
        if self.distill_on == "all":
            logits = logits[batch[2]]
        return F.cross_entropy(logits, batch[3])

    scores_examples = True  # per-node predictions: bootstrap errors and paired comparisons in the report

    @torch.no_grad()
    def predictions(self, model: nn.Module, split: str) -> torch.Tensor:
        """The predicted class of each of the split's nodes, in the split's order (the whole graph in one forward)."""
        model.eval()
        graph = self.graph()
        device = next(model.parameters()).device
        logits = model(graph.x.to(device), graph.edge_index.to(device))
        return logits[graph.splits[split].to(device)].argmax(dim=1).cpu()

    def labels(self, split: str) -> torch.Tensor:
        graph = self.graph()
        return graph.y[graph.splits[split]].float()

    def score(self, predictions: torch.Tensor, split: str, chosen: torch.Tensor | None = None) -> dict[str, float]:
        """Accuracy and Matthews correlation of ``predictions`` (of the nodes ``chosen``, repeats allowed)."""
        labels = self.graph().y[self.graph().splits[split]]
        predictions = predictions.long()
        if chosen is not None:
            predictions, labels = predictions[chosen], labels[chosen]
        return {
            "accuracy": metrics.accuracy(predictions, labels),
            "mcc": metrics.matthews_correlation(predictions, labels),
        }

    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        """Accuracy and Matthews correlation (the classes can be unbalanced) on the split's nodes."""
        return self.score(self.predictions(model, split), split)

    def plan(self, model: nn.Module) -> th.Plan:
        """Converts ``model`` to the adapter's stepped form (in place) and plans ``num_layers`` groups."""
        from theseus_adapters import gnn

        gnn.to_steps_(model)
        return gnn.plan(model, num_layers=self.num_layers, group_sizes=self.group_sizes)

    def candidates(self, model: nn.Module) -> tuple[dict[str, list[th.ModuleSpec]], Any]:
        """`OffersCandidates`: per group of the plan, ``keep``, ``skip`` (where the width allows), ``one`` (the
        plan's copied layer), ``linear`` (no message passing) and ``mean`` (an unnormalised mean over the
        neighbours); converts ``model`` to the stepped form in place, as `plan` does
        (`theseus_adapters.gnn.candidates`)."""
        from theseus_adapters import gnn

        gnn.to_steps_(model)
        return gnn.candidates(model, self.num_layers, self.group_sizes)

    def truncated(self, predecessor: nn.Module) -> nn.Module:
        """The successors as `plan` initialises them, finalized at once: a model of ``num_layers`` layers holding
        copies of the first layer of each group (of the last layer, for the group that ends the model)."""
        model = copy.deepcopy(predecessor)
        return th.replace_(model, self.plan(model)).finalize()

    def scratch(self) -> nn.Module:
        return self.build(self.num_layers)

    def latency_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        graph = self.graph()
        return graph.x, graph.edge_index

    def forward(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return model(batch[0], batch[1])

    def example_inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """What `replace_` runs the model on to verify the surgery: ``model(*args, **kwargs)``."""
        return tuple(self.latency_batch()), {}

    def export_onnx(self, model_dir: Path, out: Path) -> list[Any]:
        """`ExportsOnnx`: ``model.onnx``, inputs ``x`` ``[nodes, features]`` and ``edge_index`` ``[2, edges]``, output
        ``logits`` per node."""
        from ..export.onnx import NodeModel, export_onnx, random_graph

        model = load_exported(model_dir, self.model_name)
        features = json.loads((model_dir / "config.json").read_text())["in_channels"]
        axes = {"x": {0: "nodes"}, "edge_index": {1: "edges"}}
        others = [random_graph(7, features, 12, seed=1), random_graph(50, features, 300, seed=2)]
        graph = random_graph(20, features, 60)
        return [export_onnx(NodeModel(model), graph, out / "model.onnx", dynamic_axes=axes, check_inputs=others)]

    def export(self, model: nn.Module, directory: Path) -> list[Path]:
        """``model.pt`` (a state_dict) and ``config.json``: ``torch_geometric.nn.<MODELS[model]>(**config)`` loads it
        with ``strict=True`` (``GCN`` for ``"gcn"``, ``GraphSAGE`` for ``"sage"``, ...); when a budget search put
        layers of another kind in place of convs, the config lists them (``"theseus_layers"``,
        `theseus_adapters.gnn.export_config`) and `load_exported` rebuilds it. The reloaded model computes what
        ``model`` does, or the export refuses (`theseus_zoo.tasks.exported.hold_export`)."""
        import torch_geometric.nn

        from theseus_adapters import gnn

        expected = getattr(torch_geometric.nn, MODELS[self.model_name])
        if type(model) is not expected:
            raise ValueError(f"the compressed model is a {type(model).__name__}, not a {expected.__name__}")
        described = gnn.export_config(model, self.config(model.num_layers))
        directory.mkdir(parents=True, exist_ok=True)
        weights, config = directory / "model.pt", directory / "config.json"
        torch.save(model.state_dict(), weights)
        config.write_text(json.dumps(described, indent=2) + "\n")
        reload = lambda: load_exported(directory, self.model_name)  # noqa: E731 - strict
        return hold_export([weights, config], model, reload, self.forward, self.latency_batch())
