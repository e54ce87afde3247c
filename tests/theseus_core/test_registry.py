"""The successor registry raises on duplicates; plans split containers into (uneven) groups."""

import pytest
import torch
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
    with pytest.raises(KeyError, match=r"already registered .*; pass replace=True") as raised:
        registry.register(ToyBlock)(lambda group: ToyBlock(2))
    assert "private" not in str(raised.value)  # it is one: only the default registry's error suggests one
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


# ------------------------------------------------------------------ adapters' defaults and users' overrides
@pytest.fixture
def isolated_default():
    """The default registry as it was, whatever a test registers in it."""
    saved = {slot: list(entries) for slot, entries in th.DEFAULT_REGISTRY._slots.items()}
    yield th.DEFAULT_REGISTRY
    th.DEFAULT_REGISTRY._slots.clear()
    th.DEFAULT_REGISTRY._slots.update(saved)


def test_replacing_takes_an_explicit_word_and_unregister_undoes_it():
    registry = th.SuccessorRegistry()
    adapters = registry.register(ToyBlock, fallback=True)(th.copy_module(0))
    with pytest.raises(KeyError, match="replace=True"):
        registry.register(ToyBlock)(th.copy_module(-1))
    mine = registry.register(ToyBlock, replace=True)(th.copy_module(-1))
    assert registry.lookup([ToyBlock(4)]) is mine
    assert registry.unregister(ToyBlock) is mine
    assert registry.lookup([ToyBlock(4)]) is adapters  # the adapter's default is back


def test_an_adapters_default_goes_below_a_registration_made_before_it():
    registry = th.SuccessorRegistry()
    mine = registry.register(ToyBlock)(th.copy_module(-1))
    registry.register(ToyBlock, fallback=True)(th.copy_module(0))  # the adapter imported later
    assert registry.lookup([ToyBlock(4)]) is mine
    with pytest.raises(KeyError, match="already has a default"):
        registry.register(ToyBlock, fallback=True)(th.copy_module(0))


def test_named_alternatives_are_listed_and_picked_by_name():
    registry = th.SuccessorRegistry()
    registry.register(ToyBlock)(th.copy_module(0))
    narrow = registry.register(ToyBlock, "narrow")(lambda group: ToyBlock(2))
    assert registry.lookup([SpecialBlock(4)], "narrow") is narrow
    assert registry.names(SpecialBlock) == ["default", "narrow"]
    assert registry.list("*ToyBlock*") == [
        "theseus_core.testing.toys.ToyBlock",
        "theseus_core.testing.toys.ToyBlock:narrow",
    ]
    with pytest.raises(LookupError, match=r"no successor 'wide' .* \['default', 'narrow'\]"):
        registry.lookup([ToyBlock(4)], "wide")


def test_a_private_registry_is_consulted_before_the_default_one(isolated_default):
    th.register_successor(ToyBlock, fallback=True)(th.copy_module(0))
    model = ToyStack(num_blocks=4)
    first, last = model.blocks[0].fc1.weight.clone(), model.blocks[1].fc1.weight.clone()
    private = th.SuccessorRegistry()
    private.register(ToyBlock)(th.copy_module(-1))
    theseus = th.replace_(model, th.plan(model, "blocks", num_groups=2), registry=private)
    assert torch.equal(theseus.sites[0].successor.inner.fc1.weight, last)
    theseus.restore()
    theseus = th.replace_(model, th.plan(model, "blocks", num_groups=2), registry=th.SuccessorRegistry())
    assert torch.equal(theseus.sites[0].successor.inner.fc1.weight, first)  # nothing private: the default


def test_registered_successor_is_what_replace_would_take(isolated_default):
    default, mine = th.copy_module(0), th.copy_module(-1)
    assert th.registered_successor(ToyBlock) is None
    th.register_successor(ToyBlock, fallback=True)(default)
    private = th.SuccessorRegistry()
    assert th.registered_successor(SpecialBlock, private) is default  # nearest base, default registry
    private.register(SpecialBlock)(mine)
    assert th.registered_successor(SpecialBlock, private) is mine
    assert th.registered_successor(ToyBlock, private) is default  # a subclass's entry is not its base's
    assert th.registered_successor(SpecialBlock, private, "narrow") is None


def test_factories_get_the_options_they_name():
    seen = []

    def group_only(group):
        seen.append(("group_only",))
        return ToyBlock(group[0].width)

    def with_model(group, model, *, stride):
        seen.append(("with_model", type(model).__name__, stride))
        return ToyBlock(group[0].width)

    def everything(group, model, **options):
        seen.append(("everything", options))
        return ToyBlock(group[0].width)

    model = ToyStack(num_blocks=6)
    options = {"stride": 2, "source": 1}
    specs = [
        th.ModuleSpec(f"blocks[{2 * i}:{2 * i + 2}]", factory, options=options)
        for i, factory in enumerate((group_only, with_model, everything))
    ]
    th.replace_(model, specs, registry=th.SuccessorRegistry())
    assert seen == [("group_only",), ("with_model", "ToyStack", 2), ("everything", options)]


def test_a_spec_names_a_registered_alternative():
    registry = th.SuccessorRegistry()
    registry.register(ToyBlock, "last")(th.copy_module(-1))
    model = ToyStack(num_blocks=4)
    last = model.blocks[1].fc1.weight.clone()
    theseus = th.replace_(model, th.plan(model, "blocks", num_groups=2, successor="last"), registry=registry)
    assert torch.equal(theseus.sites[0].successor.inner.fc1.weight, last)
    theseus.restore()
    with pytest.raises(LookupError, match=r"group 'blocks\[0:2\]': no successor 'first'"):
        th.replace_(model, th.plan(model, "blocks", num_groups=2, successor="first"), registry=registry)


def test_a_factory_gets_the_model_only_as_a_second_parameter_without_a_default():
    from theseus_core.registry import call_factory

    group, model = [nn.Linear(2, 2)], nn.Sequential()
    seen = {}

    def with_option(group, source=None):
        seen["with_option"] = source
        return group[0]

    def with_model(group, model, source=None):
        seen["with_model"] = (model, source)
        return group[0]

    call_factory(with_option, group, model, {"source": 3, "stride": 2})
    call_factory(with_model, group, model, {"source": 3})
    assert seen == {"with_option": 3, "with_model": (model, 3)}
