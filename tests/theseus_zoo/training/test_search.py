"""theseus_zoo.training.search: `theseus compress --budget` on the ResNet family (tiny data, tiny budget)."""

import json

import pytest
import torch

from tests.theseus_zoo.tasks import test_images
from theseus_adapters import gnn
from theseus_adapters.resnet import successor_blocks
from theseus_zoo import cli
from theseus_zoo.tasks import graphs
from theseus_zoo.training import session

pytest.importorskip("scipy")
fake_cache = test_images.fake_cache  # the fixture: a fetched Fashion-MNIST of 64 + 20 images
# ResNet-18 compressed to one block per stage: four groups of two blocks, one group a stage, at a quarter of the cost
# of the recipe's ResNet-34 (several groups in one stage, spliced back together, are test_resnet_candidates')
TINY = {**test_images.TINY, "options": {**test_images.TINY["options"], "architecture": "resnet18", "blocks": [1] * 4}}


def run(tmp_path, *extra, out="run"):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    args = ["compress", "--recipe", "resnet-fashion-mnist", "--config", str(config), "--no-progress"]
    return cli.main([*args, "--out", str(tmp_path / out), *extra])


@pytest.mark.usefixtures("fake_cache")
@pytest.mark.slow
def test_a_budget_searches_the_successors_theseus_trains_and_exports(tmp_path, monkeypatch):
    saved = {}  # ResNet checkpoints are large: keep the last state in memory
    monkeypatch.setattr(session, "atomic_save", lambda state, path: saved.update(state=state))
    assert run(tmp_path, "--methods", "theseus+warmup+kd,truncated", "--budget", "params=0.6,steps=2") == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    search = report["search"]
    assert search["budget"] == {"params": 0.6} and search["steps"] == 2
    assert set(search["chosen"]) == set(search["candidates"]) and len(search["chosen"]) == 4  # (1, 1, 1, 1) groups
    assert all(name in search["candidates"][path] for path, name in search["chosen"].items())
    assert search["predicted_ratio"] <= 0.6
    # the exported model is the searched one, and costs what the search predicted: parameters are exact
    assert search["params_ratio"] == pytest.approx(search["predicted_ratio"], rel=1e-9)
    assert report["models"]["theseus"]["parameters"] < report["models"]["predecessor"]["parameters"] * 0.6
    config = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    if "light_blocks" in config:
        model = successor_blocks.build_from_config(config["light_blocks"])
        model.load_state_dict(torch.load(tmp_path / "run" / "model" / "model.pt", weights_only=True), strict=True)
    assert saved["state"]["search"]["chosen"] == search["chosen"]  # a resumed run keeps its choice
    assert "searched under a params budget of 0.6" in (tmp_path / "run" / "report.md").read_text()


@pytest.mark.parametrize(
    ("recipe_args", "message"),
    [
        (["--budget", "latency=1.5"], "a budget is a fraction of the predecessor's latency in (0, 1), got 1.5"),
        (["--budget", "params=0.01"], "below what the cheapest candidates reach"),
        (["--budget", "macs=0.001"], "below what the cheapest candidates reach"),
        (["--budget", "params=0.5", "--methods", "truncated,kd"], "and this run trains neither"),
        (["--methods", "theseus,kd+searched"], "method 'kd+searched' trains the architecture a budget search chooses"),
        (["--budget", "params=0.5", "--methods", "scratch+searched"], "+searched applies to truncated, kd only"),
        (["--budget", "latency=0.5,latency=0.3"], "--budget gives latency= twice"),
    ],
)
def test_an_impossible_budget_is_refused_in_one_line_before_any_work(
    fake_cache,
    tmp_path,
    capsys,
    recipe_args,
    message,
):
    assert run(tmp_path, *recipe_args) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()  # nothing written, not even the directory


