"""Every adapter's plan leaves the successor to the registry: the adapters' defaults are registry
entries, and a user's registration for a block type (in a private registry, or replacing the default) is what
the plan then uses."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torchvision
import transformers
from torch import nn
from torch_geometric.nn import GCN, GCNConv
from transformers.models.bert.modeling_bert import BertLayer

import theseus_core as th
from theseus_adapters import gnn, hf, resnet
from theseus_core.registry import call_factory


@dataclass
class Adapter:
    make: Callable[[], nn.Module]
    plan: Callable[[nn.Module], th.Plan]
    block_type: type  # the type a user registers for
    default: Callable  # the adapter's registered default for it
    inputs: Callable[[], dict[str, Any]]


def tiny_bert() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32
    )
    return transformers.BertModel(config).eval()


def tiny_gcn() -> nn.Module:
    torch.manual_seed(0)
    return gnn.to_steps_(GCN(5, 8, num_layers=4, out_channels=3))


ADAPTERS = {
    "resnet": Adapter(
        lambda: torchvision.models.resnet18(num_classes=3),
        lambda model: resnet.plan(model, (1, 1, 1, 1)),
        torchvision.models.resnet.BasicBlock,
        resnet.block_successor,
        lambda: {"x": torch.randn(2, 3, 32, 32)},
    ),
    "hf": Adapter(
        tiny_bert,
        lambda model: hf.plan(model, num_layers=2),
        BertLayer,
        hf.layer_successor,
        lambda: {"input_ids": torch.randint(0, 64, (2, 6))},
    ),
    "gnn": Adapter(
        tiny_gcn,
        lambda model: gnn.plan(model, 2),
        gnn.GNNStep,
        gnn.copy_step,
        lambda: {"x": torch.randn(6, 5), "edge_index": torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])},
    ),
}


def users_factory(adapter: Adapter) -> Callable[..., nn.Module]:
    """A user's factory: what the adapter's default builds, marked with the options it got."""

    def users_successor(group: list[nn.Module], model: nn.Module, **options: Any) -> nn.Module:
        successor = call_factory(adapter.default, group, model, options)
        successor.built_by_user = options
        return successor

    return users_successor


def built_by_user(theseus: th.Theseus) -> list[bool]:
    return [hasattr(site.successor.inner, "built_by_user") for site in theseus.sites]


@pytest.mark.parametrize("name", ADAPTERS)
def test_the_adapters_default_is_a_listed_registry_entry(name):
    adapter = ADAPTERS[name]
    qualified = f"{adapter.block_type.__module__}.{adapter.block_type.__qualname__}"
    assert th.DEFAULT_REGISTRY.find(adapter.block_type) is adapter.default
    assert any(entry in th.list_successors() for entry in (qualified, *th.list_successors("*GradientCheckpoint*")))
    model = adapter.make()
    theseus = th.replace_(model, adapter.plan(model), example_kwargs=adapter.inputs())
    assert built_by_user(theseus) == [False] * len(theseus.sites)


@pytest.mark.parametrize("name", ADAPTERS)
def test_a_private_registry_wins_over_the_adapters_default(name):
    adapter = ADAPTERS[name]
    private = th.SuccessorRegistry()
    private.register(adapter.block_type)(users_factory(adapter))
    model = adapter.make()
    theseus = th.replace_(model, adapter.plan(model), registry=private, example_kwargs=adapter.inputs())
    assert built_by_user(theseus) == [True] * len(theseus.sites)
    assert th.DEFAULT_REGISTRY.find(adapter.block_type) is adapter.default  # the default registry is untouched


@pytest.mark.parametrize("name", ADAPTERS)
def test_replacing_the_default_takes_an_explicit_word_and_can_be_undone(name):
    adapter = ADAPTERS[name]
    users_successor = users_factory(adapter)
    if th.DEFAULT_REGISTRY.get(adapter.block_type) is not None:  # registered for this very type: a duplicate
        with pytest.raises(KeyError, match=r"already registered.*replace=True"):
            th.register_successor(adapter.block_type)(users_successor)
    th.register_successor(adapter.block_type, replace=True)(users_successor)
    try:
        model = adapter.make()
        theseus = th.replace_(model, adapter.plan(model), example_kwargs=adapter.inputs())
        assert built_by_user(theseus) == [True] * len(theseus.sites)
        theseus.restore()
    finally:
        assert th.DEFAULT_REGISTRY.unregister(adapter.block_type) is users_successor
    assert th.DEFAULT_REGISTRY.find(adapter.block_type) is adapter.default
    theseus = th.replace_(model, adapter.plan(model), example_kwargs=adapter.inputs())
    assert built_by_user(theseus) == [False] * len(theseus.sites)


def test_the_plans_options_reach_a_users_factory():
    """What a builder needs comes with the spec: the block to start from, the stride of a downsampling group,
    the group's widths; a factory that names fewer gets fewer."""
    model = torchvision.models.resnet34(num_classes=3)
    theseus = th.replace_(model, resnet.plan(model, (2, 2, 2, 2)), registry=private_for("resnet"))
    options = {site.path: site.successor.inner.built_by_user for site in theseus.sites}
    assert options["layer2[0:2]"] == {
        "source": "layer2[0]",
        "width": 1.0,
        "stride": 2,
        "in_channels": 64,
        "out_channels": 128,
    }
    assert options["layer2[2:4]"]["stride"] == 1 and options["layer2[2:4]"]["in_channels"] == 128

    model = tiny_bert()
    theseus = th.replace_(model, hf.plan(model, num_layers=2, init="last"), registry=private_for("hf"))
    options = [site.successor.inner.built_by_user for site in theseus.sites]
    assert [entry["source"] for entry in options] == [2, 3]
    assert options[0]["stack"].path == "encoder.layer"


