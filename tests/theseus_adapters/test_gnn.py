"""theseus_adapters.gnn on tiny random graphs: the stepped form, plans, the replacement contract, finalize into a
fresh small model, heterogeneous successors, Sequential stacks, NeighborLoader mini-batches, and errors."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch_geometric import typing as pyg_typing
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GAT, GCN, GIN, PNA, BatchNorm, EdgeCNN, GCNConv, GraphSAGE, Sequential
from torch_geometric.sampler import NeighborSampler, SamplerOutput

import theseus_core as th
from theseus_adapters import gnn
from theseus_core.testing import assert_replacement_equivalence, groupings

IN, HIDDEN, OUT = 5, 8, 3


def random_graph(seed: int = 0, num_nodes: int = 12, num_edges: int = 40) -> dict[str, torch.Tensor]:
    """Two graphs of ``num_nodes / 2`` nodes in one batch, with edge weights and 2-d edge features."""
    generator = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(num_nodes, IN, generator=generator),
        "edge_index": torch.randint(0, num_nodes, (2, num_edges), generator=generator),
        "edge_weight": torch.rand(num_edges, generator=generator),
        "edge_attr": torch.randn(num_edges, 2, generator=generator),
        "batch": torch.arange(num_nodes) * 2 // num_nodes,
    }


GRAPH = random_graph()

# Each kind: class, constructor kwargs (all but num_layers), extra forward inputs it uses. Together they cover
# every conv kind PyG builds, jk None / "last" / "max", act_first, norms with a batch argument, a plain-function
# activation, GIN's activation shared by every layer's MLP, dropout everywhere, and edge_weight / edge_attr.
KINDS: dict[str, tuple[type, dict[str, Any], tuple[str, ...]]] = {
    "gcn": (GCN, {"out_channels": OUT, "dropout": 0.3, "norm": "batch_norm"}, ("edge_weight",)),
    "sage": (
        GraphSAGE,
        {"out_channels": OUT, "dropout": 0.3, "jk": "last", "act_first": True, "norm": "layer_norm"},
        ("batch",),
    ),
    "gin": (GIN, {"out_channels": OUT, "dropout": 0.3, "norm": "batch_norm"}, ()),
    "gat": (GAT, {"out_channels": OUT, "dropout": 0.3, "heads": 2, "jk": "max", "edge_dim": 2}, ("edge_attr",)),
    "gatv2": (GAT, {"out_channels": OUT, "dropout": 0.3, "v2": True, "heads": 2}, ()),
    "pna": (
        PNA,
        {"out_channels": OUT, "dropout": 0.3, "aggregators": ["mean", "max"], "scalers": ["identity", "amplification"]}
        | {"deg": torch.tensor([0, 3, 4, 2, 1]), "edge_dim": 2},
        ("edge_attr",),
    ),
    "edgecnn": (EdgeCNN, {"out_channels": OUT, "dropout": 0.3, "act": torch.tanh}, ()),
}


def build(kind: str, num_layers: int = 4, seed: int = 0) -> nn.Module:
    cls, kwargs, _ = KINDS[kind]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(IN, HIDDEN, num_layers, **kwargs)


def inputs_of(kind: str, graph: dict[str, torch.Tensor] = GRAPH) -> tuple[tuple, dict[str, torch.Tensor]]:
    return (graph["x"], graph["edge_index"]), {name: graph[name] for name in KINDS[kind][2]}


def run(model: nn.Module, args: tuple, kwargs: dict, training: bool = True, seed: int = 7) -> torch.Tensor:
    """One forward with the global RNG seeded, so that dropout draws the same masks."""
    model.train(training)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        return model(*args, **kwargs)


def cloned_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def assert_same_state(model: nn.Module, expected: dict[str, torch.Tensor]) -> None:
    state = model.state_dict()
    assert list(state) == list(expected)
    for name, tensor in expected.items():
        assert torch.equal(state[name], tensor), name


def sequential_stack(num_layers: int, seed: int = 0) -> Sequential:
    """``dropout → (GCNConv → BatchNorm → ReLU → Dropout) × num_layers → Linear``, built the same way every time."""
    layers: list[Any] = [(nn.Dropout(0.1), "x -> x")]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for index in range(num_layers):
            conv = GCNConv(IN if index == 0 else HIDDEN, HIDDEN)
            layers += [(conv, "x, edge_index, edge_weight -> x"), BatchNorm(HIDDEN)]
            layers += [nn.ReLU(), nn.Dropout(0.3)]
        layers.append(nn.Linear(HIDDEN, OUT))
        return Sequential("x, edge_index, edge_weight", layers)


# ------------------------------------------------------------------------------------- stepped form
@pytest.mark.parametrize("kind", list(KINDS))
def test_stepped_form_is_bit_identical_and_converts_back(kind: str) -> None:
    model = build(kind)
    args, kwargs = inputs_of(kind)
    reference = copy.deepcopy(model)  # run in lockstep with the model: batch norm statistics move alike
    original_class, module_names = type(model), [name for name, _ in model.named_modules()]
    convs, norms = list(model.convs), list(model.norms)

    assert gnn.to_steps_(model) is model
    assert isinstance(model, gnn.SteppedGNN) and len(model.steps) == 4
    for training in (False, True):  # train mode: dropout on, same seed
        assert torch.equal(run(model, args, kwargs, training), run(reference, args, kwargs, training))

    # replace_ then restore() gives back the stepped model; from_steps_ gives back the original one.
    theseus = th.replace_(model, gnn.plan(model, 2), example_inputs=args, example_kwargs=kwargs)
    theseus.restore()
    assert gnn.from_steps_(model) is model
    assert type(model) is original_class and [name for name, _ in model.named_modules()] == module_names
    assert all(a is b for a, b in zip(model.convs, convs, strict=True))
    assert all(a is b for a, b in zip(model.norms[:-1], norms[:-1], strict=True))
    assert "_steps_record" not in model.__dict__
    assert_same_state(model, cloned_state(reference))
    assert torch.equal(run(model, args, kwargs), run(reference, args, kwargs))
    if kind == "gin":  # GIN's activation is shared by every layer's MLP again
        assert all(conv.nn.act is model.act for conv in model.convs)


# ------------------------------------------------------------------------------- replacement contract
@pytest.mark.parametrize("kind", list(KINDS))
def test_replacement_contract(kind: str) -> None:
    """rate 0 ≡ original (train, dropout), rate 1 and eval ≡ finalized, gradients only in successors, restore."""
    model = gnn.to_steps_(build(kind))
    args, kwargs = inputs_of(kind)
    assert_replacement_equivalence(model, gnn.plan(model, 2), args, kwargs)


@pytest.mark.parametrize("kind", list(KINDS))
def test_finalized_model_loads_strictly_into_a_fresh_small_model(kind: str) -> None:
    cls, constructor_kwargs, _ = KINDS[kind]
    model = gnn.to_steps_(build(kind, num_layers=5))
    args, kwargs = inputs_of(kind)
    theseus = th.replace_(model, gnn.plan(model, 3, group_sizes=[2, 2, 1]), example_inputs=args, example_kwargs=kwargs)
    theseus.rate = 0.5
    optimizer = torch.optim.SGD(theseus.successor_parameters(), lr=0.1)
    for _ in range(4):
        model.train()
        loss = model(*args, **kwargs).square().mean()
        if loss.requires_grad:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
    expected = run(model, args, kwargs, training=False)

    compact = theseus.finalize()
    assert compact is model and type(compact) is cls
    assert len(compact.convs) == len(compact.norms) == compact.num_layers == 3
    fresh = cls(IN, HIDDEN, 3, **constructor_kwargs)
    fresh.load_state_dict(compact.state_dict(), strict=True)
    assert torch.equal(run(fresh, args, kwargs, training=False), expected)
    assert torch.equal(run(fresh, args, kwargs), run(compact, args, kwargs))  # train mode too: same ops, same masks


@given(
    kind=st.sampled_from(["gcn", "gin", "sage"]),
    num_layers=st.integers(2, 5),
    jk=st.sampled_from([None, "last", "max"]),
    norm=st.sampled_from([None, "batch_norm", "graph_norm"]),
    act=st.sampled_from(["relu", None]),
    act_first=st.booleans(),
    out_channels=st.sampled_from([None, OUT]),
    data=st.data(),
)
def test_any_grouping_of_any_basic_gnn_compresses_to_its_small_size(
    kind: str,
    num_layers: int,
    jk: str | None,
    norm: str | None,
    act: str | None,
    act_first: bool,
    out_channels: int | None,
    data: st.DataObject,
) -> None:
    cls = KINDS[kind][0]
    kwargs = {"out_channels": out_channels, "dropout": 0.3, "jk": jk, "norm": norm, "act": act, "act_first": act_first}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(data.draw(st.integers(0, 1000)))
        model = gnn.to_steps_(cls(IN, HIDDEN, num_layers, **kwargs))
    sizes = [b - a for a, b in data.draw(groupings(num_layers, cover=True).filter(lambda g: len(g) < num_layers))]
    if len(sizes) == 1 and jk is None:  # one layer mapping 5 to 8 or 3 channels: no layer of the GNN does
        with pytest.raises(ValueError, match="conv_successor"):
            gnn.plan(model, 1)
        return
    plan = gnn.plan(model, len(sizes), group_sizes=sizes)
    args, inputs = (GRAPH["x"], GRAPH["edge_index"]), {"batch": GRAPH["batch"]}  # graph_norm normalizes per graph
    assert_replacement_equivalence(model, plan, args, inputs)

    theseus = th.replace_(model, plan)
    expected = run(model, args, inputs, training=False)
    compact = theseus.finalize()
    fresh = cls(IN, HIDDEN, len(sizes), **kwargs)
    fresh.load_state_dict(compact.state_dict(), strict=True)
    assert torch.equal(run(fresh, args, inputs, training=False), expected)


def test_a_gnn_inside_a_larger_model() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gnn = build("gcn")
            self.head = nn.Linear(OUT, 2)

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.head(self.gnn(x, edge_index))

    net = Net()
    gnn.to_steps_(net.gnn)
    plan = gnn.plan(net, 2)
    assert [spec.path for spec in plan] == ["gnn.steps[0:2]", "gnn.steps[2:4]"]
    args = (GRAPH["x"], GRAPH["edge_index"])
    assert_replacement_equivalence(net, plan, args)
    th.replace_(net, plan).finalize()
    assert type(net.gnn) is GCN and net.gnn.num_layers == 2


# --------------------------------------------------------------------------------- other successors
def test_gat_groups_replaced_by_gcn_layers_stay_a_stepped_gnn() -> None:
    """Heterogeneous successors: the model is no plain GAT afterwards, so finalize leaves a working SteppedGNN."""
    model = gnn.to_steps_(build("gat"))
    args, kwargs = inputs_of("gat")
    plan = gnn.plan(model, 2, successor=gnn.conv_successor(lambda i, o: GCNConv(i, o)))
    assert_replacement_equivalence(model, plan, args, kwargs)

    theseus = th.replace_(model, plan, example_inputs=args, example_kwargs=kwargs)
    expected = run(model, args, kwargs, training=False)
    compact = theseus.finalize()
    assert isinstance(compact, gnn.SteppedGNN) and compact.num_layers == 2
    assert [type(step.conv) for step in compact.steps] == [GCNConv, GCNConv]
    assert [step.out_channels for step in compact.steps] == [HIDDEN, HIDDEN]  # jk="max": every layer at hidden width
    assert torch.equal(run(compact, args, kwargs, training=False), expected)
    buffer = io.BytesIO()  # an ordinary module: it pickles whole
    torch.save(compact, buffer)
    buffer.seek(0)
    reloaded = torch.load(buffer, weights_only=False)
    assert torch.equal(run(reloaded, args, kwargs, training=False), expected)
    with pytest.raises(ValueError, match="GCNConv, neither a GATConv"):
        gnn.from_steps_(compact)


def test_narrower_successors_get_linear_projections() -> None:
    model = gnn.to_steps_(build("gcn"))
    args, kwargs = inputs_of("gcn")

    def narrow(steps: list[gnn.GNNStep]) -> gnn.GNNStep:
        return gnn.GNNStep(GCNConv(steps[0].in_channels, 4), [nn.ReLU()])

    plan = gnn.plan(model, 2, successor=narrow, out_proj="linear")
    assert_replacement_equivalence(model, plan, args, kwargs)
    theseus = th.replace_(model, plan, example_inputs=args, example_kwargs=kwargs)
    projections = [site.successor.out_proj for site in theseus.sites]
    assert [(p.in_features, p.out_features) for p in projections] == [(4, HIDDEN), (4, OUT)]
    assert isinstance(theseus.finalize(), gnn.SteppedGNN)  # a Projected layer is no BasicGNN layer


# ---------------------------------------------------------------------------------------- Sequential
def test_sequential_stack_round_trip_replacement_and_fresh_small_stack() -> None:
    model = sequential_stack(4)
    args = (GRAPH["x"], GRAPH["edge_index"], GRAPH["edge_weight"])
    reference = copy.deepcopy(model)  # run in lockstep with the model: batch norm statistics move alike
    children = list(model._children)

    gnn.to_steps_(model)
    assert [child.name for child in model._children] == ["module_0", "steps", "module_17"]
    assert torch.equal(run(model, args, {}), run(reference, args, {}))
    restored = gnn.from_steps_(copy.deepcopy(model))
    assert restored._children == children
    assert_same_state(restored, cloned_state(reference))
    assert torch.equal(run(restored, args, {}), run(reference, args, {}))

    plan = gnn.plan(model, 2)
    assert_replacement_equivalence(model, plan, args)
    theseus = th.replace_(model, plan, example_inputs=args)
    evaluated = run(model, args, {}, training=False)
    compact = theseus.finalize()
    fresh = sequential_stack(2, seed=1)
    fresh.load_state_dict(compact.state_dict(), strict=True)
    assert [c.name for c in compact._children] == [c.name for c in fresh._children]
    assert torch.equal(run(fresh, args, {}, training=False), evaluated)
    assert torch.equal(run(fresh, args, {}), run(compact, args, {}))


def test_sequential_successors_with_projections_become_children() -> None:
    model = gnn.to_steps_(sequential_stack(4))
    args = (GRAPH["x"], GRAPH["edge_index"], GRAPH["edge_weight"])
    plan = gnn.plan(model, 2, successor=lambda steps: gnn.GNNStep(GCNConv(steps[0].in_channels, 4)), out_proj="linear")
    theseus = th.replace_(model, plan, example_inputs=args)
    expected = run(model, args, {}, training=False)
    compact = theseus.finalize()
    kinds = [type(compact[i]).__name__ for i in range(len(compact))]
    assert kinds == ["Dropout", "GCNConv", "Linear", "GCNConv", "Linear", "Linear"]
    assert torch.equal(run(compact, args, {}, training=False), expected)


# ------------------------------------------------------------------------------- NeighborLoader
class TorchNeighborSampler(NeighborSampler):
    """Uniform neighbor sampling in plain PyTorch, for machines without pyg-lib or torch-sparse (the samplers
    NeighborLoader needs); the rest of NeighborLoader (subgraph, edge ids and features, seeds first) is PyG's."""

    def _sample(self, seed: torch.Tensor, seed_time: torch.Tensor | None = None, **kwargs: Any) -> SamplerOutput:
        nodes = seed.tolist()
        local = {node: index for index, node in enumerate(nodes)}
        rows: list[int] = []
        cols: list[int] = []
        edges: list[int] = []
        frontier, nodes_per_hop, edges_per_hop = list(nodes), [len(nodes)], []
        for fanout in self.num_neighbors.get_mapped_values():
            reached, edge_count = [], len(rows)
            for target in frontier:
                start, stop = int(self.colptr[target]), int(self.colptr[target + 1])
                order = torch.randperm(stop - start)
                for position in (start + (order if fanout < 0 else order[:fanout])).tolist():
                    source = int(self.row[position])
                    if source not in local:
                        local[source] = len(nodes)
                        nodes.append(source)
                        reached.append(source)
                    rows.append(local[source])
                    cols.append(local[target])
                    edges.append(position)
            frontier = reached
            nodes_per_hop.append(len(reached))
            edges_per_hop.append(len(rows) - edge_count)
        as_tensor: Callable[[list[int]], torch.Tensor] = lambda values: torch.tensor(values, dtype=torch.long)  # noqa: E731
        return SamplerOutput(
            node=as_tensor(nodes),
            row=as_tensor(rows),
            col=as_tensor(cols),
            edge=as_tensor(edges),
            batch=None,
            num_sampled_nodes=nodes_per_hop,
            num_sampled_edges=edges_per_hop,
        )


