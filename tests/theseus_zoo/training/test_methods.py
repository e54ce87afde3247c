"""`theseus_zoo.training.methods`: each method trains what it says with the loss it says, on the toy."""

import json
import re

import pytest
import torch
import torch.nn.functional as F

from theseus_core.distillation import prediction_loss
from theseus_zoo import cli
from theseus_zoo.methods import parse_method
from theseus_zoo.recipes import get_recipe
from theseus_zoo.tasks import build_task
from theseus_zoo.training.loop import optimizer_for
from theseus_zoo.training.methods import BlockwiseWarmup, Context, Theseus, methods_of, split_budget
from theseus_zoo.training.optimization import check_unfreeze


@pytest.fixture
def context():
    recipe = get_recipe("toy").with_overrides({"replacing": {"steps": 40}, "steps_to_one": 20})
    task = build_task(recipe.family, recipe.options, recipe.seed)
    torch.manual_seed(0)
    predecessor = task.build_predecessor()
    return Context(task, recipe, predecessor)


def built(context, name):
    """Method ``name`` as a run of ``context``'s recipe builds it, and the trainee: with the recipe as it trains it."""
    recipe = context.recipe.with_overrides({"methods": [name]})
    (method,) = methods_of(recipe)
    own = Context(context.task, recipe.for_method(name), context.predecessor)
    return method.build(own), own


def batch_of(context, size=16):
    return context.task.collate(context.task.dataset("train")[:size])


def snapshot(model):
    return {name: parameter.detach().clone() for name, parameter in model.named_parameters()}


def moved(model, before):
    return {name for name, parameter in model.named_parameters() if not torch.equal(parameter, before[name])}


def test_warmup_moves_only_the_successors_and_their_projections(context):
    trainee, _ = built(context, "theseus+warmup")
    warmup, replacing = trainee.stages
    assert (warmup.name, replacing.name) == ("warmup", "replacing")
    objective = warmup.objective()
    model, before = trainee.model, snapshot(trainee.model)
    optimizer = optimizer_for(model, objective, warmup.phase)
    model.train()
    for _ in range(3):
        value, _ = objective.loss(model, batch_of(context))
        value.backward()
        optimizer.step()
        optimizer.zero_grad()
    successors = {name for name, _ in model.named_parameters() if ".successor." in f".{name}"}
    assert moved(model, before) and moved(model, before) <= successors
    assert moved(model, before) == successors  # every successor learns in the same pass


def test_warmup_fits_each_successor_to_its_groups_real_input_and_output(context):
    trainee, _ = built(context, "theseus+warmup")
    objective = trainee.stages[0].objective()
    assert isinstance(objective.loss, BlockwiseWarmup)
    model, theseus, batch = trainee.model, objective.theseus, batch_of(context)
    predecessor = context.predecessor.eval()
    blocks = list(predecessor.blocks)
    seen = {}
    handles = [
        block.register_forward_hook(lambda module, args, output, index=index: seen.__setitem__(index, (args, output)))
        for index, block in enumerate(blocks)
    ]
    with torch.no_grad():
        predecessor(batch[0])
    for handle in handles:
        handle.remove()
    sizes = [len(site.predecessor.layers) for site in theseus.sites]
    model.eval()  # no dropout in the successors either: the loss is then a function of the weights alone
    expected, first = 0.0, 0
    for site, size in zip(theseus.sites, sizes, strict=True):
        group_input, group_output = seen[first][0][0], seen[first + size - 1][1]
        expected = expected + F.mse_loss(site.successor(group_input), group_output)
        first += size
    value, logits = objective.loss(model, batch)
    torch.testing.assert_close(value, expected)
    torch.testing.assert_close(logits, predecessor(batch[0]))  # the predecessor's own logits: every group on it
    assert model.training is False  # the loss leaves the mode as it found it