def test_the_budget_flag_overrides_the_configs_budget_field_by_field(tmp_path):
    """The flag's kind replaces the config's (a budget names one), and the config's steps and lr stay unless the
    flag gives its own; a choice the config names is not the search the flag asks for, and goes."""
    import argparse

    config = tmp_path / "budget.json"
    config.write_text(json.dumps({"budget": {"params": 0.3, "steps": 7, "lr": 0.01, "chosen": {"blocks[0:2]": "one"}}}))

    def recipe(flag):
        args = argparse.Namespace(recipe="toy", config=config, seed=None, steps_to_one=None, methods=None, budget=flag)
        return cli._recipe(args).budget

    assert recipe(None) == {"params": 0.3, "steps": 7, "lr": 0.01, "chosen": {"blocks[0:2]": "one"}}
    assert recipe("latency=0.5") == {"latency": 0.5, "steps": 7, "lr": 0.01}
    assert recipe("params=0.4,steps=20") == {"params": 0.4, "steps": 20, "lr": 0.01}


def test_a_family_that_offers_no_candidates_is_refused_in_one_line():
    from theseus_zoo.recipes import get_recipe
    from theseus_zoo.tasks import build_task
    from theseus_zoo.training.search import BudgetSearch

    class NoCandidates:  # a family's Task without OffersCandidates
        def __init__(self, task):
            self.task = task

        def __getattr__(self, name):
            if name == "candidates":
                raise AttributeError(name)
            return getattr(self.task, name)

    recipe = get_recipe("toy").with_overrides({"budget": {"params": 0.5}})
    task = NoCandidates(build_task("toy", {}, 0))
    with pytest.raises(ValueError, match="the toy family offers no candidates for a budget search") as refused:
        BudgetSearch(task, recipe, torch.device("cpu")).check(task.build_predecessor())
    assert "\n" not in str(refused.value)


def test_the_check_builds_the_candidates_once_and_nothing_else(monkeypatch):
    """Latency is measured, so the check builds the candidate library, once; it reads one batch of the training
    split for the costs, and orders, distils, scores and solves nothing (all of that is `BudgetSearch.run`'s)."""
    from theseus_core import budget as core_budget
    from theseus_zoo.recipes import get_recipe
    from theseus_zoo.tasks import build_task
    from theseus_zoo.training import search

    recipe = get_recipe("toy").with_overrides({"budget": {"params": 0.5, "steps": 50}})
    task = build_task("toy", {}, 0)
    built, reads = [], []

    class Counted(list):
        def __getitem__(self, index):
            reads.append(index)
            return super().__getitem__(index)

    train, dataset, library = Counted(task.dataset("train")), task.dataset, search.CandidateLibrary
    monkeypatch.setattr(task, "dataset", lambda split: train if split == "train" else dataset(split))
    monkeypatch.setattr(search, "CandidateLibrary", lambda *args, **kwargs: built.append(1) or library(*args, **kwargs))

    def unneeded(*args, **kwargs):
        raise AssertionError("the check ran what only the search itself needs")

    monkeypatch.setattr(search, "DataOrder", unneeded)
    for name in ("distill_", "scores", "choose"):
        monkeypatch.setattr(library, name, unneeded)
    monkeypatch.setattr(core_budget, "solve", unneeded)
    per_key, rest = search.BudgetSearch(task, recipe, torch.device("cpu")).check(task.build_predecessor())
    assert built == [1] and 0 < len(reads) <= recipe.replacing.batch_size
    assert {name for _, name in per_key} >= {"keep", "skip"} and rest.params > 0


@pytest.mark.parametrize("measured", [0.005, 0.02])
def test_a_latency_budget_below_the_predicted_cheapest_is_refused_only_if_the_cheapest_measures_over(
    monkeypatch, measured
):
    """Candidates timed alone over-predict small models: the check assembles and measures the cheapest choice with
    a parameter to train before refusing, and lets through a budget it measures within."""
    from theseus_zoo.recipes import get_recipe
    from theseus_zoo.tasks import build_task
    from theseus_zoo.training.search import BudgetSearch

    recipe = get_recipe("toy").with_overrides({"budget": {"latency": 0.01}})
    task = build_task("toy", {}, 0)
    asked = []

    def measure(self, predecessor, choices, library=None):
        asked.append(choices)
        return [{"measured_latency_ratio": measured, "params_ratio": 0.5} for _ in choices]

    monkeypatch.setattr(BudgetSearch, "measure", measure)
    search = BudgetSearch(task, recipe, torch.device("cpu"))
    if measured < 0.01:
        search.check(task.build_predecessor())
    else:
        with pytest.raises(ValueError, match=r"below what the cheapest .*measures 0\.020 of it") as refused:
            search.check(task.build_predecessor())
        assert "\n" not in str(refused.value)
    assert len(asked) == 1 and len(asked[0]) == 1 and "skip" in asked[0][0].values()  # the cheapest: skips


