"""`theseus_zoo.recipes.recipe`: what a recipe written by an older version becomes today."""

import json

from theseus_zoo.recipes import get_recipe, with_defaults


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