def neighbor_loader(data: Data, num_neighbors: list[int], batch_size: int) -> NeighborLoader:
    sampler = None
    if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
        sampler = TorchNeighborSampler(data, num_neighbors=num_neighbors)
    return NeighborLoader(data, num_neighbors, batch_size=batch_size, shuffle=True, neighbor_sampler=sampler)


@pytest.mark.filterwarnings("ignore:Using 'TorchNeighborSampler' without a 'pyg-lib'")
def test_neighbor_loader_training_draws_once_per_batch_and_trains_only_successors() -> None:
    torch.manual_seed(0)
    graph = random_graph(num_nodes=60, num_edges=240)
    data = Data(x=graph["x"], edge_index=graph["edge_index"], edge_weight=graph["edge_weight"])
    data.y = torch.randint(0, OUT, (60,))
    model = gnn.to_steps_(build("gcn"))
    theseus = th.replace_(model, gnn.plan(model, 2), seed=3)
    predecessors = {id(p): p.detach().clone() for site in theseus.sites for p in site.predecessor.parameters()}
    successors = {id(p): p.detach().clone() for p in theseus.successor_parameters()}
    optimizer = torch.optim.AdamW(theseus.successor_parameters(), lr=1e-2)
    schedule = th.LinearSchedule.reaching_one_at(6, base=0.3)

    batches = 0
    for step, batch in enumerate(neighbor_loader(data, [3, 3, 3, 3], batch_size=15)):
        theseus.rate = schedule(step)
        model.train()
        out = model(batch.x, batch.edge_index, edge_weight=batch.edge_weight)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        if loss.requires_grad:
            loss.backward()
            for site in theseus.sites:
                assert all(p.grad is None for p in site.predecessor.parameters())
            optimizer.step()
        optimizer.zero_grad()
        batches += 1

    assert batches == 4
    assert all(calls == batches for calls, _ in theseus.route_counts.values())  # one draw per group per batch
    assert sum(chosen for _, chosen in theseus.route_counts.values()) > 0
    for site in theseus.sites:
        assert all(torch.equal(p, predecessors[id(p)]) for p in site.predecessor.parameters())
    assert any(not torch.equal(p, successors[id(p)]) for p in theseus.successor_parameters())
    compact = theseus.finalize()
    assert type(compact) is GCN and compact.num_layers == 2
    assert compact(data.x, data.edge_index, data.edge_weight).shape == (60, OUT)


