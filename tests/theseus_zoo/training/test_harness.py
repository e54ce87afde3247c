"""The training harness as the reference ``run_glue.py`` sets it up, and the extensions beyond the paper."""

import copy
import dataclasses
import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from theseus_zoo import cli
from theseus_zoo.recipes import Phase, get_recipe
from theseus_zoo.tasks import toy
from theseus_zoo.training.optimization import data_order_generator, optimizer_groups, replacing_schedule

TINY = {
    "predecessor": {"steps": 20, "eval_every": 10},
    "replacing": {"steps": 30, "eval_every": 10},
    "steps_to_one": 10,
    "patience": None,
    "baselines": [],
}


def compress(tmp_path, overrides=None, out="run"):
    config = tmp_path / f"{out}.json"
    config.write_text(json.dumps({**TINY, **(overrides or {})}))
    args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(tmp_path / out), "--no-progress"]
    assert cli.main(args) == 0
    records = [json.loads(line) for line in (tmp_path / out / "metrics.jsonl").read_text().splitlines()]
    return json.loads((tmp_path / out / "report.json").read_text()), records


@given(
    steps=st.integers(1, 300),
    warmup_fraction=st.floats(0, 1),
    schedule=st.sampled_from(["linear", "constant"]),
)
def test_learning_rates_are_those_of_the_transformers_schedulers(steps, warmup_fraction, schedule):
    from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

    warmup = int(steps * warmup_fraction)
    phase = Phase(steps=steps, lr=2e-5, lr_schedule=schedule, warmup_steps=warmup)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2e-5)
    if schedule == "linear":
        scheduler = get_linear_schedule_with_warmup(optimizer, warmup, steps)
    else:
        scheduler = get_constant_schedule_with_warmup(optimizer, warmup)
    for step in range(steps):
        assert phase.lr_at(step) == pytest.approx(optimizer.param_groups[0]["lr"], rel=1e-12, abs=1e-20)
        optimizer.step()
        scheduler.step()


def test_a_run_logs_the_learning_rate_it_used_decaying_to_zero(tmp_path):
    report, records = compress(tmp_path, {"replacing": {"steps": 30, "eval_every": 10, "warmup_steps": 5}})
    replacing = [r["lr"] for r in records if r["phase"] == "replacing"]
    phase = Phase(**report["recipe"]["replacing"])
    assert phase.warmup_steps == 5
    assert replacing == [phase.lr_at(step) for step in range(30)]
    assert replacing[0] == 0 and max(replacing) == phase.lr and replacing[-1] == phase.lr / 25


def test_bad_phase_settings_are_refused():
    for bad in (
        {"lr_schedule": "cosine"},
        {"warmup_steps": 11},
        {"weight_decay": -1},
        {"max_grad_norm": 0},
        {"lr": True},
        {"lr": float("inf")},
    ):
        with pytest.raises(ValueError, match=next(iter(bad)).split("_")[0]):
            Phase(**{"steps": 10, "lr": 1e-3, **bad})


def test_gradients_are_clipped_before_every_step(tmp_path, monkeypatch):
    norms = []
    step = torch.optim.AdamW.step

    def recording(self, *args, **kwargs):
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        norms.append(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item())
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording)
    _, records = compress(tmp_path, {"predecessor": {"steps": 20, "eval_every": 10, "max_grad_norm": 0.01}})
    clipped = norms[:20]
    assert max(clipped) <= 0.01 * (1 + 1e-4)
    logged = [r["grad_norm"] for r in records if r["phase"] == "predecessor"]
    assert max(logged) > 0.01  # the norm before clipping is what the log shows
    norms.clear()
    compress(tmp_path, {"predecessor": {"steps": 20, "eval_every": 10, "max_grad_norm": None}}, out="unclipped")
    assert max(norms[:20]) > 0.01


