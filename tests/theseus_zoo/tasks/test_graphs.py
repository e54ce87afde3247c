"""The gnn family: the gt reader, features and splits, `theseus compress` on the karate club, export, bad options."""

import bz2
import gzip
import json
import lzma
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from theseus_zoo import cli
from theseus_zoo.data import graphs as graph_data
from theseus_zoo.data.assets import MissingAssetError, asset_path
from theseus_zoo.tasks import graphs

from .predecessor_sharing import assert_shares_predecessor

# ------------------------------------------------------------------------------------------------ gt reader
SCALARS = {0: "B", 1: "h", 2: "i", 3: "q", 4: "d"}  # bool, int16, int32, int64, double: struct codes


def gt_bytes(num_nodes, edges, properties=(), *, directed=True, big_endian=False):
    """A graph in graph-tool's gt format, written by the layout of its documentation. ``edges`` must be sorted by
    source (the file lists each vertex's out-neighbours in turn); ``properties`` are (key type, name, value type,
    values) with one value for a graph property, one per vertex or edge otherwise."""
    order = ">" if big_endian else "<"
    out = bytearray(b"\xe2\x9b\xbe gt" + bytes([1, int(big_endian)]))

    def uint64(value):
        out.extend(struct.pack(order + "Q", value))

    def string(data):
        uint64(len(data))
        out.extend(data)

    def value(kind, item):
        if kind in SCALARS:
            out.extend(struct.pack(order + SCALARS[kind], item))
        elif kind == 6:
            string(item.encode())
        elif kind - 7 in SCALARS:
            uint64(len(item))
            out.extend(struct.pack(order + SCALARS[kind - 7] * len(item), *item))
        elif kind == 13:
            uint64(len(item))
            for text in item:
                string(text.encode())
        else:  # 14: python::object, a pickle stored as a string
            string(item)

    string("written by test_graphs, ⛾".encode())
    out.append(int(directed))
    uint64(num_nodes)
    width = "B" if num_nodes < 2**8 else "H"
    for vertex in range(num_nodes):
        neighbours = [target for source, target in edges if source == vertex]
        uint64(len(neighbours))
        out.extend(struct.pack(order + width * len(neighbours), *neighbours))
    uint64(len(properties))
    for key, name, kind, values in properties:
        out.append(key)
        string(name.encode())
        out.append(kind)
        for item in [values] if key == 0 else values:
            value(kind, item)
    return bytes(out)


@st.composite
def gt_graphs(draw):
    """A graph with a property map of each kind; hypothesis picks the shape, a seeded RNG fills in the values."""
    num_nodes = draw(st.sampled_from([0, 1, 5, 255, 256, 300]))  # indices of 1 byte up to 255 vertices, then 2
    edges = []
    if num_nodes:
        pairs = st.tuples(st.integers(0, num_nodes - 1), st.integers(0, num_nodes - 1))
        edges = sorted(draw(st.lists(pairs, max_size=40)), key=lambda edge: edge[0])
    rng = draw(st.randoms(use_true_random=False))

    def text():
        return "".join(rng.choice("ab⛾ é") for _ in range(rng.randrange(4)))

    def many(make, count):
        return [make() for _ in range(count)]

    properties = [
        (0, "readme", 6, text()),
        (0, "pickled", 14, rng.randbytes(rng.randrange(8))),
        (1, "value", 4, many(lambda: rng.uniform(-1e9, 1e9), num_nodes)),
        (1, "flag", 0, many(lambda: rng.randrange(2), num_nodes)),
        (1, "name", 6, many(text, num_nodes)),
        (1, "pos", 9, many(lambda: many(lambda: rng.randrange(-(2**31), 2**31), rng.randrange(3)), num_nodes)),
        (2, "weight", 1, many(lambda: rng.randrange(-(2**15), 2**15), len(edges))),
        (2, "big", 3, many(lambda: rng.randrange(-(2**63), 2**63), len(edges))),
        (2, "tags", 13, many(lambda: many(text, rng.randrange(3)), len(edges))),
    ]
    return num_nodes, edges, properties


