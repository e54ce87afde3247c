"""theseus_adapters.gnn.candidates and .layers: what the layers a budget search may choose compute, their parameters
next to ``one``'s, and that any choice finalizes into a model whose exported config rebuilds it."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch_geometric.nn import GAT, GCN, GCNConv, GraphSAGE, SAGEConv

import theseus_core as th
from tests.theseus_adapters.test_gnn import GRAPH, HIDDEN, IN, KINDS, OUT, inputs_of
from theseus_adapters import gnn
from theseus_core.search import CandidateLibrary

MODELS = {"gcn": GCN, "sage": GraphSAGE, "gat": GAT}
NO_EDGES = torch.empty(2, 0, dtype=torch.long)


def seeded(seed: int, make):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make()


def started(kind: str, conv: nn.Module) -> nn.Module:
    """The ``kind`` layer the candidates start from a group of the one step holding ``conv``."""
    return gnn.layer_successor(kind)([gnn.GNNStep(conv)]).conv


widths = st.integers(1, 12)


@given(seed=st.integers(0, 1000), in_channels=widths, out_channels=widths, improved=st.booleans())
def test_linear_started_from_a_gcn_layer_is_that_layer_on_a_graph_without_edges(
    seed: int, in_channels: int, out_channels: int, improved: bool
) -> None:
    """GCNConv adds a self-loop to every node (weight 1, or 2 when ``improved``) and normalises by the degree: with
    no edges, every node's only message is its own, of norm 1. The ``linear`` layer ignores the graph it is given."""
    conv = seeded(seed, lambda: GCNConv(in_channels, out_channels, improved=improved))
    with torch.no_grad():
        conv.bias.normal_()  # PyG starts it at 0: a dropped bias would go unseen
    x = seeded(seed + 1, lambda: torch.randn(9, in_channels))
    edges = seeded(seed + 2, lambda: torch.randint(0, 9, (2, 20)))
    torch.testing.assert_close(started("linear", conv)(x, edges), conv(x, NO_EDGES))


@given(seed=st.integers(0, 1000), in_channels=widths, out_channels=widths)
def test_linear_started_from_a_sage_layer_is_that_layer_on_a_graph_without_edges(
    seed: int, in_channels: int, out_channels: int
) -> None:
    """SAGEConv's mean over no neighbours is 0: what is left is its root weight and its bias."""
    conv = seeded(seed, lambda: SAGEConv(in_channels, out_channels))
    x = seeded(seed + 1, lambda: torch.randn(9, in_channels))
    torch.testing.assert_close(started("linear", conv)(x, GRAPH["edge_index"][:, :9] % 9), conv(x, NO_EDGES))


def circulant(num_nodes: int, offsets: set[int]) -> torch.Tensor:
    """Node ``i`` linked both ways to ``i + k`` (mod ``num_nodes``) for each offset: every node of degree
    ``2 * len(offsets)``, with offsets below ``num_nodes / 2`` (no edge twice)."""
    nodes = torch.arange(num_nodes)
    pairs = [torch.stack([nodes, (nodes + k) % num_nodes]) for k in sorted(offsets)]
    edges = torch.cat(pairs, dim=1)
    return torch.cat([edges, edges.flip(0)], dim=1)


