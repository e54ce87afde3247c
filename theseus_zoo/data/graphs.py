"""Graph datasets for the GNN family: graph-tool's binary ``gt`` files (`read_gt`), PolBlogs, the larva's mushroom
body connectome and the karate club as `RawGraph`; node features from the graph alone, and stratified node splits.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .assets import asset_path

# --------------------------------------------------------------------------------------------- gt format
GT_MAGIC = b"\xe2\x9b\xbe gt"
"""The first 6 bytes of a ``gt`` file: "⛾ gt" in UTF-8."""

_GT_SCALARS = {0: "u1", 1: "i2", 2: "i4", 3: "i8", 4: "f8", 5: "f16"}  # bool, int16/32/64, double, long double
_GT_STRING, _GT_VECTOR_STRING, _GT_OBJECT = 6, 13, 14  # vector<scalar type t> is t + 7


@dataclass(frozen=True)
class GTGraph:
    """A graph read from a ``gt`` file.

    Attributes:
        directed: Whether the file says the graph is directed.
        num_nodes: Number of vertices.
        edge_index: ``[2, num_edges]`` int64 array of (source, target), in the file's edge order (each vertex's
            out-neighbours in vertex order; an undirected edge appears once).
        graph_properties, vertex_properties, edge_properties: Property maps by name. Scalar maps are arrays of
            ``num_nodes`` (``num_edges``) values (bool as uint8, long double as float64), strings are ``str``,
            vectors are lists of arrays (of ``str`` for ``vector<string>``), graph properties are single values.
            ``python::object`` values are their pickled bytes, never unpickled.
        comment: The file's comment (graph-tool writes a summary there).
    """

    directed: bool
    num_nodes: int
    edge_index: np.ndarray
    graph_properties: dict[str, Any]
    vertex_properties: dict[str, Any]
    edge_properties: dict[str, Any]
    comment: str = ""


class _Cursor:
    """Reads the values of a ``gt`` file in order, in the file's byte order."""

    def __init__(self, data: bytes, byte_order: str) -> None:
        self.data, self.order, self.offset = data, byte_order, 0

    def take(self, size: int) -> bytes:
        if self.offset + size > len(self.data):
            raise ValueError(f"gt file truncated: wanted {size} bytes at offset {self.offset} of {len(self.data)}")
        chunk = self.data[self.offset : self.offset + size]
        self.offset += size
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def uint64(self) -> int:
        return struct.unpack(self.order + "Q", self.take(8))[0]

    def string(self) -> bytes:
        return self.take(self.uint64())

    def array(self, code: str, count: int) -> np.ndarray:
        if code == "f16":  # long double: x86's 80-bit extended, padded to 16 bytes (as NumPy's longdouble here)
            if np.dtype(np.longdouble).itemsize != 16 or self.order != "<":
                raise ValueError("this gt file holds long double values, which this platform cannot decode")
            return np.frombuffer(self.take(16 * count), dtype=np.longdouble).astype(np.float64)
        dtype = np.dtype(self.order + code)
        return np.frombuffer(self.take(dtype.itemsize * count), dtype=dtype).astype(dtype.newbyteorder("="))

    def value(self, kind: int) -> Any:
        """One value of the gt value type ``kind``."""
        if kind in _GT_SCALARS:
            return self.array(_GT_SCALARS[kind], 1)[0]
        if kind == _GT_STRING:
            return self.string().decode("utf-8")
        if kind - 7 in _GT_SCALARS:
            return self.array(_GT_SCALARS[kind - 7], self.uint64())
        if kind == _GT_VECTOR_STRING:
            return [self.string().decode("utf-8") for _ in range(self.uint64())]
        if kind == _GT_OBJECT:
            return self.string()
        raise ValueError(f"unknown gt value type {kind} at offset {self.offset - 1}")

    def values(self, kind: int, count: int) -> Any:
        if kind in _GT_SCALARS:
            return self.array(_GT_SCALARS[kind], count)
        return [self.value(kind) for _ in range(count)]


