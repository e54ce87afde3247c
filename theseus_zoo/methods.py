"""The vocabulary of methods: one definition per name, for `theseus compress --methods`, recipes and benchmarks.

A method name is a base method with optional modifiers, each with optional arguments::

    theseus                        the paper's Theseus
    theseus+warmup+kd              blockwise warm-up first, then replacing on the kd loss
    theseus+unfreeze(which=head)   the head trained too once p = 1
    theseus(schedule=constant,base=0.5)
    kd(alpha=0.7,temperature=4)    a baseline with its own parameters
    kd+searched                    KD into the architecture a budget search chose

Every name is registered as a `MethodSpec` (`METHODS`): bases by their name, modifiers with a leading ``+``, each
modifier naming the bases it applies to.
A spec's arguments are recipe fields set for that method alone (``kd(alpha=0.7)`` trains kd with
``kd_alpha=0.7``, every other method with the recipe's), so a method's parameters never change another's training.
A recipe that sets one of those fields itself, beside a method that sets it, is refused in one line
(`method_overrides`): one of the two would silently lose. How a base trains lives in its ``implementation``, a
`theseus_zoo.training.methods.Method` subclass imported only when a run builds it: this module imports nothing but
the standard library and the registry, so recipes validate their methods without importing torch.

Other packages add methods by naming, in the ``theseus_zoo.methods`` entry-point group, a module that calls
`register_method` when imported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .registry import Registry

ENTRY_POINT_GROUP = "theseus_zoo.methods"


@dataclass(frozen=True)
class MethodSpec:
    """One registered name.

    Args:
        name: How it is spelled: a base (``"kd"``) or, with a leading ``+``, a modifier of a base that takes them
            (``"+warmup"``).
        description: One line for `theseus methods`.
        implementation: For a base, its `theseus_zoo.training.methods.Method` subclass, or ``"module:Class"`` to
            import when a run builds it; ``None`` for a modifier (its base implements what it names through
            ``flag``).
        parameters: ``argument -> recipe field`` it sets for this method alone, e.g. ``{"alpha": "kd_alpha"}``.
        sets: Recipe fields it sets whenever it is named, before its arguments (``+unfreeze``:
            ``{"unfreeze_at_one": "all"}``).
        ignores: Recipe fields its training ignores, so that a recipe setting them beside it is refused (``+kd``
            replaces the loss that ``kd_weight`` and ``consistency_weight`` extend).
        flag: For a modifier, what its base implements (``"kd"``, ``"warmup"``); ``None`` when the fields it sets
            say it all.
        bases: For a modifier, the bases it may follow (a base takes the modifiers that name it).
        report_as: The key of this base's method in a run's report: of its plain form (``"baseline:kd"``; with
            arguments or modifiers ``"baseline:<full name>"``), or with ``report_first``, of the run's first method
            of the base whatever its arguments and modifiers (``"theseus"``; a later one keeps its full name and its
            stages are suffixed with it). ``None``: the method's full name.
        report_first: See ``report_as``: for a family of variants trained side by side (Theseus').
    """

    name: str
    description: str
    implementation: Any = None
    parameters: Mapping[str, str] = field(default_factory=dict)
    sets: Mapping[str, Any] = field(default_factory=dict)
    ignores: tuple[str, ...] = ()
    flag: str | None = None
    bases: tuple[str, ...] = ("theseus",)
    report_as: str | None = None
    report_first: bool = False

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.name.removeprefix("+")):
            raise ValueError(f"a method's name is letters, digits, '_' and '-', got {self.name!r}")
        if self.is_modifier and self.implementation is not None:
            raise ValueError(f"modifier {self.name!r}: a modifier has no implementation (its bases implement it)")
        if not self.is_modifier and self.implementation is None:
            raise ValueError(f"method {self.name!r} needs an implementation (a Method subclass or 'module:Class')")
        object.__setattr__(self, "parameters", dict(self.parameters))
        object.__setattr__(self, "sets", dict(self.sets))
        object.__setattr__(self, "ignores", tuple(self.ignores))
        object.__setattr__(self, "bases", tuple(self.bases))

    @property
    def is_modifier(self) -> bool:
        return self.name.startswith("+")


NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
SEGMENT = re.compile(r"(?P<name>[A-Za-z][A-Za-z0-9_-]*)(?:\((?P<arguments>[^()]*)\))?")

METHODS: Registry[MethodSpec] = Registry(
    "method", entry_point_group=ENTRY_POINT_GROUP, entry_points="modules", where="`theseus methods` lists them"
)
"""Every method and modifier by name (modifiers with a leading ``+``): the built-in ones below, entry points and
`register_method`."""


def register_method(spec: MethodSpec) -> MethodSpec:
    """Adds a method or modifier; a name used twice raises `KeyError`."""
    return METHODS.register(spec.name, spec)


@dataclass(frozen=True)
class MethodName:
    """A parsed method name: its base, the base's arguments, and each modifier with its arguments, in order."""

    base: str
    arguments: tuple[tuple[str, Any], ...] = ()
    modifiers: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    def __str__(self) -> str:
        return "+".join([_spell(self.base, self.arguments), *(_spell(name, args) for name, args in self.modifiers)])

    @property
    def flags(self) -> tuple[str, ...]:
        """What the modifiers ask the base to do (their ``flag``), in order."""
        flags = (METHODS.get("+" + name).flag for name, _ in self.modifiers)
        return tuple(flag for flag in flags if flag is not None)

    def specs(self) -> list[tuple[MethodSpec, dict[str, Any]]]:
        """The base's spec and each modifier's, with their arguments."""
        return [
            (METHODS.get(self.base), dict(self.arguments)),
            *((METHODS.get("+" + name), dict(arguments)) for name, arguments in self.modifiers),
        ]


def _spell(name: str, arguments: tuple[tuple[str, Any], ...]) -> str:
    if not arguments:
        return name
    return f"{name}({','.join(f'{key}={_value_text(value)}' for key, value in arguments)})"


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _value(text: str) -> Any:
    """``"0.5"`` -> 0.5, ``"4"`` -> 4, ``"true"`` -> True, ``"null"`` -> None; anything else stays a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_method(text: str) -> MethodName:
    """``"theseus+unfreeze(which=head)+kd"`` -> `MethodName`, checked against `METHODS`: known names and arguments,
    modifiers only on a base that takes them, none twice. Raises `ValueError` in one line."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a method is a name like 'theseus+warmup+kd' or 'kd', got {text!r}")
    segments = []
    for part in text.replace(" ", "").split("+"):
        match = SEGMENT.fullmatch(part)
        if match is None:
            raise ValueError(f"method {text!r}: {part!r} is not a name, or a name(argument=value,...)")
        arguments = []
        for item in filter(None, (match["arguments"] or "").split(",")):
            key, equals, value = item.partition("=")
            if not equals or not NAME.fullmatch(key):
                raise ValueError(f"method {text!r}: write arguments as name=value, got {item!r}")
            arguments.append((key, _value(value)))
        if len({key for key, _ in arguments}) != len(arguments):
            raise ValueError(f"method {text!r}: {match['name']} names an argument twice")
        segments.append((match["name"], tuple(arguments)))
    (base, base_arguments), modifiers = segments[0], segments[1:]
    methods = [name for name in METHODS.names() if not name.startswith("+")]
    modifier_names = [name for name in METHODS.names() if name.startswith("+")]
    if base not in methods:
        raise ValueError(
            f"unknown method {text!r}; methods: {', '.join(methods)} (modifiers: {', '.join(modifier_names)})"
        )
    unknown = [name for name, _ in modifiers if "+" + name not in modifier_names]
    if unknown:
        raise ValueError(f"method {text!r}: unknown modifier {unknown[0]!r}; modifiers: {', '.join(modifier_names)}")
    for name, _ in modifiers:
        if base not in METHODS.get("+" + name).bases:
            takes = [other for other in modifier_names if base in METHODS.get(other).bases]
            raise ValueError(
                f"method {text!r}: +{name} applies to {', '.join(METHODS.get('+' + name).bases)} only; {base} takes "
                + (", ".join(takes) if takes else "no modifier")
            )
    if len({name for name, _ in modifiers}) != len(modifiers):
        raise ValueError(f"method {text!r} names a modifier twice")
    parsed = MethodName(base, base_arguments, tuple(modifiers))
    for spec, arguments in parsed.specs():
        unknown = sorted(set(arguments) - set(spec.parameters))
        if unknown:
            takes = ", ".join(spec.parameters) or "none"
            raise ValueError(f"method {text!r}: {spec.name} has no argument {unknown[0]!r} (it takes: {takes})")
    return parsed


