"""`benchmarks.step_cost`: each method's step is the trainer's (what it trains, when), timed and tabulated."""

import json

import pytest
import torch

from benchmarks import step_cost
from theseus_zoo.recipes import get_recipe
from theseus_zoo.tasks import build_task


def changed(model, before):
    return {name for name, parameter in model.named_parameters() if not torch.equal(parameter, before[name])}


def test_a_step_trains_what_the_trainer_would_and_unfreezing_waits_for_p_one(tmp_path):
    recipe = get_recipe("toy")
    task = build_task(recipe.family, recipe.options, recipe.seed)
    predecessor = task.build_predecessor()
    batch = task.collate(task.dataset("train")[:8])
    step, model = step_cost.method_step("theseus+unfreeze", "toy", predecessor, batch)
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    step(0.5)
    mixed = changed(model, before)
    assert mixed and all("successor" in name for name in mixed)  # only successors train before p = 1
    step(1.0)
    assert changed(model, before) - mixed - {n for n in before if "successor" in n}  # then the rest too
    step, model = step_cost.method_step("truncated", "toy", predecessor, batch)
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    step(0.5)
    assert changed(model, before) == set(before)  # fine-tuning trains every parameter


def test_the_command_writes_a_ratio_per_method_and_rate(tmp_path):
    args = ["--recipe", "toy", "--methods", "theseus", "kd", "--rates", "0.5", "1", "--rounds", "1"]
    step_cost.main([*args, "--out", str(tmp_path)])
    results = json.loads((tmp_path / "step-cost-toy.json").read_text())
    assert results["theseus p=0.5"]["ratio_to_theseus"] == 1.0
    assert results["kd p=1"]["median_seconds"] > 0


def test_with_few_labels_only_a_distilling_step_also_scores_the_unlabelled_batch():
    recipe = get_recipe("toy")
    task = build_task(recipe.family, recipe.options, recipe.seed)
    predecessor = task.build_predecessor()
    train = task.dataset("train")
    batch, unlabelled = task.collate(train[:8]), task.collate(train[8:16])

    def after_one_step(method, unlabelled_batch):
        torch.manual_seed(0)
        step, model = step_cost.method_step(method, "toy", predecessor, batch, unlabelled_batch)
        step(1.0)
        return {name: parameter.detach().clone() for name, parameter in model.named_parameters()}

    def same(a, b):
        return all(torch.equal(a[name], b[name]) for name in a)

    assert not same(after_one_step("kd", None), after_one_step("kd", unlabelled))  # its soft loss sees them
    assert same(after_one_step("truncated", None), after_one_step("truncated", unlabelled))  # labels only


def test_a_recipe_with_a_budget_is_refused_rather_than_timed_on_another_architecture():
    recipe = get_recipe("toy").with_overrides({"budget": {"params": 0.5}})
    task = build_task(recipe.family, recipe.options, recipe.seed)
    batch = task.collate(task.dataset("train")[:8])
    with pytest.raises(ValueError, match="has a budget"):
        step_cost.stage_steps("theseus", recipe, task.build_predecessor(), batch)
