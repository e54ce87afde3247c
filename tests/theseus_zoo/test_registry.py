"""theseus_zoo.registry: the one registry behind recipes and families."""

import pytest

from theseus_zoo.registry import Registry, unknown_name
from theseus_zoo.tasks import FAMILIES


def test_a_name_registers_once_and_an_unknown_name_lists_the_known_ones():
    registry = Registry("widget", entry_point_group="theseus_zoo.tests.widgets", entry_points="modules")
    registry.register("b", 2)
    registry.register("a", 1)
    with pytest.raises(KeyError, match="a widget named 'a' is already registered"):
        registry.register("a", 3)
    assert registry.get("a") == 1
    assert registry.names() == ["a", "b"] and registry.list("b*") == [2]
    with pytest.raises(ValueError, match="unknown widget 'c'; known: a, b"):
        registry.get("c")


def test_a_built_in_reference_is_imported_when_first_asked_for_and_cannot_be_registered():
    registry = Registry(
        "function",
        entry_point_group="theseus_zoo.tests.functions",
        entry_points="entries",
        built_in={"dumps": "json:dumps"},
    )
    assert registry.names() == ["dumps"]
    with pytest.raises(KeyError):
        registry.register("dumps", print)
    import json

    assert registry.get("dumps") is json.dumps


def test_the_families_are_listed_without_importing_them():
    assert {"toy", "bert", "resnet", "gnn", "causal_lm"} <= set(FAMILIES.names())


def test_an_unknown_name_gets_up_to_three_close_names_and_a_long_catalogue_a_hint_only():
    known = [f"minilm-rt-{labels}-{layers}l" for labels in ("binary", "five", "regression") for layers in (1, 2, 3)]
    message = unknown_name("recipe", "minilm-rt-five", known, "`theseus recipes` lists them")
    assert message == (
        "unknown recipe 'minilm-rt-five' (did you mean minilm-rt-five-3l, minilm-rt-five-2l or minilm-rt-five-1l?); "
        "`theseus recipes` lists them"
    )
    assert unknown_name("widget", "b", ["a", "bb"]) == "unknown widget 'b' (did you mean bb?); known: a, bb"