@given(graph=gt_graphs(), directed=st.booleans(), big_endian=st.booleans(), compress=st.sampled_from([0, 1, 2, 3]))
def test_read_gt_reads_back_what_the_documented_layout_writes(graph, directed, big_endian, compress, tmp_path_factory):
    num_nodes, edges, properties = graph
    data = gt_bytes(num_nodes, edges, properties, directed=directed, big_endian=big_endian)
    data = [bytes, gzip.compress, bz2.compress, lzma.compress][compress](data)
    path = tmp_path_factory.mktemp("gt") / "graph.gt"
    path.write_bytes(data)
    read = graph_data.read_gt(path)
    assert read.directed == directed and read.num_nodes == num_nodes and read.comment.endswith("⛾")
    assert read.edge_index.dtype == np.int64 and read.edge_index.tolist() == [
        [s for s, _ in edges],
        [t for _, t in edges],
    ]
    found = {0: read.graph_properties, 1: read.vertex_properties, 2: read.edge_properties}
    assert sum(map(len, found.values())) == len(properties)
    for key, name, kind, values in properties:
        value = found[key][name]
        if kind in SCALARS:
            assert isinstance(value, np.ndarray) and value.tolist() == values
        elif kind == 9:
            assert [list(item) for item in value] == values
        else:
            assert value == values


def test_read_gt_refuses_what_is_not_a_whole_gt_file(tmp_path):
    path = tmp_path / "graph.gt"
    path.write_bytes(b"not a graph at all")
    with pytest.raises(ValueError, match="not a graph-tool gt file"):
        graph_data.read_gt(path)
    path.write_bytes(gt_bytes(3, [(0, 1), (2, 0)], [(1, "value", 4, [0.0, 1.0, 0.0])])[:-5])
    with pytest.raises(ValueError, match="truncated"):
        graph_data.read_gt(path)
    path.write_bytes(gt_bytes(2, [], [(1, "odd", 99, [])]))
    with pytest.raises(ValueError, match="unknown gt value type 99"):
        graph_data.read_gt(path)


def _asset(name):
    try:
        return asset_path(name)
    except MissingAssetError:
        pytest.skip(f"asset {name} not fetched (theseus fetch {name})")


def test_polblogs_from_the_asset():
    read = graph_data.read_gt(_asset("polblogs") / "polblogs.gt.gz")
    assert (read.directed, read.num_nodes, read.edge_index.shape) == (True, 1490, (2, 19090))
    assert sorted(np.unique(read.vertex_properties["value"]).tolist()) == [0.0, 1.0]
    raw = graph_data.load_polblogs()
    assert raw.num_nodes == 1490 and raw.labels.bincount().tolist() == [758, 732]
    component = graph_data.load_polblogs_component()
    undirected = {tuple(sorted(edge)) for edge in component.edge_index.t().tolist() if edge[0] != edge[1]}
    assert component.num_nodes == 1222 and len(undirected) == 16714  # as in Nettack and Pro-GNN


def test_drosophila_from_the_asset():
    _asset("drosophila")
    raw = graph_data.load_drosophila()
    assert raw.num_nodes == 209 + 213 and raw.classes == ("I", "K", "O", "P")
    assert raw.edge_index.max() < raw.num_nodes and raw.edge_index.shape[1] > 0
    left = raw.edge_index[0] < 209
    assert ((raw.edge_index[1] < 209) == left).all()  # two hemispheres, no edge between them


# -------------------------------------------------------------------------------------- features and splits
def test_node_features_shapes_and_scaling():
    directed = torch.tensor([[0, 0, 1, 2, 3], [1, 2, 2, 3, 0]])
    x = graph_data.node_features(directed, 5, ["identity", "degree", "random_walk"], walk_length=4)
    assert x.shape == (5, 5 + 2 * 5 + 4)  # one-hot ids, out- and in-degree profiles, 4 return probabilities
    assert torch.equal(x[:, :5], torch.eye(5))
    scaled = x[:, 5:][:, x[:, 5:].std(0) > 0]
    torch.testing.assert_close(scaled.mean(0), torch.zeros(scaled.size(1)), atol=1e-5, rtol=0)
    torch.testing.assert_close(scaled.std(0), torch.ones(scaled.size(1)))
    undirected = torch.cat([directed, directed.flip(0)], dim=1)
    assert graph_data.node_features(undirected, 5, ["degree"]).shape == (5, 5)  # in-degrees would repeat out-degrees
    with pytest.raises(ValueError, match="unknown feature 'pagerank'"):
        graph_data.node_features(directed, 5, ["pagerank"])


def test_karate_graph_for_the_task():
    graph = graphs.GraphTask({"dataset": "karate", "walk_length": 8}, seed=0).graph()
    assert graph.x.shape == (34, 5 + 8) and graph.edge_index.shape == (2, 156) and len(graph.classes) == 4
    assert graphs.GraphTask({"dataset": "karate", "features": ["identity"]}, 0).graph().x.shape == (34, 34)