def test_no_weight_decay_on_biases_and_normalization_weights():
    from transformers import BertConfig, BertForSequenceClassification

    model = BertForSequenceClassification(
        BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24)
    )
    decay, no_decay = optimizer_groups(model, list(model.parameters()), 0.01)
    names = {id(p): name for name, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert {names[id(p)] for p in no_decay["params"]} == {
        name for name in names.values() if name.endswith("bias") or "LayerNorm" in name
    }
    assert "bert.embeddings.word_embeddings.weight" in {names[id(p)] for p in decay["params"]}
    subset = [p for p in model.parameters()][:3]  # only the parameters asked for
    assert sum(len(group["params"]) for group in optimizer_groups(model, subset, 0.1)) == 3


def test_each_phase_has_its_own_data_order_and_compression_methods_share_one(tmp_path, monkeypatch):
    seen = []
    collate = toy.ToyTask.collate

    def recording(self, examples):
        if len(examples) == batch_size:  # a training batch, not an evaluation's whole split
            seen.append(torch.stack([x for x, _ in examples]).sum().item())
        return collate(self, examples)

    batch_size = get_recipe("toy").replacing.batch_size
    assert batch_size == get_recipe("toy").predecessor.batch_size

    monkeypatch.setattr(toy.ToyTask, "collate", recording)
    compress(tmp_path, {"baselines": ["truncated"]})
    predecessor, replacing, truncated = seen[:20], seen[20:50], seen[50:80]
    assert not set(predecessor[:5]) & set(replacing[:5])  # no replay of the order the predecessor just fit
    assert replacing == truncated  # a paired comparison: same batches, same order
    first = torch.randperm(100, generator=data_order_generator(0, "predecessor", 0))
    assert not torch.equal(first, torch.randperm(100, generator=data_order_generator(0, "compression", 0)))
    assert not torch.equal(first, torch.randperm(100, generator=data_order_generator(0, "predecessor", 1)))
    assert torch.equal(first, torch.randperm(100, generator=data_order_generator(0, "predecessor", 0)))


def test_schedules_before_and_after_steps_to_one():
    recipe = get_recipe("toy").with_overrides({"steps_to_one": 10, "schedule_base": 0.3})
    curriculum = replacing_schedule(recipe)
    constant = replacing_schedule(recipe.with_overrides({"schedule": "constant"}))
    anti = replacing_schedule(recipe.with_overrides({"schedule": "anti_curriculum"}))
    assert [constant(t) for t in (0, 9, 10, 50)] == [0.3, 0.3, 1.0, 1.0]
    assert anti(0) == pytest.approx(0.7) and anti(9) == pytest.approx(0.0, abs=0.08) and anti(10) == 1.0
    assert curriculum(0) == pytest.approx(0.3) and curriculum(10) == 1.0
    with pytest.raises(ValueError, match="schedule"):
        recipe.with_overrides({"schedule": "cosine"})


def test_unfreeze_at_one_trains_the_head_only_once_p_is_one(tmp_path):
    def heads(out):
        model = toy.ToyStack(**json.loads((tmp_path / out / "model" / "config.json").read_text()))
        model.load_state_dict(torch.load(tmp_path / out / "model" / "model.pt"))
        return model.head.weight

    compress(tmp_path, out="paper")
    compress(tmp_path, {"unfreeze_at_one": "head"}, out="unfrozen")
    compress(tmp_path, {"unfreeze_at_one": "head", "steps_to_one": 30}, out="never")  # p = 1 only after the last step
    assert not torch.equal(heads("paper"), heads("unfrozen"))
    assert torch.equal(heads("paper"), heads("never"))


def test_consistency_loss_is_the_mse_of_successors_to_their_groups_on_the_same_input():
    import theseus_core as th
    from theseus_zoo.training.losses import ConsistencyLoss

    task = toy.ToyTask({}, 0)
    model = task.build_predecessor()
    theseus = th.replace_(model, task.plan(model), seed=0)
    consistency = ConsistencyLoss(theseus)
    inputs = torch.randn(8, toy.NUM_FEATURES)
    theseus.rate = 0.0
    model.train()(inputs)
    assert consistency.terms == []  # no successor ran
    theseus.rate = 1.0
    captured = []
    hooks = [site.register_forward_hook(lambda m, a, o: captured.append((a[0], o))) for site in theseus.sites]
    model(inputs)
    expected = sum(
        torch.nn.functional.mse_loss(output, site.predecessor.eval()(given).detach())
        for site, (given, output) in zip(theseus.sites, captured, strict=True)
    )
    torch.testing.assert_close(consistency.value(), expected)
    consistency.remove()
    for hook in hooks:
        hook.remove()


@pytest.mark.parametrize("extension", [{"consistency_weight": 1.0}, {"kd_weight": 1.0}])
def test_extensions_train_end_to_end_and_cost_time_per_step(tmp_path, extension):
    report, _ = compress(tmp_path, extension)
    assert report["recipe"][next(iter(extension))] == 1.0
    assert report["phases"]["replacing"]["seconds"] > 0


def test_a_run_without_theseus_trains_the_baselines_only(tmp_path):
    report, records = compress(tmp_path, {"theseus": False, "baselines": ["truncated"]})
    assert set(report["models"]) == {"predecessor", "baseline:truncated"}
    assert {r["phase"] for r in records} == {"predecessor", "baseline:truncated"}
    assert not (tmp_path / "run" / "model").exists()


def test_the_pretrained_baseline_is_cut_from_the_model_before_the_predecessor_phase(tmp_path, monkeypatch):
    """``truncated`` starts from the fine-tuned predecessor, ``pretrained`` from a fresh `build_predecessor` (the
    paper's "fine-tuned bottom 6L" row); both then train alike."""
    given = []
    cut = toy.ToyTask.truncated
    monkeypatch.setattr(
        toy.ToyTask, "truncated", lambda self, model: given.append(copy.deepcopy(model)) or cut(self, model)
    )
    report, records = compress(tmp_path, {"theseus": False, "baselines": ["truncated", "pretrained"]})
    assert set(report["models"]) == {"predecessor", "baseline:truncated", "baseline:pretrained"}
    assert {r["phase"] for r in records} == {"predecessor", "baseline:truncated", "baseline:pretrained"}
    fine_tuned, pretrained = (dict(model.named_parameters()) for model in given)
    assert fine_tuned.keys() == pretrained.keys()
    assert all(not torch.equal(fine_tuned[name], pretrained[name]) for name in fine_tuned)
    with pytest.raises(ValueError, match=r"pretrained baseline .* has none"):
        dataclasses.replace(get_recipe("toy"), predecessor=None, baselines=("pretrained",))


def test_reports_carry_standard_errors_and_paired_intervals(tmp_path):
    report, _ = compress(tmp_path, {"baselines": ["truncated"]})
    theseus = report["models"]["theseus"]
    assert 0 < theseus["test_standard_error"] < 0.05 and len(theseus["test_predictions"]) == 1000
    comparison = report["comparisons"]["baseline:truncated"]
    assert comparison["low"] <= comparison["difference"] <= comparison["high"]
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "paired bootstrap interval" in markdown and "Standard errors" in markdown


def test_analyze_runs_the_papers_analyses_on_the_toy_recipe(tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    for analysis in ("sensitivity", "schedules", "budget"):
        out = tmp_path / analysis
        args = ["analyze", "--recipe", "toy", "--config", str(config), "--out", str(out), "--no-progress"]
        extra = ["--budgets", "0.5", "1"] if analysis == "budget" else []
        assert cli.main([*args, "--analysis", analysis, *extra]) == 0
        summary = json.loads((out / f"{analysis}.json").read_text())
        assert (out / f"{analysis}.png").stat().st_size > 0 and (out / f"{analysis}.md").exists()
        if analysis == "sensitivity":
            assert [row["path"] for row in summary["rows"]] == ["blocks[0:3]", "blocks[3:6]", "blocks[6:8]"]
        elif analysis == "schedules":
            assert [row["schedule"] for row in summary["rows"]] == ["curriculum", "constant", "anti_curriculum"]
        else:
            assert [row["steps"] for row in summary["rows"]] == [15, 30]
        assert cli.main([*args, "--analysis", analysis, *extra]) == 2  # exists: --resume or another --out
        assert cli.main([*args, "--analysis", analysis, *extra, "--resume"]) == 0


def test_analyses_and_sweeps_can_start_from_a_finished_runs_predecessor(tmp_path):
    compress(tmp_path, out="source")
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    common = [
        "--recipe",
        "toy",
        "--config",
        str(config),
        "--no-progress",
        "--predecessor-from",
        str(tmp_path / "source"),
    ]
    budget = ["analyze", *common, "--analysis", "budget", "--budgets", "0.5", "--out", str(tmp_path / "budget")]
    sweep = ["sweep", *common, "--grid", "replacing.lr=1e-3", "--out", str(tmp_path / "sweep")]
    assert cli.main(budget) == 0 and cli.main(sweep) == 0
    source = json.loads((tmp_path / "source" / "report.json").read_text())["models"]["predecessor"]["test"]
    for run in (tmp_path / "budget" / "budget-15", tmp_path / "sweep" / "point-00"):
        assert json.loads((run / "report.json").read_text())["models"]["predecessor"]["test"] == source
        phases = {json.loads(line)["phase"] for line in (run / "metrics.jsonl").read_text().splitlines()}
        assert "predecessor" not in phases  # taken, not fine-tuned again


def test_a_run_compresses_the_same_whether_it_fine_tuned_its_predecessor_or_borrowed_it(tmp_path):
    with_baselines = {"baselines": ["truncated"]}
    trained, _ = compress(tmp_path, with_baselines, out="trained")
    config = tmp_path / "borrow.json"
    config.write_text(json.dumps({**TINY, **with_baselines}))
    args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(tmp_path / "borrowed")]
    assert cli.main([*args, "--no-progress", "--predecessor-from", str(tmp_path / "trained")]) == 0
    borrowed = json.loads((tmp_path / "borrowed" / "report.json").read_text())
    for model in ("predecessor", "theseus", "baseline:truncated"):  # dropout masks and draws included
        assert borrowed["models"][model]["test_predictions"] == trained["models"][model]["test_predictions"]


def test_the_replacing_phase_lets_replace_verify_the_surgery_on_the_tasks_example_inputs(tmp_path, monkeypatch):
    from theseus_zoo.training import methods

    seen = []
    replace = methods.th.replace_

    def spying(model, specs, **options):
        seen.append(options)
        return replace(model, specs, **options)

    monkeypatch.setattr(methods.th, "replace_", spying)
    compress(tmp_path)
    (args,), kwargs = seen[0]["example_inputs"], seen[0]["example_kwargs"]
    assert args.shape == (8, toy.NUM_FEATURES) and kwargs == {}