def read_gt(path: str | Path) -> GTGraph:
    """Reads a graph in graph-tool's binary ``gt`` format (plain, or compressed with gzip, bzip2 or xz).

    The layout (graph-tool's documentation, "The gt file format"): the magic "⛾ gt", a version byte (1) and an
    endianness byte (0 little, 1 big); a comment string (strings are a uint64 length and that many bytes);
    a directedness byte; the number of vertices N (uint64); for each vertex, its number of out-neighbours
    (uint64) and their indices, each of 1, 2, 4 or 8 bytes as N fits in 8, 16, 32 or 64 bits; then a uint64
    number of property maps, each a key type byte (0 graph, 1 vertex, 2 edge), a name, a value type byte (0 bool,
    1 int16, 2 int32, 3 int64, 4 double, 5 long double, 6 string, 7-13 vectors of those, 14 python object) and
    its values (one per graph, vertex or edge, in order; a vector is a uint64 length and its elements).

    Raises:
        ValueError: not a gt file, an unknown version or value type, or a truncated file.
    """
    data = Path(path).read_bytes()
    for magic, decompress in ((b"\x1f\x8b", gzip.decompress), (b"BZh", bz2.decompress), (b"\xfd7zXZ", lzma.decompress)):
        if data.startswith(magic):
            data = decompress(data)
    if not data.startswith(GT_MAGIC):
        raise ValueError(f"{path} is not a graph-tool gt file (no '⛾ gt' magic)")
    version, big_endian = data[6], data[7]
    if version != 1 or big_endian not in (0, 1):
        raise ValueError(f"{path}: gt version {version}, endianness byte {big_endian}; this reader knows version 1")
    cursor = _Cursor(data, ">" if big_endian else "<")
    cursor.take(8)
    comment = cursor.string().decode("utf-8", errors="replace")
    directed = bool(cursor.byte())
    num_nodes = cursor.uint64()
    width = next(code for code, bits in (("u1", 8), ("u2", 16), ("u4", 32), ("u8", 64)) if num_nodes < 2**bits)
    counts, neighbours = [], []
    for _ in range(num_nodes):
        neighbours.append(cursor.array(width, cursor.uint64()))
        counts.append(len(neighbours[-1]))
    sources = np.repeat(np.arange(num_nodes, dtype=np.int64), counts)
    targets = np.concatenate(neighbours).astype(np.int64) if neighbours else np.empty(0, np.int64)
    edge_index = np.stack([sources, targets])
    properties: tuple[dict[str, Any], dict[str, Any], dict[str, Any]] = ({}, {}, {})
    for _ in range(cursor.uint64()):
        key = cursor.byte()
        if key not in (0, 1, 2):
            raise ValueError(f"{path}: unknown property key type {key} at offset {cursor.offset - 1}")
        name = cursor.string().decode("utf-8")
        kind = cursor.byte()
        if key == 0:
            properties[0][name] = cursor.value(kind)
        else:
            properties[key][name] = cursor.values(kind, num_nodes if key == 1 else edge_index.shape[1])
    return GTGraph(directed, num_nodes, edge_index, *properties, comment=comment)


# ----------------------------------------------------------------------------------------------- datasets
@dataclass(frozen=True)
class RawGraph:
    """A dataset as stored: directed edges (``[2, E]``, duplicates and self-loops possible), a class id per node
    and the class names."""

    edge_index: torch.Tensor
    labels: torch.Tensor
    classes: tuple[str, ...]

    @property
    def num_nodes(self) -> int:
        return len(self.labels)


