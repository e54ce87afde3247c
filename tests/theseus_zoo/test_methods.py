"""theseus_zoo.methods: one vocabulary of methods for the command, the recipes and the benchmarks."""

import json
import re
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.compare import method_overrides as compare_overrides
from benchmarks.compare import model_of
from theseus_zoo import cli
from theseus_zoo.methods import (
    METHODS,
    MethodSpec,
    parse_method,
    register_method,
    report_keys,
    split_methods,
    uses_search,
)
from theseus_zoo.recipes import get_recipe

TINY = {
    "predecessor": {"steps": 20, "eval_every": 10},
    "replacing": {"steps": 20, "eval_every": 10},
    "steps_to_one": 10,
    "patience": None,
}

segment_names = {name.removeprefix("+"): name.startswith("+") for name in METHODS.names()}
values = st.one_of(st.integers(-5, 5), st.sampled_from([0.5, 1e-4, 2.0]), st.sampled_from(["head", "constant"]))


@st.composite
def method_names(draw):
    """A name of theseus with any modifiers and arguments, as the grammar allows (arguments unchecked here)."""
    modifiers = draw(st.lists(st.sampled_from(["kd", "warmup", "unfreeze", "soft"]), unique=True, max_size=3))
    parts = []
    for name in ["theseus", *modifiers]:
        keys = draw(
            st.lists(
                st.sampled_from(sorted(METHODS.get(("+" if name != "theseus" else "") + name).parameters) or ["_"]),
                unique=True,
                max_size=2,
            )
        )
        keys = [key for key in keys if key != "_"]
        arguments = ",".join(f"{key}={json.dumps(draw(values)).strip(chr(34))}" for key in keys)
        parts.append(f"{name}({arguments})" if keys else name)
    return "+".join(parts)


@given(method_names())
def test_a_name_reads_back_as_it_is_spelled(name):
    parsed = parse_method(name)
    assert str(parse_method(str(parsed))) == str(parsed)
    assert parsed.base == "theseus" and len(parsed.modifiers) == name.count("+")


def test_a_list_of_names_splits_on_the_commas_outside_parentheses():
    assert split_methods("theseus+warmup+kd, kd(alpha=0.7,temperature=4),truncated") == [
        "theseus+warmup+kd",
        "kd(alpha=0.7,temperature=4)",
        "truncated",
    ]


def test_arguments_set_fields_for_their_method_alone():
    recipe = get_recipe("toy").with_overrides({"methods": ["kd(alpha=0.7,temperature=4)", "kd", "theseus+soft"]})
    assert recipe.for_method("kd(alpha=0.7,temperature=4)").kd_alpha == 0.7
    assert recipe.for_method("kd").kd_alpha == recipe.kd_alpha == 0.5
    assert recipe.for_method("theseus+soft").kd_weight == 1.0 and recipe.kd_weight == 0.0
    assert [key for key, _ in report_keys(recipe.methods)] == [
        "baseline:kd(alpha=0.7,temperature=4)",
        "baseline:kd",
        "theseus",
    ]