def uses_search(name: str | MethodName) -> bool:
    """Whether method ``name`` trains the successors a budget search chose (`Recipe.budget`): every Theseus
    variant, and a baseline with ``+searched``."""
    parsed = parse_method(name) if isinstance(name, str) else name
    return parsed.base == "theseus" or "searched" in parsed.flags


def split_methods(text: str) -> list[str]:
    """A comma-separated list of method names, commas inside parentheses kept: ``"kd(alpha=1,temperature=2),kd"``
    -> ``["kd(alpha=1,temperature=2)", "kd"]``."""
    names, depth, current = [], 0, ""
    for character in text:
        depth += {"(": 1, ")": -1}.get(character, 0)
        if character == "," and depth == 0:
            names.append(current.strip())
            current = ""
        else:
            current += character
    names.append(current.strip())
    return names


def method_overrides(name: str | MethodName, recipe_fields: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict:
    """The recipe fields method ``name`` sets for itself (its specs' ``sets``, then their arguments).

    Raises `ValueError` in one line where the recipe (``recipe_fields``, beside the fields' ``defaults``) sets one of
    them, or one the method ignores, to something other than its default: one of the two would silently lose."""
    parsed = parse_method(name) if isinstance(name, str) else name
    overrides: dict[str, Any] = {}
    for spec, arguments in parsed.specs():
        owned = {**spec.sets, **{spec.parameters[key]: value for key, value in arguments.items()}}
        for recipe_field in [*owned, *spec.ignores]:
            if recipe_fields[recipe_field] != defaults[recipe_field]:
                verb = "ignores" if recipe_field in spec.ignores and recipe_field not in owned else "sets"
                raise ValueError(
                    f"method {str(parsed)!r}: {spec.name} {verb} {recipe_field}, which the recipe sets too "
                    f"({recipe_field}={recipe_fields[recipe_field]!r}); drop it from the recipe"
                    + (f", or give it as an argument: {_argument_hint(spec, recipe_field)}" if verb == "sets" else "")
                )
        overrides.update(owned)
    return overrides


def _argument_hint(spec: MethodSpec, recipe_field: str) -> str:
    arguments = [key for key, target in spec.parameters.items() if target == recipe_field]
    return f"{spec.name}({arguments[0]}=...)" if arguments else "it has none"


def report_keys(names: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """Each method's key in a run's report and the suffix of its stages' names, in order: a base with ``report_as``
    (``"theseus"``) gives that key to its first method, stages unsuffixed (``"replacing"``); a later method of that
    base keeps its full name, its stages suffixed with it (``"replacing:theseus+kd"``). A base whose ``report_as``
    names every method (``"baseline:kd"``) gives that key to each, stages named by it."""
    keys: list[tuple[str, str]] = []
    taken: set[str] = set()
    for name in names:
        parsed = parse_method(name)
        spec = METHODS.get(parsed.base)
        full = str(parsed)
        if spec.report_as is None:
            keys.append((full, f":{full}"))
        elif spec.report_first:  # a family of variants: the first takes the family's key
            first = spec.report_as not in taken
            keys.append((spec.report_as, "") if first else (full, f":{full}"))
        else:
            key = spec.report_as if not (parsed.arguments or parsed.modifiers) else f"baseline:{full}"
            keys.append((key, ""))
        taken.add(keys[-1][0])
    return keys


# ----------------------------------------------------------------------------------------------- built-in methods
_IMPLEMENTATIONS = "theseus_zoo.training.methods"
_KD = {"alpha": "kd_alpha", "temperature": "kd_temperature"}
for _spec in (
    MethodSpec(
        "theseus",
        "progressive module replacing (BERT-of-Theseus): successors routed in at a rate p on a curriculum, the "
        "predecessor frozen, the task loss alone; arguments: schedule (curriculum, constant, anti_curriculum), base",
        f"{_IMPLEMENTATIONS}:Theseus",
        parameters={"schedule": "schedule", "base": "schedule_base"},
        report_as="theseus",
        report_first=True,
    ),
    MethodSpec(
        "truncated",
        "fine-tune the successor-sized model initialised like the successors (the layers the plan's init names)",
        f"{_IMPLEMENTATIONS}:Baseline",
        report_as="baseline:truncated",
    ),
    MethodSpec(
        "pretrained",
        "truncated, cut from the model before the predecessor phase (the paper's fine-tuned bottom layers)",
        f"{_IMPLEMENTATIONS}:Baseline",
        report_as="baseline:pretrained",
    ),
    MethodSpec(
        "scratch",
        "train the successor-sized architecture from a random initialisation",
        f"{_IMPLEMENTATIONS}:Baseline",
        report_as="baseline:scratch",
    ),
    MethodSpec(
        "kd",
        "knowledge distillation into the truncated start: alpha x task loss + (1 - alpha) x T^2 x KL to the frozen "
        "predecessor's logits at temperature T; arguments: alpha, temperature",
        f"{_IMPLEMENTATIONS}:Baseline",
        parameters=_KD,
        report_as="baseline:kd",
    ),
    MethodSpec(
        "direct",
        "kd into the refined form built directly from the predecessor (needs a refine phase); arguments: alpha, "
        "temperature",
        f"{_IMPLEMENTATIONS}:Baseline",
        parameters=_KD,
        report_as="baseline:direct",
    ),
    MethodSpec(
        "+kd",
        "replace on the kd baseline's loss instead of the task loss alone; arguments: alpha, temperature",
        parameters=_KD,
        ignores=("kd_weight", "consistency_weight"),
        flag="kd",
    ),
    MethodSpec(
        "+warmup",
        "blockwise distillation first: each successor learns its group's real output from its real input, for a "
        "fraction of the replacing budget; argument: fraction",
        parameters={"fraction": "warmup_fraction"},
        flag="warmup",
    ),
    MethodSpec(
        "+unfreeze",
        "once p = 1, also train what lies outside the groups: which=all (default: embeddings and head) or which=head",
        parameters={"which": "unfreeze_at_one"},
        sets={"unfreeze_at_one": "all"},
    ),
    MethodSpec(
        "+searched",
        "train the budget search's choice of a successor per group (needs a budget) instead of the family's "
        "successor-sized model, started from the candidates' blockwise distillation",
        flag="searched",
        bases=("truncated", "kd"),
    ),
    MethodSpec(
        "+soft",
        "add weight x T^2 x KL to the frozen predecessor's logits to the task loss; arguments: weight (default 1), "
        "temperature",
        parameters={"weight": "kd_weight", "temperature": "kd_temperature"},
        sets={"kd_weight": 1.0},
    ),
    MethodSpec(
        "+consistency",
        "add weight x MSE(successor(y), group(y)) over the groups routed to their successor (blockwise "
        "distillation on the successor's own input); argument: weight (default 1)",
        parameters={"weight": "consistency_weight"},
        sets={"consistency_weight": 1.0},
    ),
):
    register_method(_spec)