def load_polblogs(path: str | Path | None = None) -> RawGraph:
    """PolBlogs from its gt file (default: the cached asset); classes 0 liberal, 1 conservative (vertex
    property ``value``). Raises `MissingAssetError` when ``path`` is None and the asset was not fetched."""
    graph = read_gt(path if path is not None else asset_path("polblogs") / "polblogs.gt.gz")
    if "value" not in graph.vertex_properties:
        raise ValueError(f"this gt file has no vertex property 'value'; it has {sorted(graph.vertex_properties)}")
    labels = torch.as_tensor(np.asarray(graph.vertex_properties["value"]), dtype=torch.long)
    return RawGraph(torch.from_numpy(graph.edge_index), labels, ("liberal", "conservative"))


def load_drosophila(path: str | Path | None = None) -> RawGraph:
    """Both hemispheres of the larva's mushroom body connectome as one graph: an edge per nonzero entry of
    ``{left,right}_adjacency.csv`` (synapse counts, row to column), the right hemisphere's nodes after the left's;
    classes are the cell types of ``{left,right}_cell_labels.csv`` in sorted order."""
    root = Path(path) if path is not None else asset_path("drosophila")
    edges, names = [], []
    for side in ("left", "right"):
        adjacency = np.loadtxt(root / f"{side}_adjacency.csv", ndmin=2)
        cells = (root / f"{side}_cell_labels.csv").read_text().split()
        if adjacency.shape != (len(cells), len(cells)):
            raise ValueError(f"{side}: a {adjacency.shape} adjacency matrix for {len(cells)} cell labels")
        edges.append(torch.from_numpy(np.stack(np.nonzero(adjacency)) + len(names)))
        names += cells
    classes = tuple(sorted(set(names)))
    labels = torch.tensor([classes.index(name) for name in names])
    return RawGraph(torch.cat(edges, dim=1).long(), labels, classes)


def load_karate() -> RawGraph:
    """Zachary's karate club as PyG ships it (4 communities found by modularity)."""
    from torch_geometric.datasets import KarateClub

    data = KarateClub()[0]
    return RawGraph(data.edge_index, data.y, ("0", "1", "2", "3"))


def largest_component(raw: RawGraph) -> RawGraph:
    """The subgraph of the largest (weakly) connected component, nodes renumbered in their order."""
    import networkx as nx  # a dependency of torch; PyG's LargestConnectedComponents needs scipy
    from torch_geometric.utils import subgraph

    graph = nx.Graph()
    graph.add_nodes_from(range(raw.num_nodes))
    graph.add_edges_from(raw.edge_index.t().tolist())
    nodes = torch.tensor(sorted(max(nx.connected_components(graph), key=len)))
    edge_index, _ = subgraph(nodes, raw.edge_index, relabel_nodes=True, num_nodes=raw.num_nodes)
    return RawGraph(edge_index, raw.labels[nodes], raw.classes)


def load_polblogs_component() -> RawGraph:
    """The largest connected component of PolBlogs (1,222 blogs, 16,714 undirected links), as Nettack and Pro-GNN
    (Jin et al. 2020) use it: 266 blogs have no link at all, and no GNN can place them."""
    return largest_component(load_polblogs())


@dataclass(frozen=True)
class GraphDataset:
    """How the task gets a dataset: its loader and its default ``[train, dev]`` fractions per class."""

    load: Callable[[], RawGraph]
    split: tuple[float, float]


DATASETS = {
    "polblogs": GraphDataset(load_polblogs_component, (0.1, 0.1)),  # the 10/10/80 % split of Nettack and Pro-GNN
    "drosophila": GraphDataset(load_drosophila, (0.2, 0.2)),
    "karate": GraphDataset(load_karate, (0.5, 0.25)),  # 34 nodes: a quarter each for dev and test
}
"""Dataset name -> `GraphDataset`."""

FEATURES = ("identity", "degree", "random_walk")
"""Node features `node_features` builds: ``identity`` (a one-hot id per node, as usual for PolBlogs in the
graph-attack literature), ``degree`` (PyG's ``LocalDegreeProfile`` of out-edges, and of in-edges for a
directed graph, log1p-scaled), ``random_walk`` (PyG's ``AddRandomWalkPE``: return probabilities of 1 to
``walk_length`` random-walk steps on the undirected graph)."""