@pytest.mark.parametrize(
    "overrides, method, message",
    [
        ({"kd_weight": 0.5}, "theseus+kd", "+kd ignores kd_weight, which the recipe sets too (kd_weight=0.5)"),
        ({"unfreeze_at_one": "head"}, "theseus+unfreeze", "+unfreeze sets unfreeze_at_one, which the recipe sets"),
        ({"kd_alpha": 0.9}, "kd(alpha=0.7)", "kd sets kd_alpha, which the recipe sets too (kd_alpha=0.9)"),
        ({}, "kd(beta=1)", "kd has no argument 'beta' (it takes: alpha, temperature)"),
        ({}, "theseus+unfreeze(which=some)", "unfreeze_at_one must be null or one of head, all, got 'some'"),
    ],
)
def test_a_field_set_by_the_recipe_and_by_a_method_is_refused_in_one_line_before_any_work(
    tmp_path, capsys, overrides, method, message
):
    with pytest.raises(ValueError, match="^method .*" + re.escape(message)):
        get_recipe("toy").with_overrides({**overrides, "methods": [method, "truncated"]})
    config, out = tmp_path / "config.json", tmp_path / "run"
    config.write_text(json.dumps({**TINY, **overrides}))
    args = ["compress", "--recipe", "toy", "--config", str(config), "--methods", f"{method},truncated"]
    assert cli.main([*args, "--out", str(out), "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1
    assert not out.exists()


def test_baselines_beside_methods_are_refused_not_ignored():
    with pytest.raises(ValueError, match="baselines would be ignored beside methods"):
        get_recipe("gcn-polblogs").with_overrides({"baselines": ["scratch"]})
    assert get_recipe("gcn-polblogs").with_overrides({"baselines": ["scratch"], "methods": None}).method_names() == (
        "theseus",
        "scratch",
    )


def test_the_benchmarks_train_a_name_as_the_command_does():
    """One definition per name: a comparison's ``theseus+kd`` is the command's (the kd loss), not another."""
    recipe = get_recipe("toy").with_overrides(compare_overrides("theseus+kd"))
    assert recipe.method_names() == ("theseus+kd",) and recipe.for_method("theseus+kd").kd_weight == 0.0
    assert model_of("theseus+kd") == "theseus" and model_of("kd") == "baseline:kd"


def test_a_modifier_names_the_bases_it_applies_to_and_a_modified_baseline_reports_under_its_full_name():
    parsed = parse_method("kd(alpha=0.7)+searched")
    assert parsed.flags == ("searched",) and str(parsed) == "kd(alpha=0.7)+searched"
    assert [key for key, _ in report_keys(["kd", "kd+searched", "truncated+searched", "kd(alpha=0.7)+searched"])] == [
        "baseline:kd",
        "baseline:kd+searched",
        "baseline:truncated+searched",
        "baseline:kd(alpha=0.7)+searched",
    ]
    assert [uses_search(name) for name in ("theseus", "theseus+warmup+kd", "kd", "kd+searched")] == [
        True,
        True,
        False,
        True,
    ]
    for bad, message in [
        ("direct+searched", "+searched applies to truncated, kd only; direct takes no modifier"),
        ("truncated+kd", "+kd applies to theseus only; truncated takes +searched"),
        ("kd+searched+searched", "names a modifier twice"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_method(bad)
    recipe = get_recipe("toy").with_overrides({"methods": ["kd+searched"], "budget": {"params": 0.5}})
    assert recipe.method_names() == ("kd+searched",)
    with pytest.raises(ValueError, match="give a budget"):
        get_recipe("toy").with_overrides({"methods": ["theseus", "truncated+searched"]})


def test_a_registered_name_cannot_be_registered_again_and_needs_an_implementation():
    with pytest.raises(KeyError, match="already registered"):
        register_method(MethodSpec("kd", "again", "theseus_zoo.training.methods:Baseline"))
    with pytest.raises(ValueError, match="needs an implementation"):
        MethodSpec("mine", "no implementation")
    with pytest.raises(ValueError, match="a modifier has no implementation"):
        MethodSpec("+mine", "a modifier", "theseus_zoo.training.methods:Baseline")


PLUGIN = textwrap.dedent(
    '''
    """A method defined outside theseus: the truncated model, trained on the task loss for half the budget."""
    import dataclasses

    from theseus_zoo.methods import MethodSpec, register_method
    from theseus_zoo.training.methods import Method, Objective, Stage, Trainee, task_loss
    from theseus_zoo.training.optimization import predecessor_parameters


    class HalfBudget(Method):
        def build(self, context):
            model = context.task.truncated(context.predecessor)
            phase = dataclasses.replace(context.recipe.replacing, steps=context.recipe.replacing.steps // 2)

            def objective():
                return Objective(predecessor_parameters(model), task_loss(context.task))

            return Trainee(model, [Stage(self.name, phase, objective)], lambda: model)


    register_method(MethodSpec("half-budget", "truncated on half the steps", HalfBudget))
    '''
)


def test_a_method_from_an_entry_point_trains_through_methods(tmp_path, monkeypatch, capsys):
    (tmp_path / "theseus_test_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "theseus_test_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: theseus-test-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[theseus_zoo.methods]\nhalf = theseus_test_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(METHODS, "_entries", dict(METHODS._entries))  # the plugin's entry leaves with the test
    monkeypatch.setattr(METHODS, "_discovered", False)  # entry points are read again
    assert "half-budget" in METHODS.names()
    config, out = tmp_path / "tiny.json", tmp_path / "run"
    config.write_text(json.dumps(TINY))
    args = ["compress", "--recipe", "toy", "--config", str(config), "--out", str(out), "--no-progress"]
    assert cli.main([*args, "--methods", "truncated,half-budget"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert list(report["models"]) == ["predecessor", "baseline:truncated", "half-budget"]
    assert report["phases"]["half-budget"]["steps"] == TINY["replacing"]["steps"] // 2
    assert "half-budget" in capsys.readouterr().out
