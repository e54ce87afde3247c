"""Typed family options: each family declares its options as a frozen dataclass, and `parse_options` builds it
from a recipe's ``options`` mapping, refusing bad input with one line before any work.

A field's annotation is its type, checked as JSON gives values: ``int`` takes no ``bool`` nor ``2.5``; ``float``
takes integers too but no ``bool``, ``NaN`` or infinity; ``tuple[int, ...]`` and ``tuple[float, float]`` take JSON
lists; ``Literal[...]`` names its choices; ``X | None`` takes ``null``. Bounds go in the field's metadata, e.g.
``field(default=1, metadata={"min": 1})``: ``"min"`` and ``"max"`` (inclusive), ``"above"`` (exclusive). Checks
between fields (a layer count below another) stay with the family, which knows what they mean.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union

from theseus_core.checks import is_finite_number, is_int

Options = TypeVar("Options")


def parse_options(schema: type[Options], options: Mapping[str, Any], family: str) -> Options:
    """``schema(**options)`` with every value checked against its field's annotation and bounds.

    Raises:
        ValueError: ``options`` is not a mapping, names an option the family does not have (the message lists the
            known ones), or gives a value of the wrong type or out of bounds (the message names the option, what it
            must be and what it got).
    """
    if not isinstance(options, Mapping):
        raise ValueError(f"{family} options must be an object of option names to values, got {options!r}")
    fields = {field.name: field for field in dataclasses.fields(schema)}  # type: ignore[arg-type]
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise ValueError(f"unknown {family} options {unknown}; known: {', '.join(fields)}")
    hints = typing.get_type_hints(schema)
    values = {}
    for name, value in options.items():
        try:
            values[name] = _convert(value, hints[name])
        except TypeError as error:
            raise ValueError(f"{family} option {name} must be {error}, got {value!r}") from None
        bounds = fields[name].metadata
        if value is not None and "min" in bounds and not value >= bounds["min"]:
            raise ValueError(f"{family} option {name} must be >= {bounds['min']}, got {value!r}")
        if value is not None and "above" in bounds and not value > bounds["above"]:
            raise ValueError(f"{family} option {name} must be > {bounds['above']}, got {value!r}")
        if value is not None and "max" in bounds and not value <= bounds["max"]:
            raise ValueError(f"{family} option {name} must be <= {bounds['max']}, got {value!r}")
    return schema(**values)


def _convert(value: Any, annotation: Any) -> Any:
    """``value`` as ``annotation`` wants it (JSON lists as tuples); raises `TypeError` with what it must be."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        for argument in arguments:
            try:
                return _convert(value, argument)
            except TypeError:
                continue
        raise TypeError(" or ".join(_describe(argument) for argument in arguments))
    if origin is Literal:
        if any(value == choice and type(value) is type(choice) for choice in arguments):
            return value
        raise TypeError(_describe(annotation))
    if origin is tuple:
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
            raise TypeError(_describe(annotation))
        items = arguments[:1] * len(value) if len(arguments) == 2 and arguments[1] is Ellipsis else arguments
        if len(items) != len(value):
            raise TypeError(_describe(annotation))
        return tuple(_convert(item, kind) for item, kind in zip(value, items, strict=True))
    if annotation is type(None):
        if value is None:
            return None
    elif annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if is_int(value):
            return value
    elif annotation is float:
        if is_finite_number(value):
            return value
    elif isinstance(value, annotation):
        return value
    raise TypeError(_describe(annotation))


_PLURALS = {"an integer": "integers", "a finite number": "finite numbers", "a string": "strings"}


def _describe(annotation: Any) -> str:
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(choice) for choice in arguments)
    if origin is tuple:
        if len(arguments) == 2 and arguments[1] is Ellipsis:
            element = _describe(arguments[0])
            return f"a list of {_PLURALS.get(element, element)}"
        return f"a list of {len(arguments)} ({', '.join(_describe(argument) for argument in arguments)})"
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(argument) for argument in arguments)
    return {
        type(None): "null",
        bool: "true or false",
        int: "an integer",
        float: "a finite number",
        str: "a string",
    }.get(annotation, getattr(annotation, "__name__", str(annotation)))