DATA_SEED = 0
"""Seeds every split: fixed, so that the run's seed varies training only."""


def node_features(
    edge_index: torch.Tensor, num_nodes: int, names: Sequence[str], walk_length: int = 16
) -> torch.Tensor:
    """``[num_nodes, channels]`` features from the graph alone, the `FEATURES` ``names`` concatenated in order.

    ``degree`` and ``random_walk`` columns are standardised (zero mean, unit variance over the nodes); the
    one-hot ``identity`` is left as it is.
    """
    import torch_geometric.transforms as T
    from torch_geometric.data import Data
    from torch_geometric.utils import is_undirected, to_undirected

    parts = []
    for name in names:
        if name == "identity":
            parts.append(torch.eye(num_nodes))
            continue
        if name == "degree":
            directions = (
                [edge_index] if is_undirected(edge_index, num_nodes=num_nodes) else [edge_index, edge_index.flip(0)]
            )
            columns = torch.cat(
                [T.LocalDegreeProfile()(Data(edge_index=e, num_nodes=num_nodes)).x for e in directions], dim=1
            ).log1p()
        elif name == "random_walk":
            graph = Data(edge_index=to_undirected(edge_index, num_nodes=num_nodes), num_nodes=num_nodes)
            columns = T.AddRandomWalkPE(walk_length, attr_name=None)(graph).x
        else:
            raise ValueError(f"unknown feature {name!r}; known: {', '.join(FEATURES)}")
        parts.append((columns - columns.mean(0)) / columns.std(0).clamp_min(1e-6))
    return torch.cat(parts, dim=1)


def stratified_split(
    labels: torch.Tensor, fractions: Sequence[float], seed: int = DATA_SEED
) -> dict[str, torch.Tensor]:
    """Node ids of ``train``, ``dev`` and ``test`` (sorted): per class, ``round(fraction · size)`` random nodes
    (at least 1) for train and dev each, the rest for test. Raises `ValueError` when a class cannot give every
    split a node."""
    generator = torch.Generator().manual_seed(seed)
    splits: dict[str, list[torch.Tensor]] = {"train": [], "dev": [], "test": []}
    for label in labels.unique().tolist():
        nodes = (labels == label).nonzero().view(-1)
        nodes = nodes[torch.randperm(len(nodes), generator=generator)]
        train, dev = (max(1, round(fraction * len(nodes))) for fraction in fractions)
        if train + dev >= len(nodes):
            raise ValueError(
                f"class {label} has {len(nodes)} nodes: too few for {train} train, {dev} dev and any test node; "
                f"give smaller split fractions"
            )
        for name, chunk in zip(splits, (nodes[:train], nodes[train : train + dev], nodes[train + dev :]), strict=True):
            splits[name].append(chunk)
    return {name: torch.cat(chunks).sort().values for name, chunks in splits.items()}


@dataclass(frozen=True)
class NodeGraph:
    """What the task trains on: features ``x`` ``[N, F]``, the undirected message-passing ``edge_index``
    ``[2, E]``, labels ``y`` ``[N]``, and the node ids of each split."""

    x: torch.Tensor
    edge_index: torch.Tensor
    y: torch.Tensor
    splits: dict[str, torch.Tensor]
    classes: tuple[str, ...]


def build_graph(
    raw: RawGraph, features: Sequence[str], walk_length: int, fractions: Sequence[float], split_seed: int = DATA_SEED
) -> NodeGraph:
    """Features, the undirected graph without self-loops or duplicate edges, and the stratified split drawn with
    ``split_seed``."""
    from torch_geometric.utils import remove_self_loops, to_undirected

    edge_index, _ = remove_self_loops(raw.edge_index)
    x = node_features(edge_index, raw.num_nodes, features, walk_length)
    undirected = to_undirected(edge_index, num_nodes=raw.num_nodes)
    return NodeGraph(x, undirected, raw.labels, stratified_split(raw.labels, fractions, split_seed), raw.classes)