# ----------------------------------------------------------------------------------------- errors
def test_to_steps_rejects_what_it_cannot_compress_before_changing_anything() -> None:
    with pytest.raises(TypeError, match="BasicGNN"):
        gnn.to_steps_(nn.Linear(2, 2))
    for model, message in [
        (GCN(IN, HIDDEN, 3, jk="cat"), "jk='cat'"),
        (GCN(IN, HIDDEN, 3, act="prelu"), "PReLU has parameters"),
    ]:
        state, structure = cloned_state(model), repr(model)
        with pytest.raises(ValueError, match=message):
            gnn.to_steps_(model)
        assert type(model) is GCN and repr(model) == structure and "_steps_record" not in model.__dict__
        assert_same_state(model, state)

    jk_over_layers = Sequential(
        "x, edge_index",
        [
            (GCNConv(IN, HIDDEN), "x, edge_index -> x1"),
            (GCNConv(HIDDEN, HIDDEN), "x1, edge_index -> x2"),
            (lambda x1, x2: x1 + x2, "x1, x2 -> x"),
        ],
    )
    children = list(jk_over_layers._children)
    with pytest.raises(ValueError, match=r"\['x1'\] made inside"):
        gnn.to_steps_(jk_over_layers)
    assert jk_over_layers._children == children and "steps" not in jk_over_layers._modules

    stepped = gnn.to_steps_(build("gcn"))
    with pytest.raises(ValueError, match="already in stepped form"):
        gnn.to_steps_(stepped)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"num_layers": 4}, ValueError, "1 <= num_layers < 4"),
        ({"num_layers": 7}, ValueError, "1 <= num_layers < 4"),
        ({"num_layers": 0}, ValueError, "1 <= num_layers < 4"),
        ({"num_layers": True}, ValueError, "1 <= num_layers < 4"),
        ({"num_layers": 2, "group_sizes": [1, 1, 2]}, ValueError, "group_sizes"),
        ({"num_layers": 2, "group_sizes": [1, 2]}, ValueError, "group_sizes"),
        ({"num_layers": 1}, ValueError, "conv_successor"),  # one layer mapping 5 -> 3 channels: nothing to copy
    ],
)
def test_plan_rejects_bad_input_without_touching_the_model(options: dict, error: type, message: str) -> None:
    model = gnn.to_steps_(build("gcn"))
    state, structure = cloned_state(model), repr(model)
    with pytest.raises(error, match=message):
        gnn.plan(model, **options)
    assert repr(model) == structure
    assert_same_state(model, state)


def test_misuse_is_named() -> None:
    with pytest.raises(TypeError, match=r"to_steps_\(model\)"):
        gnn.plan(build("gcn"), 2)
    with pytest.raises(ValueError, match="projections"):
        gnn.plan(gnn.to_steps_(build("gat")), 2, out_proj="linear")
    with pytest.raises(ValueError, match="not in stepped form"):
        gnn.from_steps_(build("gcn"))
    model = gnn.to_steps_(build("gcn"))
    with pytest.raises(NotImplementedError, match="num_sampled_nodes_per_hop"):
        model(GRAPH["x"], GRAPH["edge_index"], num_sampled_nodes_per_hop=[12, 0, 0, 0, 0])
    theseus = th.replace_(model, gnn.plan(model, 2))
    with pytest.raises(ValueError, match="already under replacement"):
        gnn.plan(model, 2)
    with pytest.raises(RuntimeError, match="finalize"):
        gnn.from_steps_(model)
    theseus.restore()
    assert type(gnn.from_steps_(model)) is GCN