def private_for(name: str) -> th.SuccessorRegistry:
    private = th.SuccessorRegistry()
    private.register(ADAPTERS[name].block_type)(users_factory(ADAPTERS[name]))
    return private


def test_a_transformers_layer_outside_the_registered_bases_is_still_copied():
    """XLNet's layers derive from neither ``GradientCheckpointingLayer`` nor ``MPNetLayer``: with nothing
    registered for them, the plan falls back on `hf.layer_successor` instead of failing inside ``replace_``."""
    config = transformers.XLNetConfig(vocab_size=50, d_model=32, n_layer=4, n_head=2, d_inner=64)
    model = transformers.XLNetModel(config).eval()
    assert th.DEFAULT_REGISTRY.find(type(model.layer[0])) is None
    ids = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "use_mems": False}  # eval mode returns one memory per layer unless told not to
    theseus = th.replace_(model, hf.plan(model, num_layers=2, init="last"), example_kwargs=inputs)
    finalized = theseus.finalize()
    assert len(finalized.layer) == 2 and finalized.config.n_layer == 2
    finalized(input_ids=ids)


def test_a_private_registration_for_a_layer_outside_the_bases_is_used_when_the_plan_is_told():
    """For XLNet's layers the plan must say their successor itself; given the private registry it will pass to
    ``replace_``, it leaves the choice to that registry instead of `hf.layer_successor`."""
    config = transformers.XLNetConfig(vocab_size=50, d_model=32, n_layer=4, n_head=2, d_inner=64)
    model = transformers.XLNetModel(config).eval()
    layer_type = type(model.layer[0])
    private = th.SuccessorRegistry()
    private.register(layer_type)(users_factory(ADAPTERS["hf"]))
    ids = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(0))
    told = hf.plan(model, num_layers=2, registry=private)
    assert all(spec.successor is None for spec in told.specs)
    theseus = th.replace_(model, told, registry=private, example_kwargs={"input_ids": ids, "use_mems": False})
    assert built_by_user(theseus) == [True, True]
    theseus.restore()
    assert all(spec.successor is hf.layer_successor for spec in hf.plan(model, num_layers=2).specs)


def test_the_gnn_plan_checks_groups_against_what_the_private_registry_builds():
    """`copy_step` cannot copy one group for the whole GNN (no layer maps 5 to 3 channels); a user's factory
    that can is not refused by the plan's early check when the plan is given the registry."""
    torch.manual_seed(0)
    model = gnn.to_steps_(GCN(5, 8, num_layers=3, out_channels=3))
    with pytest.raises(ValueError, match=r"group .*\[0:3\].*5 to 3"):
        gnn.plan(model, 1)
    private = th.SuccessorRegistry()
    private.register(gnn.GNNStep)(gnn.conv_successor(lambda i, o: GCNConv(i, o)))
    theseus = th.replace_(
        model,
        gnn.plan(model, 1, registry=private),
        registry=private,
        example_kwargs=ADAPTERS["gnn"].inputs(),
    )
    assert [type(site.successor.inner.conv) for site in theseus.sites] == [GCNConv]