def searched(tmp_path, recipe, steps, *args):
    """A tiny run of ``recipe`` with ``args`` (methods, budget) in ``tmp_path/recipe``; its report's search."""
    config = tmp_path / f"{recipe}.json"
    phases = {"predecessor": {"steps": steps[0], "eval_every": 5}, "replacing": {"steps": steps[1], "eval_every": 2}}
    config.write_text(json.dumps({**phases, "steps_to_one": steps[1] // 2}))
    out = tmp_path / recipe
    assert (
        cli.main(["compress", "--recipe", recipe, "--config", str(config), "--out", str(out), "--no-progress", *args])
        == 0
    )
    return json.loads((out / "report.json").read_text())["search"], out


def test_a_macs_budget_chooses_by_counted_multiply_adds_and_the_export_counts_what_was_predicted(tmp_path):
    search, out = searched(tmp_path, "toy", (10, 6), "--methods", "theseus,kd", "--budget", "macs=0.6,steps=3")
    assert search["budget"] == {"macs": 0.6} and search["within_budget"] is True
    assert search["predicted_ratio"] <= 0.6
    assert search["macs_ratio"] == pytest.approx(search["predicted_ratio"], rel=1e-9)  # counted: they add up
    assert all(entry["macs"] >= 0 for names in search["candidates"].values() for entry in names.values())
    for point in search["frontier"]:
        assert point["macs_ratio"] == pytest.approx(point["predicted_ratio"], rel=1e-9)
    assert "multiply-adds ratio" in (out / "report.md").read_text()


def test_a_budget_on_the_toy_exports_a_shorter_toy_stack(tmp_path):
    search, out = searched(
        tmp_path, "toy", (10, 6), "--methods", "theseus+warmup+kd,kd", "--budget", "params=0.5,steps=5"
    )
    assert search["predicted_ratio"] <= 0.5 and search["params_ratio"] == pytest.approx(search["predicted_ratio"])
    kept = json.loads((out / "model" / "config.json").read_text())["num_blocks"]
    sizes = [3, 3, 2]  # the toy's groups of its 8 blocks
    assert kept == sum(
        size if name == "keep" else 0 if name == "skip" else 1
        for size, name in zip(sizes, search["chosen"].values(), strict=True)
    )


def test_a_searched_baseline_trains_the_architecture_theseus_trains_and_the_search_measures_its_export(tmp_path):
    methods = "kd+searched,theseus+warmup+kd,truncated+searched,kd"
    search, out = searched(tmp_path, "toy", (10, 6), "--methods", methods, "--budget", "params=0.5,steps=5")
    report = json.loads((out / "report.json").read_text())
    models = report["models"]
    assert list(models) == [
        "predecessor",
        "baseline:kd+searched",
        "theseus",
        "baseline:truncated+searched",
        "baseline:kd",
    ]
    # one choice for every method that uses it: the same architecture, whatever trained it
    searched_parameters = {models[key]["parameters"] for key in ("baseline:kd+searched", "theseus")}
    assert searched_parameters == {models["baseline:truncated+searched"]["parameters"]}
    assert {"baseline:kd+searched", "baseline:truncated+searched", "replacing", "warmup"} <= set(report["phases"])
    # the search measures the model it exports, Theseus' (listed second), as predicted
    assert search["model"] == "theseus" and search["measured_latency_ratio"] == pytest.approx(1 / report["speedup"])
    assert search["params_ratio"] == pytest.approx(search["predicted_ratio"], rel=1e-9)
    kept = json.loads((out / "model" / "config.json").read_text())["num_blocks"]
    sizes = [3, 3, 2]  # the toy's groups of its 8 blocks
    assert kept == sum(
        size if name == "keep" else 0 if name == "skip" else 1
        for size, name in zip(sizes, search["chosen"].values(), strict=True)
    )
    assert "The successors of theseus were searched" in (out / "report.md").read_text()


def test_a_budget_that_names_its_choice_trains_that_choice_and_a_choice_it_cannot_build_is_refused(tmp_path, capsys):
    search, _ = searched(tmp_path, "toy", (10, 6), "--methods", "theseus", "--budget", "params=0.5,steps=3")
    given = {path: "skip" for path in search["chosen"]} | {next(iter(search["chosen"])): "keep"}
    assert given != search["chosen"]
    config = tmp_path / "given.json"
    phases = {"predecessor": {"steps": 10, "eval_every": 5}, "replacing": {"steps": 6, "eval_every": 2}}
    config.write_text(json.dumps({**phases, "steps_to_one": 3, "budget": {"params": 0.5, "steps": 3, "chosen": given}}))
    out = tmp_path / "given"
    args = ["compress", "--recipe", "toy", "--config", str(config), "--no-progress", "--methods", "kd+searched"]
    assert cli.main([*args, "--out", str(out)]) == 0
    record = json.loads((out / "report.json").read_text())["search"]
    assert record["chosen"] == given and record["given"] is True and record["model"] == "baseline:kd+searched"
    assert "the recipe's choice (budget.chosen), priced under a params budget" in (out / "report.md").read_text()

    bad = {**given, next(iter(given)): "mobilenet"}
    config.write_text(json.dumps({**phases, "steps_to_one": 3, "budget": {"params": 0.5, "chosen": bad}}))
    assert cli.main([*args, "--out", str(tmp_path / "bad")]) == 2
    error = capsys.readouterr().err
    assert "budget chosen: group" in error and "has no candidate 'mobilenet'" in error
    assert len(error.strip().splitlines()) == 1 and not (tmp_path / "bad").exists()
    config.write_text(json.dumps({"budget": {"params": 0.5, "chosen": ["skip"]}}))
    assert cli.main([*args, "--out", str(tmp_path / "bad")]) == 2
    assert "budget chosen names a candidate per group" in capsys.readouterr().err


def test_a_latency_search_measures_its_choices_and_keeps_one_measured_within_the_budget(tmp_path):
    search, out = searched(tmp_path, "toy", (10, 6), "--methods", "theseus", "--budget", "latency=0.5,steps=5")
    trail = search["measured_choices"]
    assert trail and trail[0]["budget_given"] == 0.5  # the solver's own choice is measured first
    seen = {}  # a choice met again by the solver keeps its one measurement
    assert all(
        seen.setdefault(str(entry["chosen"]), entry["measured_ratio"]) == entry["measured_ratio"] for entry in trail
    )
    taken = next(entry for entry in trail if entry["chosen"] == search["chosen"])
    assert search["predicted_ratio"] == taken["predicted_ratio"]
    within = [entry for entry in trail if entry["measured_ratio"] <= 0.5]
    assert search["within_budget"] == bool(within)
    if within:  # timing decides which: whatever it measured, the best-scoring choice within the budget is taken
        assert taken == max(within, key=lambda entry: entry["score"])
    assert not any("assessed" in entry for entry in trail)
    met = [entry["chosen"] for entry in trail]  # every uniform choice with something to train is measured
    trains = {name for path in search["candidates"] for name, c in search["candidates"][path].items() if c["params"]}
    assert all(dict.fromkeys(search["chosen"], name) in met for name in set(search["uniform"]) & trains - {"keep"})
    assert dict.fromkeys(search["chosen"], "skip") not in met
    beside = [entry for entry in trail if entry["budget_given"] is None]
    assert all(len(set(entry["chosen"].values())) == 1 for entry in beside)
    text = (out / "report.md").read_text()
    assert "assembled and measured" in text and ("alternatives were measured beside" in text) == bool(beside)


def test_a_budget_on_a_graph_exports_an_ordinary_gcn(tmp_path, monkeypatch):
    """The gnn family's candidates (keep, skip, one, linear, mean): any choice converts back into a GCN that
    reloads."""
    search, out = searched(
        tmp_path, "gcn-karate", (5, 4), "--methods", "theseus,truncated", "--budget", "params=0.8,steps=3"
    )
    assert len(search["chosen"]) == 2 and search["predicted_ratio"] <= 0.8
    assert all("skip" not in names for path, names in search["candidates"].items() if path.endswith("[3:6]"))
    assert search["params_ratio"] == pytest.approx(search["predicted_ratio"], rel=1e-9)
    exported = json.loads((out / "model" / "config.json").read_text())
    kept = sum(3 if name == "keep" else 0 if name == "skip" else 1 for name in search["chosen"].values())
    assert exported["num_layers"] == kept  # an ordinary GCN of as many layers as the choice keeps
    assert graphs.load_exported(out / "model", "gcn").num_layers == kept
    ratios = [point["predicted_ratio"] for point in search["frontier"]]
    assert ratios == sorted(ratios) and all(point["predicted_ratio"] <= point["budget"] for point in search["frontier"])
    scores = [point["score"] for point in search["frontier"]]
    assert scores == sorted(scores)  # a larger budget never chooses worse
    assert search["uniform"]["keep"]["predicted_ratio"] == pytest.approx(1.0) and "one" in search["uniform"]
    # every choice the plot shows is assembled and measured; parameters are exact, so they equal the prediction
    for point in [*search["frontier"], *search["uniform"].values()]:
        assert point["params_ratio"] == pytest.approx(point["predicted_ratio"], rel=1e-9)
        assert point["measured_latency_ratio"] > 0
    assert (out / "search.png").stat().st_size > 0


def test_a_graph_search_that_chooses_a_cheaper_layer_exports_what_load_exported_rebuilds(tmp_path, monkeypatch):
    """Scores that favour ``mean`` in the first group and ``one`` in the second: the GCN exported holds a `MeanConv`
    beside a ``GCNConv``, its config lists them, and the zoo's loader rebuilds it (strictly, as the export checked)."""
    from theseus_core.search import CandidateLibrary

    wanted = {"steps[0:3]": "mean", "steps[3:6]": "one"}

    def scores(library, batches, forward):
        return {key: 0.0 if wanted[key[0]] == key[1] else -1.0 for key in library.successors}

    monkeypatch.setattr(CandidateLibrary, "scores", scores)
    search, out = searched(tmp_path, "gcn-karate", (5, 4), "--methods", "theseus", "--budget", "params=0.8,steps=2")
    assert search["chosen"] == wanted
    config = json.loads((out / "model" / "config.json").read_text())
    hidden = config["hidden_channels"]
    assert config[gnn.LAYER_KINDS] == [
        {"kind": "mean", "in_channels": config["in_channels"], "out_channels": hidden},
        None,
    ]
    model = graphs.load_exported(out / "model", "gcn")
    assert [type(conv).__name__ for conv in model.convs] == ["MeanConv", "GCNConv"]


def test_the_library_is_built_on_the_searchs_device_whatever_the_predecessors(monkeypatch):
    """The check builds the library from a predecessor fresh on the CPU; on a GPU its candidates must be on the
    GPU with the batches they are verified and timed on. A device that is not the CPU is stood in for by a spy."""
    from torch import nn

    from theseus_zoo.recipes import get_recipe
    from theseus_zoo.tasks import build_task
    from theseus_zoo.training.search import BudgetSearch

    recipe = get_recipe("toy").with_overrides({"budget": {"latency": 0.5}})
    task = build_task(recipe.family, recipe.options, recipe.seed)
    moved = []
    to = nn.Module.to
    monkeypatch.setattr(nn.Module, "to", lambda self, *args, **kwargs: moved.append(args) or to(self, *args, **kwargs))
    BudgetSearch(task, recipe, torch.device("cpu")).library(task.build_predecessor())
    assert any(args and str(args[0]) == "cpu" for args in moved)


@pytest.mark.parametrize("progress", [True, False])
def test_the_search_shows_its_distillation_and_its_measurements_as_progress_bars(capsys, monkeypatch, progress):
    from theseus_zoo.recipes import get_recipe
    from theseus_zoo.tasks import build_task
    from theseus_zoo.training.search import BudgetSearch

    monkeypatch.delenv("TQDM_DISABLE", raising=False)  # what --no-progress sets for the process
    recipe = get_recipe("toy").with_overrides({"budget": {"latency": 0.5, "steps": 3}})
    task = build_task("toy", {}, 0)
    search = BudgetSearch(task, recipe, torch.device("cpu"))
    predecessor = task.build_predecessor()
    search.run(predecessor, search.check(predecessor), progress=progress)
    err = capsys.readouterr().err
    assert ("search: distil" in err and "search: measure choices" in err) == progress
    assert progress or "search:" not in err


def test_a_resumed_search_keeps_its_choice_without_measuring_the_budget_again(tmp_path, monkeypatch):
    """Measured again on resume, a latency near the budget (a shared machine's noise) refused a run whose
    checkpoint already held the choice it was training."""
    from theseus_zoo.training.run import Run
    from theseus_zoo.training.search import BudgetSearch

    train = Run._train

    def interrupted(self, method, context):
        raise KeyboardInterrupt  # after the search, whose choice the checkpoint now holds

    monkeypatch.setattr(Run, "_train", interrupted)
    config = tmp_path / "toy.json"
    phases = {"predecessor": {"steps": 4, "eval_every": 4}, "replacing": {"steps": 4, "eval_every": 4}}
    config.write_text(json.dumps({**phases, "steps_to_one": 2}))
    args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(tmp_path / "run"), "--no-progress"]
    args += ["--methods", "theseus", "--budget", "latency=0.5,steps=2"]
    assert cli.main(args) == 130
    chosen = session.read_checkpoint(tmp_path / "run" / "checkpoint.pt")["search"]["chosen"]

    def measures(self, predecessor):
        raise AssertionError("the budget was checked again")

    monkeypatch.setattr(Run, "_train", train)
    monkeypatch.setattr(BudgetSearch, "check", measures)
    assert cli.main([*args, "--resume"]) == 0
    assert json.loads((tmp_path / "run" / "report.json").read_text())["search"]["chosen"] == chosen


def test_a_search_whose_distillation_diverged_says_a_lower_lr_is_a_new_run(tmp_path, monkeypatch, capsys):
    from theseus_core.search import CandidateLibrary

    scores = CandidateLibrary.scores

    def diverged(library, *args, **kwargs):
        found = scores(library, *args, **kwargs)
        return {**found, next(key for key in found if key[1] != "keep"): float("nan")}

    monkeypatch.setattr(CandidateLibrary, "scores", diverged)
    config = tmp_path / "toy.json"
    phases = {"predecessor": {"steps": 4, "eval_every": 2}, "replacing": {"steps": 2}, "steps_to_one": 1}
    config.write_text(json.dumps(phases))
    args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(tmp_path / "run"), "--no-progress"]
    assert cli.main([*args, "--methods", "theseus", "--budget", "params=0.5,steps=2,lr=0.5"]) != 0
    (error,) = [line for line in capsys.readouterr().err.splitlines() if "diverged" in line]
    assert "scored nan after 2 steps at lr 0.5" in error and "--predecessor-from this run's directory" in error
    monkeypatch.undo()  # as advised: a new run at a lower lr, the predecessor taken from the one that stopped
    again = [*args[:-3], "--out", str(tmp_path / "again"), "--predecessor-from", str(tmp_path / "run"), "--no-progress"]
    assert cli.main([*again, "--methods", "theseus", "--budget", "params=0.5,steps=2,lr=0.1"]) == 0
    logged = [json.loads(line)["phase"] for line in (tmp_path / "again" / "metrics.jsonl").read_text().splitlines()]
    assert "predecessor" not in logged and "replacing" in logged  # the predecessor taken, not fine-tuned again
