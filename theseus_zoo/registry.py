"""One registry for the zoo's named catalogues: recipes (`theseus_zoo.recipes`) and model families
(`theseus_zoo.tasks`), after timm's ``_registry.py``.

A `Registry` maps names to entries. Registering a name twice raises `KeyError` (timm only warns; a silent
overwrite hides bugs); looking up an unknown name raises `ValueError` that names the closest known ones
(`unknown_name`); ``names(pattern)`` and ``list(pattern)`` take a glob. Entries come from four places, each read
only when a lookup needs it:

- `Registry.register`, by the code that defines the entry;
- ``modules``: a built-in catalogue of modules that register their entries when imported (the recipe modules);
- ``built_in``: ``name -> "module:attribute"`` references, imported the first time the name is asked for (the
  families, each of which imports its model library);
- the entry-point group: other packages' modules that register entries when imported (``entry_points="modules"``)
  or their entries themselves, by the entry point's name (``entry_points="entries"``).

It imports nothing but the standard library, so ``theseus recipes`` lists the catalogue without importing torch.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import importlib.metadata
from collections.abc import Iterable, Mapping
from typing import Generic, Literal, TypeVar

T = TypeVar("T")

LISTED = 5
"""A catalogue of at most this many names is listed whole in the message for an unknown name."""


def unknown_name(kind: str, name: str, known: Iterable[str], where: str = "known") -> str:
    """The one-line message for an unknown ``name`` of a ``kind``: up to three close matches ("did you mean": the
    closest by `difflib`, then the names that contain ``name``), then
    the known names when there are at most `LISTED` of them or ``where`` is ``"known"``, else ``where`` alone (a
    hint such as ``"`theseus recipes` lists them"``).

    >>> unknown_name("recipe", "toyy", ["toy", "minilm-rt-five-2l"])
    "unknown recipe 'toyy' (did you mean toy?); known: toy, minilm-rt-five-2l"
    """
    known = list(known)
    containing = [candidate for candidate in known if name and name in candidate]  # "smollm": the name's start
    close = list(dict.fromkeys(difflib.get_close_matches(name, known, n=3, cutoff=0.6) + containing))[:3]
    message = f"unknown {kind} {name!r}"
    if close:
        message += f" (did you mean {', '.join(close[:-1]) + ' or ' if len(close) > 1 else ''}{close[-1]}?)"
    if len(known) <= LISTED or where == "known":
        return f"{message}; {where}: {', '.join(known)}"
    return f"{message}; {where}"


class Registry(Generic[T]):
    """Names to entries of one kind.

    Args:
        kind: What an entry is, for messages: ``"recipe"``, ``"model family"``.
        entry_point_group: The entry-point group other packages add entries through.
        entry_points: ``"modules"``: each entry point names a module that registers its entries when imported;
            every one is imported with ``modules`` on the first lookup. ``"entries"``: each entry point is one
            entry under the entry point's name (``name = "package.module:builder"``), loaded when first asked for.
        modules: Built-in modules that register their entries when imported, on the first lookup. (default: none)
        built_in: Built-in entries as ``name -> "module:attribute"``, imported when first asked for; a name given
            here cannot be registered. (default: none)
        where: How the message for an unknown name introduces the known ones, or, for a catalogue longer than
            `LISTED`, the hint that replaces them (`unknown_name`). (default: ``"known"``)
    """

    def __init__(
        self,
        kind: str,
        *,
        entry_point_group: str,
        entry_points: Literal["modules", "entries"],
        modules: Iterable[str] = (),
        built_in: Mapping[str, str] | None = None,
        where: str = "known",
    ) -> None:
        if entry_points not in ("modules", "entries"):
            raise ValueError(f"entry_points must be 'modules' or 'entries', got {entry_points!r}")
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._entry_points = entry_points
        self._modules = tuple(modules)
        self._built_in = dict(built_in or {})
        self._where = where
        self._entries: dict[str, T] = {}
        self._discovered = False

    def register(self, name: str, entry: T) -> T:
        """Adds ``entry`` under ``name`` and returns it.

        Raises:
            KeyError: ``name`` is registered already, or is a built-in name.
        """
        if name in self._entries or name in self._built_in:
            raise KeyError(f"a {self.kind} named {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        """The entry named ``name``, importing what it comes from the first time.

        Raises:
            ValueError: no entry has that name; the message names up to three close ones (`unknown_name`).
        """
        self._discover()
        if name in self._entries:
            return self._entries[name]
        if name in self._built_in:
            module, _, attribute = self._built_in[name].partition(":")
            entry = getattr(importlib.import_module(module), attribute)
        else:
            found = self._named_entry_points(name)
            if not found:
                raise ValueError(unknown_name(self.kind, name, self.names(), self._where))
            entry = next(iter(found)).load()
        self._entries[name] = entry
        return entry

    def names(self, pattern: str = "*") -> list[str]:
        """The names matching the glob ``pattern``, sorted, without loading any entry that is not loaded yet."""
        self._discover()
        names = {*self._entries, *self._built_in, *(entry_point.name for entry_point in self._named_entry_points())}
        return [name for name in sorted(names) if fnmatch.fnmatchcase(name, pattern)]

    def list(self, pattern: str = "*") -> list[T]:
        """The entries whose name matches the glob ``pattern``, sorted by name (loading them)."""
        return [self.get(name) for name in self.names(pattern)]

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"

    def _named_entry_points(self, name: str | None = None) -> importlib.metadata.EntryPoints | tuple[()]:
        """The entry points that are entries (``entry_points="entries"``), all or those named ``name``."""
        if self._entry_points != "entries":
            return ()
        if name is None:
            return importlib.metadata.entry_points(group=self.entry_point_group)
        return importlib.metadata.entry_points(group=self.entry_point_group, name=name)

    def _discover(self) -> None:
        """Imports the built-in modules and, with ``entry_points="modules"``, every entry point's module, once."""
        if self._discovered:
            return
        self._discovered = True
        for module in self._modules:
            importlib.import_module(module)
        if self._entry_points == "modules":
            for entry_point in importlib.metadata.entry_points(group=self.entry_point_group):
                entry_point.load()
