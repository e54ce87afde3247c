"""Typed family options: values checked as JSON gives them, bad input refused with one line naming the option."""

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from theseus_zoo.tasks.causal_lm import CausalLMOptions
from theseus_zoo.tasks.graphs import GraphOptions
from theseus_zoo.tasks.images import ResNetOptions
from theseus_zoo.tasks.options import parse_options
from theseus_zoo.tasks.text import TextOptions
from theseus_zoo.tasks.toy import ToyOptions


@dataclass(frozen=True)
class Example:
    count: int = field(default=1, metadata={"min": 1})
    rate: float = field(default=0.5, metadata={"min": 0, "max": 1})
    scale: float = field(default=1.0, metadata={"above": 0})
    name: str = "x"
    flag: bool = False
    sizes: tuple[int, ...] | None = None
    pair: tuple[float, float] = (0.1, 0.2)
    kind: Literal["a", "b"] = "a"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"count": True}, "example option count must be an integer, got True"),
        ({"count": 2.5}, "example option count must be an integer, got 2.5"),
        ({"count": "3"}, "example option count must be an integer, got '3'"),
        ({"count": 0}, "example option count must be >= 1, got 0"),
        ({"rate": math.nan}, "example option rate must be a finite number, got nan"),
        ({"rate": math.inf}, "example option rate must be a finite number"),
        ({"rate": 10**400}, "example option rate must be a finite number"),
        ({"rate": False}, "example option rate must be a finite number, got False"),
        ({"rate": 1.5}, "example option rate must be <= 1, got 1.5"),
        ({"scale": 0}, "example option scale must be > 0, got 0"),
        ({"name": 3}, "example option name must be a string, got 3"),
        ({"flag": 1}, "example option flag must be true or false, got 1"),
        ({"sizes": "3,3"}, "example option sizes must be a list of integers or null, got '3,3'"),
        ({"sizes": [3, True]}, "example option sizes must be a list of integers or null"),
        ({"pair": [0.1]}, "example option pair must be a list of 2 (a finite number, a finite number)"),
        ({"kind": "c"}, "example option kind must be one of 'a', 'b', got 'c'"),
        ({"colour": 1}, "unknown example options ['colour']; known: count, rate, scale, name, flag, sizes, pair"),
        (["count"], "example options must be an object of option names to values"),
    ],
)
def test_bad_values_are_refused_with_one_line_naming_the_option(options, message):
    with pytest.raises(ValueError) as error:
        parse_options(Example, options, "example")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_json_values_become_the_declared_types():
    parsed = parse_options(Example, {"count": 3, "rate": 1, "sizes": [2, 1], "pair": [0.3, 0.4], "kind": "b"}, "x")
    assert parsed == Example(count=3, rate=1, sizes=(2, 1), pair=(0.3, 0.4), kind="b")
    assert parse_options(Example, {}, "x") == Example()
    assert parse_options(Example, {"sizes": None}, "x").sizes is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=10**308) | st.floats() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=8,
)


@pytest.mark.parametrize("schema", [Example, ToyOptions, TextOptions, ResNetOptions, GraphOptions, CausalLMOptions])
@given(data=st.data())
def test_any_json_value_is_taken_or_refused_with_a_value_error_never_a_traceback(schema, data):
    names = [f.name for f in dataclasses.fields(schema)]
    options = data.draw(st.dictionaries(st.sampled_from([*names, "unknown"]), JSON, max_size=3))
    try:
        parsed = parse_options(schema, options, "family")
    except ValueError as error:
        assert "\n" not in str(error)
    else:
        assert isinstance(parsed, schema)