def test_plus_kd_changes_the_loss_only_through_the_predecessors_logits(context):
    trainee, _ = built(context, "theseus+kd")
    objective = trainee.stages[0].objective()
    model, theseus, batch = trainee.model, objective.theseus, batch_of(context)
    alpha, temperature = context.recipe.kd_alpha, context.recipe.kd_temperature
    model.eval()
    theseus.eval_route = "successor"
    value, logits = objective.loss(model, batch)
    teacher_logits = context.predecessor.eval()(batch[0])
    task_part = alpha * context.task.criterion(logits, batch)
    torch.testing.assert_close(value, task_part + (1 - alpha) * prediction_loss(logits, teacher_logits, temperature))
    plain = built(context, "theseus")[0].stages[0].objective()
    plain_value, plain_logits = plain.loss(model, batch)
    torch.testing.assert_close(plain_logits, logits)
    torch.testing.assert_close(plain_value * alpha, task_part)  # without the teacher, the task loss alone


def test_plus_unfreeze_trains_everything_outside_the_groups_from_p_one(context):
    trainee, own = built(context, "theseus+unfreeze")
    objective = trainee.stages[0].objective()
    inside = {id(p) for site in objective.theseus.sites for p in site.parameters()}
    outside = [p for p in trainee.model.parameters() if id(p) not in inside]
    assert {id(p) for p in objective.late} == {id(p) for p in outside} and outside
    assert context.recipe.unfreeze_at_one is None and own.recipe.unfreeze_at_one == "all"  # for itself


def test_plus_unfreeze_head_trains_the_head_alone_from_p_one(context):
    trainee, _ = built(context, "theseus+unfreeze(which=head)")
    everything, _ = built(context, "theseus+unfreeze")
    head = {id(p) for p in trainee.stages[0].objective().late}
    outside = {id(p) for p in everything.stages[0].objective().late}
    assert head and len(head) < len(outside)


def test_warmup_takes_its_steps_from_the_replacing_budget(context):
    warmup, replacing, steps_to_one = split_budget(context.recipe)
    assert warmup.steps + replacing.steps == context.recipe.replacing.steps
    assert warmup.steps == round(context.recipe.replacing.steps * context.recipe.warmup_fraction)
    assert 1 <= steps_to_one <= replacing.steps


def test_the_first_theseus_variant_is_the_runs_and_later_ones_keep_their_names():
    recipe = get_recipe("toy").with_overrides({"methods": ["theseus+warmup+kd", "kd", "theseus+unfreeze", "truncated"]})
    methods = methods_of(recipe)
    assert [method.name for method in methods] == ["theseus", "baseline:kd", "theseus+unfreeze", "baseline:truncated"]
    assert methods[0].flags == ("warmup", "kd") and methods[2].suffix == ":theseus+unfreeze"
    assert [method.full_name for method in methods] == list(recipe.methods)
    with pytest.raises(ValueError, match="first"):  # plain theseus after a variant would take the variant's key
        get_recipe("toy").with_overrides({"methods": ["theseus+kd", "theseus"]})