@given(
    seed=st.integers(0, 1000),
    in_channels=widths,
    out_channels=widths,
    graph=st.integers(3, 14).flatmap(
        lambda n: st.tuples(st.just(n), st.sets(st.integers(1, (n - 1) // 2), min_size=1))
    ),
)
def test_mean_started_from_a_gcn_layer_is_that_layer_on_a_regular_graph(
    seed: int, in_channels: int, out_channels: int, graph: tuple[int, set[int]]
) -> None:
    """With every degree ``d``, GCN's symmetric normalisation weighs each of a node's ``d + 1`` messages (its
    neighbours' and its own) ``1 / (d + 1)``: the mean. Both orders (averaging before or after the linear map, by
    the narrower width) are drawn."""
    num_nodes, offsets = graph
    conv = seeded(seed, lambda: GCNConv(in_channels, out_channels))
    with torch.no_grad():
        conv.bias.normal_()
    x = seeded(seed + 1, lambda: torch.randn(num_nodes, in_channels))
    edges = circulant(num_nodes, offsets)
    torch.testing.assert_close(started("mean", conv)(x, edges), conv(x, edges))


def test_mean_differs_from_gcn_where_degrees_differ() -> None:
    """A star: the centre's mean weighs every message alike, GCN weighs the leaves' by their small degree."""
    conv = seeded(0, lambda: GCNConv(3, 3))
    leaves = torch.arange(1, 5)
    edges = torch.cat([torch.stack([leaves, torch.zeros(4, dtype=torch.long)])] * 2, dim=1)
    edges[:, 4:] = edges[:, 4:].flip(0)
    x = seeded(1, lambda: torch.randn(5, 3))
    assert not torch.allclose(started("mean", conv)(x, edges), conv(x, edges))


@functools.cache
def library(kind: str) -> tuple[nn.Module, CandidateLibrary]:
    """A stepped ``kind`` GNN of 4 layers and every candidate for its 2 groups (built once per kind)."""
    cls, kwargs, _ = KINDS[kind]
    model = seeded(0, lambda: gnn.to_steps_(cls(IN, HIDDEN, 4, **kwargs)))
    candidates, finalize = gnn.candidates(model, 2)
    args, inputs = inputs_of(kind)
    return model, CandidateLibrary(model, candidates, example_inputs=args, example_kwargs=inputs, on_finalize=finalize)


def parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("kind", ["gcn", "sage", "gat"])
def test_every_group_offers_the_layers_and_they_weigh_no_more_than_one(kind: str) -> None:
    """``linear`` and ``mean`` hold one weight and bias per layer (and the norm): as many parameters as ``one``
    where it is a GCN layer (one weight and bias too: the saving is propagation), fewer where ``one`` has more
    (SAGE's second weight, GAT's attention)."""
    _, found = library(kind)
    for path in found.paths:
        assert {"keep", "one", *gnn.LAYERS} <= set(found.names(path))
        one = parameters(found.successors[(path, "one")])
        for name in gnn.LAYERS:
            weighs = parameters(found.successors[(path, name)])
            assert weighs == one if kind == "gcn" else weighs < one


@given(kind=st.sampled_from(["gcn", "sage", "gat"]), data=st.data())
def test_any_choice_finalizes_into_a_model_its_exported_config_rebuilds(kind: str, data: st.DataObject) -> None:
    """finalize -> `export_config` -> `build_from_config` -> strict load -> equal outputs; a choice of the class's
    own layers (``keep``, ``one``, ``skip``) exports the plain constructor's arguments, which the class itself
    loads."""
    stepped, found = library(kind)
    choice = {path: data.draw(st.sampled_from(found.names(path)), label=path) for path in found.paths}
    model = copy.deepcopy(stepped)
    args, inputs = inputs_of(kind)
    finalized = th.replace_(model, found.plan(choice), example_inputs=args, example_kwargs=inputs).finalize()
    cls, kwargs, _ = KINDS[kind]
    assert type(finalized) is cls
    arguments = {"in_channels": IN, "hidden_channels": HIDDEN, "num_layers": finalized.num_layers, **kwargs}
    config = gnn.export_config(finalized, arguments)
    rebuilt = gnn.build_from_config(cls, config, finalized.state_dict())
    finalized.eval(), rebuilt.eval()
    assert torch.equal(rebuilt(*args, **inputs), finalized(*args, **inputs))
    mixed = any(name in gnn.LAYERS for name in choice.values())
    assert (gnn.LAYER_KINDS in config) == mixed
    if not mixed:
        cls(**config).load_state_dict(finalized.state_dict(), strict=True)


def test_a_rebuilt_model_names_its_layers_and_a_wrong_config_is_refused() -> None:
    kwargs = {"in_channels": IN, "hidden_channels": HIDDEN, "num_layers": 2, "out_channels": OUT}
    model = GCN(**kwargs)
    model.convs[1] = gnn.MeanConv(HIDDEN, OUT)
    config = gnn.export_config(model, kwargs)
    assert config[gnn.LAYER_KINDS] == [None, {"kind": "mean", "in_channels": HIDDEN, "out_channels": OUT}]
    assert isinstance(gnn.build_from_config(GCN, config).convs[1], gnn.MeanConv)
    with pytest.raises(RuntimeError, match="Missing key"):
        GCN(**kwargs).load_state_dict(model.state_dict(), strict=True)  # why the plain class cannot load it
    with pytest.raises(ValueError, match="lists 3 layers for 2 convs"):
        gnn.build_from_config(GCN, {**config, gnn.LAYER_KINDS: [None, None, None]})
    with pytest.raises(ValueError, match="unknown layer kind 'sgc'"):
        gnn.build_from_config(GCN, {**config, gnn.LAYER_KINDS: [None, {"kind": "sgc"}]})
    model.convs[0] = SAGEConv(IN, HIDDEN)
    with pytest.raises(ValueError, match=r"convs\[0\] is a SAGEConv"):
        gnn.export_config(model, kwargs)
    stepped = GCN(**kwargs)
    gnn.to_steps_(stepped)  # what finalize leaves when a successor is of no kind the class can be rebuilt with
    with pytest.raises(ValueError, match=r"a SteppedGNN .* has no constructor config; save it whole"):
        gnn.export_config(stepped, kwargs)
