"""The successor registry raises on duplicates; plans split containers into (uneven) groups."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import theseus_core as th
from theseus_core.testing import ToyBlock, ToyStack


class SpecialBlock(ToyBlock):
    pass


def test_registered_factories_are_found_by_nearest_type():
    registry = th.SuccessorRegistry()

    @registry.register(ToyBlock)
    def toy(group):
        return ToyBlock(group[0].width)

    assert registry.lookup([SpecialBlock(4)]) is toy  # a subclass falls back to its base
    special = registry.register(SpecialBlock)(lambda group: nn.Identity())
    assert registry.lookup([SpecialBlock(4)]) is special
    assert registry.list() == [f"{__name__}.SpecialBlock", "theseus_core.testing.toys.ToyBlock"]
    assert registry.list("*Special*") == [f"{__name__}.SpecialBlock"]
    assert ToyBlock in registry


def test_duplicates_raise_and_unregister_frees_the_slot():
    registry = th.SuccessorRegistry()
    registry.register(ToyBlock)(lambda group: ToyBlock(4))
    with pytest.raises(KeyError, match="already registered"):
        registry.register(ToyBlock)(lambda group: ToyBlock(2))
    registry.unregister(ToyBlock)
    registry.register(ToyBlock)(lambda group: ToyBlock(2))
    with pytest.raises(KeyError, match="no successor registered"):
        registry.unregister(SpecialBlock)


def test_registering_a_non_module_type_raises():
    with pytest.raises(TypeError, match=r"nn\.Module subclass"):
        th.SuccessorRegistry().register(int)


def test_replace_uses_the_registry_for_specs_without_a_successor():
    registry = th.SuccessorRegistry()
    registry.register(ToyBlock)(th.copy_module(-1))
    model = ToyStack(num_blocks=6)
    last = model.blocks[2].fc1.weight.clone()
    theseus = th.replace_(model, th.plan(model, "blocks", group_sizes=[3, 2, 1]), registry=registry)
    assert (theseus.sites[0].successor.inner.fc1.weight == last).all()


def test_the_default_registry_backs_register_successor():
    class Mine(nn.Linear):
        pass

    th.register_successor(Mine)(th.copy_module(0))
    try:
        assert f"{__name__}.*Mine" not in th.list_successors() and th.list_successors("*Mine")
    finally:
        th.DEFAULT_REGISTRY.unregister(Mine)


@given(st.integers(1, 200), st.data())
def test_even_group_sizes_differ_by_at_most_one(total, data):
    groups = data.draw(st.integers(1, total))
    sizes = th.even_group_sizes(total, groups)
    assert sum(sizes) == total and len(sizes) == groups
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_plan_makes_consecutive_uneven_groups():
    model = ToyStack(num_blocks=12)
    plan = th.plan(model, "blocks", group_sizes=[3, 3, 2, 2, 1, 1], successor=th.copy_module(0))
    assert [spec.path for spec in plan] == [
        "blocks[0:3]",
        "blocks[3:6]",
        "blocks[6:8]",
        "blocks[8:10]",
        "blocks[10:11]",
        "blocks[11:12]",
    ]
    assert [spec.path for spec in th.plan(model, "blocks", num_groups=5)][:2] == ["blocks[0:3]", "blocks[3:6]"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"group_sizes": [3, 3]}, ValueError, "summing to"),
        ({"group_sizes": [4, 0]}, ValueError, "positive"),
        ({}, ValueError, "exactly one"),
        ({"num_groups": 5}, ValueError, "cannot split 4"),
        ({"num_groups": 2, "in_proj": nn.Linear(2, 2)}, TypeError, "share one projection"),
    ],
)
def test_plan_rejects_bad_groupings(kwargs, error, message):
    with pytest.raises(error, match=message):
        th.plan(ToyStack(num_blocks=4), "blocks", **kwargs)
