"""`theseus_zoo.recipes.recipe`: what a recipe written by an older version becomes today; a config file read."""

import json

import pytest

from theseus_zoo.recipes import get_recipe, load_overrides, with_defaults


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
