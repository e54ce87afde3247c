"""Group paths parse and resolve without touching the model."""

import pytest
from torch import nn

import theseus_core as th
from theseus_core.spec import ParsedPath, parse_path, resolve
from theseus_core.testing import ToyStack


@pytest.mark.parametrize(
    ("path", "parsed"),
    [
        ("layer3", ParsedPath(("layer3",), None)),
        ("encoder.layer[0:2]", ParsedPath(("encoder", "layer"), (0, 2))),
        ("encoder.layer.3", ParsedPath(("encoder", "layer", "3"), None)),
        ("blocks[2]", ParsedPath(("blocks", 2), None)),
        ("stages[1].blocks[:-1]", ParsedPath(("stages", 1, "blocks"), (None, -1))),
    ],
)
def test_paths_parse(path, parsed):
    assert parse_path(path) == parsed


@pytest.mark.parametrize(
    ("path", "message"),
    [("", "root"), ("a..b", "cannot parse"), ("a[0:2].b", "may only end"), ("a[0:2:1]", "cannot parse")],
)
def test_malformed_paths_raise_when_the_spec_is_made(path, message):
    with pytest.raises(ValueError, match=message):
        th.ModuleSpec(path)


def test_specs_check_their_fields():
    with pytest.raises(TypeError, match="callable"):
        th.ModuleSpec("blocks[0:2]", successor=nn.Linear(2, 2).weight)
    with pytest.raises(TypeError, match="in_proj"):
        th.ModuleSpec("blocks[0:2]", in_proj="conv")
    with pytest.raises(TypeError, match="string"):
        th.ModuleSpec(3)


def test_resolve_slices_indices_and_attributes():
    model = ToyStack(num_blocks=5)
    group = resolve(model, "blocks[1:4]")
    assert group.keys == ("1", "2", "3") and group.modules == tuple(model.blocks[1:4])
    assert group.qualified_names == ("blocks.1", "blocks.2", "blocks.3")
    assert resolve(model, "blocks[-1]").modules == (model.blocks[4],)
    assert resolve(model, "blocks.2.fc1").modules == (model.blocks[2].fc1,)
    assert resolve(model, "blocks[:-3]").keys == ("0", "1")
    assert resolve(model, "head").container is model


def test_resolving_a_non_container_index_names_the_module():
    with pytest.raises(ValueError, match=r"ToyBlock, not an nn\.ModuleList"):
        resolve(ToyStack(), "blocks[0][1]")


def test_a_plan_is_a_sequence_of_specs():
    specs = (th.ModuleSpec("blocks[0:2]"), th.ModuleSpec("blocks[2:4]"))
    plan = th.Plan(specs)
    assert len(plan) == 2 and list(plan) == list(specs) and plan[1] is specs[1]
    with pytest.raises(TypeError, match="ModuleSpec"):
        th.Plan(("blocks[0:2]",))