def test_splits_are_stratified_disjoint_and_fixed():
    labels = torch.arange(100) % 4
    torch.manual_seed(123)  # the run's seed must not matter
    splits = graph_data.stratified_split(labels, (0.2, 0.1))
    torch.manual_seed(456)
    assert all(
        torch.equal(a, b)
        for a, b in zip(splits.values(), graph_data.stratified_split(labels, (0.2, 0.1)).values(), strict=True)
    )
    assert torch.equal(torch.cat(list(splits.values())).sort().values, torch.arange(100))
    assert [labels[splits[name]].bincount().tolist() for name in splits] == [[5] * 4, [2] * 4, [18] * 4]
    with pytest.raises(ValueError, match="class 1 has 2 nodes"):
        graph_data.stratified_split(torch.tensor([0, 0, 0, 0, 1, 1]), (0.3, 0.3))


def test_a_split_per_seed_varies_with_the_seed_and_the_default_does_not():
    def splits(seed, **options):
        task = graphs.GraphTask({"dataset": "karate", "split": [0.3, 0.3], **options}, seed=seed)
        return {name: task.dataset(name) for name in ("train", "dev", "test")}

    assert splits(0) == splits(5)  # the fixed split: seeds vary training only
    per_seed = [splits(seed, split_per_seed=True) for seed in range(4)]
    assert per_seed[0] == splits(0)  # seed 0 is the fixed split's seed
    assert len({tuple(split["dev"]) for split in per_seed}) == 4
    assert per_seed[2] == splits(2, split_per_seed=True)  # drawn from the seed alone: reproducible
    for split in per_seed:  # each is still a partition, stratified like the fixed one
        assert sorted(split["train"] + split["dev"] + split["test"]) == list(range(34))
        assert [len(part) for part in split.values()] == [len(part) for part in splits(0).values()]


@pytest.mark.parametrize(
    ("change", "shared"),
    [
        ({"distill_on": "all"}, True),
        ({"num_layers": 3, "group_sizes": [2, 2, 2]}, True),
        ({"predecessor_eval": True}, True),
        ({"split_per_seed": True}, False),  # another split for seeds but 0: another predecessor
        ({"hidden": 32}, False),
    ],
)
def test_cells_that_differ_only_in_the_compression_share_a_predecessor(change, shared, tmp_path):
    assert_shares_predecessor("gcn-polblogs", change, shared, graphs.GraphTask.compression_options, tmp_path)


def test_truncated_holds_the_successors_initialisation():
    task = graphs.GraphTask({"dataset": "karate"}, 0)
    predecessor = task.build_predecessor()
    truncated = task.truncated(predecessor)
    assert type(truncated) is type(predecessor) and truncated.num_layers == 2 and predecessor.num_layers == 6
    assert all(p.requires_grad for p in truncated.parameters())
    for small, big in [(0, 0), (1, 5)]:  # group [0:3] copies its first layer, group [3:6] the model's last one
        for a, b in zip(truncated.convs[small].parameters(), predecessor.convs[big].parameters(), strict=True):
            assert torch.equal(a, b) and a is not b


# --------------------------------------------------------------------------------------------- end to end
TINY = {
    "predecessor": {"steps": 20, "eval_every": 10},
    "replacing": {"steps": 20, "eval_every": 10},
    "steps_to_one": 10,
}


@pytest.mark.parametrize(
    ("options", "cls", "layers"),
    [({}, "GCN", 2), ({"model": "sage", "jk": "max", "group_sizes": [4, 1, 1], "num_layers": 3}, "GraphSAGE", 3)],
)
def test_compress_karate_exports_an_ordinary_pyg_model(options, cls, layers, tmp_path, capsys):
    import torch_geometric.nn

    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({**TINY, "options": options}))
    out = tmp_path / "run"
    args = ["compress", "--recipe", "gcn-karate", "--config", str(config), "--out", str(out), "--no-progress"]
    assert cli.main(args) == 0
    report = json.loads((out / "report.json").read_text())
    compact = {"theseus", "baseline:truncated", "baseline:scratch", "baseline:kd"}
    assert set(report["models"]) == {"predecessor", *compact}
    assert len({report["models"][name]["parameters"] for name in compact}) == 1
    assert report["models"]["theseus"]["parameters"] < report["models"]["predecessor"]["parameters"]
    assert all(0 <= entry["test"]["accuracy"] <= 1 and "mcc" in entry["test"] for entry in report["models"].values())
    model = getattr(torch_geometric.nn, cls)(**json.loads((out / "model" / "config.json").read_text()))
    model.load_state_dict(torch.load(out / "model" / "model.pt"), strict=True)
    assert model.num_layers == layers
    task = graphs.GraphTask({"dataset": "karate", **options}, 0)
    assert task.evaluate(model, "test") == report["models"]["theseus"]["test"]
    assert "| theseus |" in capsys.readouterr().out
    predictions = torch.tensor(report["models"]["theseus"]["test_predictions"])  # per node, in the split's order
    assert torch.equal(predictions, task.predictions(model, "test").float())
    assert task.score(predictions, "test") == report["models"]["theseus"]["test"]
    assert set(report["comparisons"]) == {"predecessor", *compact} - {"theseus"}


