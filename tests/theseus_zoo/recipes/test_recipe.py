"""`theseus_zoo.recipes.recipe`: what a recipe written by an older version becomes today; a config file read; a bad
phase setting named as the user wrote it."""

import json

import pytest

from theseus_zoo.recipes import Phase, get_recipe, load_overrides, with_defaults


def test_a_recipe_written_before_its_newer_fields_existed_reads_as_today_s():
    recipe = get_recipe("toy").to_dict()
    older = json.loads(json.dumps(recipe))  # as a report or checkpoint keeps it
    del older["refine"], older["kd_weight"], older["replacing"]["max_grad_norm"], older["predecessor"]["lr_schedule"]
    assert with_defaults(older) == json.loads(json.dumps(recipe))


def test_fields_an_older_recipe_set_are_kept():
    older = {**get_recipe("toy").to_dict(), "seed": 7}
    older["replacing"] = {**older["replacing"], "lr": 0.5}
    filled = with_defaults(older)
    assert filled["seed"] == 7 and filled["replacing"]["lr"] == 0.5


def test_a_config_that_cannot_be_read_is_refused_in_one_line(tmp_path):
    """A folder given as --config ended in IsADirectoryError's traceback."""
    with pytest.raises(ValueError, match=r"config file .* cannot be read as a JSON file \(Is a directory\)"):
        load_overrides(tmp_path)
    (tmp_path / "latin.json").write_bytes(b'{"seed": 1, "name": "caf\xe9"}')
    with pytest.raises(ValueError, match=r"latin\.json cannot be read as a JSON file \('utf-8' codec"):
        load_overrides(tmp_path / "latin.json")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"replacing": {"steps": 0}}, "replacing.steps must be an integer >= 1, got 0"),
        ({"predecessor": {"lr": -1.0}}, "predecessor.lr must be a finite number > 0, got -1.0"),
        ({"predecessor": {"warmup_steps": 500}}, "predecessor.warmup_steps must be an integer in [0, steps=400]"),
        ({"refine": {"steps": 10, "lr": 1e-3, "eval_every": 0}}, "refine.eval_every must be an integer >= 1"),
        ({"refine": {"steps": 10}}, "the recipe has no refine phase to take lr from: set refine.lr too"),
        ({"refine": {"eval_every": 5}}, "to take steps and lr from: set refine.steps and refine.lr too"),
    ],
)
def test_a_bad_phase_setting_is_named_by_its_phase_in_one_line(overrides, message):
    """An override named the dataclass (``Phase.steps``), not the phase the user wrote (``replacing.steps``); a
    phase the recipe lacks, given without steps or lr, raised Phase's TypeError."""
    with pytest.raises(ValueError) as raised:
        get_recipe("toy").with_overrides(overrides)
    text = str(raised.value)
    assert message in text and "Phase." not in text and "\n" not in text


def test_a_phase_built_alone_names_its_class():
    with pytest.raises(ValueError, match=r"^Phase\.steps must be an integer >= 1, got 0$"):
        Phase(steps=0, lr=1e-3)
