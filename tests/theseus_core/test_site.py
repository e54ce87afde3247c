"""theseus_core.site: the attribute pass-through every replacement wrapper shares (`PassThrough`)."""

import copy
import pickle

import pytest
import torch
import torch._dynamo
from hypothesis import assume, given
from hypothesis import strategies as st
from torch import nn

import theseus_core as th
from theseus_core.testing import ToyBlock, ToyStack

from .test_engine import ReadsItsFirstBlock, fresh_block


def projected():
    """A successor between projections, as `Theseus.finalize` leaves it; its target is the successor."""
    wrapper = th.Projected(ToyBlock(8, dropout=0.0), nn.Linear(4, 8), nn.Linear(8, 4))
    return wrapper, torch.randn(2, 4)


def site():
    """A site of a replacement in progress; its target is its group's first module."""
    model = ToyStack(in_features=8, width=8, num_blocks=4, dropout=0.0)
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", th.copy_module(0))])
    return theseus.sites[0], torch.randn(2, 8)


WRAPPERS = {
    "projected": (projected, lambda wrapper: wrapper.inner),
    "site": (site, lambda wrapper: wrapper.predecessor.layers[0]),
}
NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True).filter(lambda name: not name.startswith("__"))


@pytest.mark.parametrize("kind", WRAPPERS)
@given(name=NAMES)
def test_a_read_the_wrapper_cannot_answer_is_the_targets_and_writes_stay_on_the_wrapper(kind, name):
    build, target_of = WRAPPERS[kind]
    wrapper, _ = build()
    target = target_of(wrapper)
    assume(not hasattr(wrapper, name))
    theirs, mine = object(), object()
    setattr(target, name, theirs)
    assert getattr(wrapper, name) is theirs and name not in vars(wrapper)  # the very object, not stored here
    setattr(wrapper, name, mine)
    assert getattr(wrapper, name) is mine and getattr(target, name) is theirs
    delattr(wrapper, name)
    assert getattr(wrapper, name) is theirs and getattr(target, name) is theirs
    delattr(target, name)
    with pytest.raises(AttributeError, match=rf"^'{type(wrapper).__name__}' object has no attribute '{name}', nor "):
        getattr(wrapper, name)


@pytest.mark.parametrize("kind", WRAPPERS)
def test_the_wrappers_own_attributes_and_modules_win(kind):
    build, target_of = WRAPPERS[kind]
    wrapper, _ = build()
    target = target_of(wrapper)
    own = [name for name in [*vars(wrapper), *wrapper._modules] if not name.startswith("__")]
    expected = {name: getattr(wrapper, name) for name in own}
    for name in own:
        target.__dict__[name] = object()
    assert {name: getattr(wrapper, name) for name in own} == expected


@pytest.mark.parametrize("kind", WRAPPERS)
@pytest.mark.parametrize("name", ["__deepcopy__", "__copy__", "__reduce_ex__", "__getstate__", "__len__", "__own__"])
def test_dunder_names_are_never_forwarded(kind, name):
    """``copy`` and ``pickle`` ask ``getattr(wrapper, "__deepcopy__", None)`` how to treat the wrapper itself:
    the target's answer would copy the target in its place."""
    build, target_of = WRAPPERS[kind]
    wrapper, _ = build()
    planted = object()
    target_of(wrapper).__dict__[name] = planted
    assert getattr(wrapper, name, None) is not planted


@pytest.mark.parametrize("cls", [th.Projected, th.ReplacementSite])
@pytest.mark.parametrize("name", ["_modules", "inner", "predecessor", "width", "anything"])
def test_a_half_made_wrapper_raises_attribute_error_without_recursing(cls, name):
    empty = cls.__new__(cls)  # what copy.deepcopy and unpickling start from, before its __dict__ is restored
    with pytest.raises(AttributeError):
        getattr(empty, name)
    assert not hasattr(empty, name)


@pytest.mark.parametrize("kind", WRAPPERS)
def test_a_deep_copy_reads_through_to_its_own_target(kind):
    build, target_of = WRAPPERS[kind]
    wrapper, x = build()
    target_of(wrapper).tags = ["a"]
    clone = copy.deepcopy(wrapper)
    assert type(clone) is type(wrapper)
    assert clone.tags == ["a"] and clone.tags is target_of(clone).tags and clone.tags is not wrapper.tags
    with torch.no_grad():
        assert torch.equal(clone.eval()(x), wrapper.eval()(x))


@pytest.mark.parametrize("kind", WRAPPERS)
def test_pickling_and_the_state_dict_round_trip(kind):
    build, target_of = WRAPPERS[kind]
    wrapper, x = build()
    target_of(wrapper).tags = ["a"]
    clone = pickle.loads(pickle.dumps(wrapper))
    assert type(clone) is type(wrapper) and clone.tags == ["a"] and clone.tags is target_of(clone).tags
    state = wrapper.state_dict()
    children = {f"{name}.{key}" for name, child in wrapper.named_children() for key in child.state_dict()}
    assert set(state) == children  # what is read through adds no entries
    fresh, _ = build()
    fresh.load_state_dict(state, strict=True)
    with torch.no_grad():
        assert torch.equal(fresh.eval()(x), wrapper.eval()(x))
        assert torch.equal(clone.eval()(x), wrapper.eval()(x))


def gained_block(group):
    block = ToyBlock(8, dropout=0.0)
    block.gain = 2.0
    return block


def test_a_compiled_model_reads_through_sites_and_projections():
    torch.manual_seed(0)
    model = ReadsItsFirstBlock()
    x = torch.randn(2, 8)
    spec = th.ModuleSpec("blocks[0:2]", gained_block, in_proj="linear", out_proj="linear")
    theseus = th.replace_(model, [spec])
    assert isinstance(model.blocks[0], th.ReplacementSite)
    for _ in range(2):  # during replacement (a site), then finalized (a Projected)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="eager")
        with torch.no_grad():
            torch.testing.assert_close(compiled.eval()(x), model.eval()(x), rtol=0, atol=0)
        if isinstance(model.blocks[0], th.ReplacementSite):
            theseus.finalize()
    assert isinstance(model.blocks[0], th.Projected) and model.blocks[0].gain == 2.0


def test_a_site_running_a_module_runs_it_alone_and_still_passes_reads_to_its_group():
    """`ReplacementSite.running`: the site's predecessor branch runs the module (with the eval route on
    "predecessor", one site runs it in an otherwise original model); reads through the site still reach the group's
    first block, and the group is back afterwards."""
    torch.manual_seed(0)
    model, x = ReadsItsFirstBlock().eval(), torch.randn(3, 8)
    expected = model(x)
    theseus = th.replace_(model, [th.ModuleSpec("blocks[0:2]", fresh_block(gain=None))], example_inputs=[(x,)])
    theseus.eval_route = "predecessor"
    site, group = theseus.sites[0], theseus.sites[0].predecessor
    with torch.no_grad():
        successor_out = site.successor(x)
        for block in list(model.blocks)[1:]:
            successor_out = block(successor_out)
        with site.running(site.successor):
            assert site.gain == 2.0  # the group's first block's attribute, which the successor does not have
            torch.testing.assert_close(model(x), successor_out * 2.0)
    assert site.predecessor is group
    torch.testing.assert_close(model(x), expected)