@pytest.mark.parametrize(
    "bad, message",
    [
        ("theseus+foo", "unknown modifier 'foo'"),
        ("kd+warmup", "+warmup applies to theseus only; kd takes +searched"),
        ("scratch+kd", "+kd applies to theseus only; scratch takes no modifier"),
        ("distil", "unknown method 'distil'"),
        ("theseus+kd+kd", "twice"),
    ],
)
def test_unknown_methods_are_refused_in_one_line_before_any_work(tmp_path, capsys, bad, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_method(bad)
    out = tmp_path / "run"
    assert cli.main(["compress", "--recipe", "toy", "--methods", f"{bad},kd", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1
    assert not out.exists()


def test_a_run_of_composed_methods_reports_each_with_its_stages(tmp_path):
    config = tmp_path / "tiny.json"
    tiny = {
        "predecessor": {"steps": 20, "eval_every": 10},
        "replacing": {"steps": 30, "eval_every": 10},
        "steps_to_one": 20,
        "patience": None,
    }
    config.write_text(json.dumps(tiny))
    out = tmp_path / "run"
    args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(out), "--no-progress"]
    assert cli.main([*args, "--methods", "theseus+warmup+kd,kd,theseus+unfreeze"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert list(report["models"]) == ["predecessor", "theseus", "baseline:kd", "theseus+unfreeze"]
    markdown = (out / "report.md").read_text()  # the run's "theseus" named by the variant it is
    assert "| theseus (theseus+warmup+kd) |" in markdown and "| baseline:kd |" in markdown
    phases = report["phases"]
    assert {"warmup", "replacing", "baseline:kd", "replacing:theseus+unfreeze"} <= set(phases)
    assert phases["warmup"]["steps"] + phases["replacing"]["steps"] == tiny["replacing"]["steps"]
    assert set(report["comparisons"]) == {"predecessor", "baseline:kd", "theseus+unfreeze"}
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {r["rate"] for r in records if r["phase"] == "warmup"} == {0.0}


@pytest.mark.parametrize("which", ["all", "head"])
@pytest.mark.parametrize(("recipe_name", "refuses"), [("toy", False), ("gcn-karate", True)])  # GCN: all in groups
def test_the_unfreeze_check_refuses_before_training_exactly_what_the_stage_would(recipe_name, refuses, which):
    recipe = get_recipe(recipe_name).with_overrides({"unfreeze_at_one": which})
    task = build_task(recipe.family, recipe.options, recipe.seed)
    predecessor = task.build_predecessor()
    before = snapshot(predecessor)

    def refused(call):
        try:
            call()
        except ValueError:
            return True
        return False

    early = refused(lambda: check_unfreeze(predecessor, which, task))
    assert moved(predecessor, before) == set() and next(predecessor.parameters()).device.type == "cpu"
    late = refused(
        lambda: (
            Theseus(parse_method("theseus"), "theseus").build(Context(task, recipe, predecessor)).stages[0].objective()
        )
    )
    assert early == late == refuses


def test_warmup_without_a_budget_to_split_is_refused_before_the_predecessor_trains(tmp_path, capsys):
    config = tmp_path / "one-step.json"
    config.write_text(json.dumps({"replacing": {"steps": 1, "eval_every": 1}, "steps_to_one": 1}))
    out = tmp_path / "run"
    args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(out), "--no-progress"]
    assert cli.main([*args, "--methods", "kd,theseus+warmup"]) == 2
    assert "theseus: +warmup splits the replacing budget, and replacing.steps is 1" in capsys.readouterr().err
    assert not (out / "checkpoint.pt").exists()


def test_a_methods_numbers_do_not_depend_on_the_methods_trained_before_it(tmp_path):
    """Each method draws from a stream of its own (initialisations, dropout masks): ``kd`` alone and after other
    methods logs the same bytes; data order is shared by design."""
    config = tmp_path / "tiny.json"
    config.write_text(
        json.dumps(
            {
                "predecessor": {"steps": 20, "eval_every": 10},
                "replacing": {"steps": 20, "eval_every": 10},
                "steps_to_one": 10,
                "patience": None,
            }
        )
    )
    logged = {}
    for methods in ("kd", "truncated,scratch,theseus+warmup+kd,kd"):
        out = tmp_path / methods.replace(",", "-")
        args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(out), "--no-progress"]
        assert cli.main([*args, "--methods", methods]) == 0
        lines = (out / "metrics.jsonl").read_text().splitlines()
        logged[methods] = [line for line in lines if json.loads(line)["phase"] == "baseline:kd"]
        report = json.loads((out / "report.json").read_text())
        logged[methods].append(json.dumps(report["models"]["baseline:kd"]["test"]))
    assert logged["kd"] == logged["truncated,scratch,theseus+warmup+kd,kd"] and len(logged["kd"]) > 2