def test_the_recipes_are_listed(capsys):
    assert cli.main(["recipes", "*-*"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("gcn-polblogs", "sage-drosophila", "gcn-karate"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dataset": "cora"}, "unknown dataset 'cora': set the gnn option dataset to one of polblogs"),
        ({"num_layers": 6}, "num_layers must be an integer in [1, predecessor_layers=6), got 6"),
        ({"depth": 3}, "unknown gnn options ['depth']"),
        ({"model": "mlp"}, "gnn option model must be one of 'gcn', 'sage'"),
        ({"jk": "cat"}, "jk must be None, 'last' or 'max'"),
        ({"features": ["pagerank"]}, "features must be a non-empty list"),
        ({"split": [0.6, 0.5]}, "split must be [train, dev] fractions"),
        ({"group_sizes": [5, 2]}, "group_sizes [5, 2] must be 2 positive integers"),
        ({"norm": "no_such_norm"}, "cannot build the GCN from the options"),
    ],
)
def test_bad_options_fail_in_one_line_before_training(options, message, tmp_path, capsys):
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"options": options}))
    args = ["compress", "--recipe", "gcn-karate", "--config", str(config), "--out", str(tmp_path / "run")]
    assert cli.main(args) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_a_missing_asset_names_the_fetch_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("THESEUS_CACHE", str(tmp_path / "empty-cache"))
    assert cli.main(["compress", "--recipe", "gcn-polblogs", "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert "theseus fetch polblogs" in error and error.count("\n") == 1


def test_listing_the_recipes_does_not_import_torch_geometric():
    script = "import sys, theseus_zoo.tasks.graphs; print(any(m.startswith('torch_geometric') for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_distillation_on_every_node_and_the_task_loss_on_the_labelled_ones():
    task = graphs.GraphTask({"dataset": "karate", "distill_on": "all"}, 0)
    model = task.build_predecessor().eval()
    batch = task.collate(task.dataset("train"))
    logits = task.logits(model, batch)
    assert logits.shape[0] == task.graph().x.shape[0]  # every node, labelled or not
    labelled = graphs.GraphTask({"dataset": "karate"}, 0)
    torch.testing.assert_close(task.criterion(logits, batch), labelled.criterion(labelled.logits(model, batch), batch))
    assert graphs.GraphTask({"dataset": "karate", "predecessor_eval": True}, 0).replace_options == {
        "predecessor_eval": True
    }
    with pytest.raises(ValueError, match="distill_on"):
        graphs.GraphTask({"dataset": "karate", "distill_on": "some"}, 0)


def test_kd_on_every_node_with_frozen_predecessor_dropout_runs_end_to_end(tmp_path):
    config = tmp_path / "tiny.json"
    options = {"distill_on": "all", "predecessor_eval": True}
    config.write_text(json.dumps({**TINY, "options": options, "baselines": ["kd"], "kd_weight": 0.5}))
    out = tmp_path / "run"
    args = ["compress", "--recipe", "gcn-karate", "--config", str(config), "--out", str(out), "--no-progress"]
    assert cli.main(args) == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report["models"]) == {"predecessor", "theseus", "baseline:kd"}


def test_unfreeze_with_every_parameter_in_the_groups_is_refused_before_anything_trains(tmp_path, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "run"
    args = ["compress", "--recipe", "gcn-karate", "--config", str(config), "--out", str(out), "--no-progress"]
    assert cli.main([*args, "--methods", "truncated,theseus+unfreeze"]) == 2  # the GCN's layers are all in groups
    error = capsys.readouterr().err
    assert "theseus: +unfreeze, unfreeze_at_one='all' finds nothing to train: the groups hold every parameter" in error
    assert error.count("\n") == 1
    assert not out.exists()  # nothing written, not even the directory
