"""Named entries of one kind (presets, run kinds, run sources, commands), found by name.

A :class:`Registry` is declared with a table ``{name: "package.module"}`` or
``{name: "package.module:attribute"}`` saying where each entry is defined. Nothing is imported
until an entry is first looked up: :meth:`Registry.get` then imports the module and takes the
attribute as the entry, or, for a bare module, expects the import to have added the entry with
:meth:`Registry.add` (a loop of presets, a task class definition). This is how a lower layer
reaches what a higher layer defines without importing it: the table holds names, not modules.
Entries may also be added without a table entry (a test's own run kind, say).

>>> sizes = Registry("size", {"pi": "math:pi", "e": "math:e"})
>>> sizes.names(), "pi" in sizes, "tau" in sizes
(['pi', 'e'], True, False)
>>> round(sizes.get("pi"), 4)
3.1416
>>> sizes.get("tau")
Traceback (most recent call last):
    ...
linearizer.errors.LinearizerError: unknown size 'tau'; known: pi, e
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Generic, TypeVar

from .errors import LinearizerError

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries called ``what`` (as error messages name them), by name: those ``homes`` declares,
    imported on first look-up, and those :meth:`add` registers."""

    def __init__(self, what: str, homes: Mapping[str, str] | None = None) -> None:
        self.what = what
        self.homes = dict(homes or {})
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> None:
        """Register ``entry`` as ``name`` (replacing an earlier one)."""
        self._entries[name] = entry

    def setdefault(self, name: str, entry: T) -> T:
        """The entry registered as ``name``, else ``entry`` registered; imports nothing, so a
        module can call it while it is being imported for this very name."""
        return self._entries.setdefault(name, entry)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is declared or registered (without importing anything)."""
        return name in self.homes or name in self._entries

    def names(self) -> list[str]:
        """Declared names in table order, then the others in the order they were added."""
        return list(self.homes) + [n for n in self._entries if n not in self.homes]

    def loaded(self, name: str) -> bool:
        """Whether ``name`` has been registered (its module imported, for a declared one)."""
        return name in self._entries

    def get(self, name: str) -> T:
        """The entry ``name``, importing its module on first use; a one-line
        :class:`~linearizer.errors.LinearizerError` naming the known ones if there is none."""
        if name not in self._entries and name in self.homes:
            self._load(name)
        if name not in self._entries:
            raise LinearizerError(self.unknown(name))
        return self._entries[name]

    def unknown(self, name: str) -> str:
        """The one-line message for a name that is neither declared nor registered."""
        return f"unknown {self.what} '{name}'; known: {', '.join(self.names()) or 'none'}"

    def _load(self, name: str) -> None:
        module, _, attribute = self.homes[name].partition(":")
        found = importlib.import_module(module)
        if attribute:
            self._entries[name] = getattr(found, attribute)
        elif name not in self._entries:  # a wrong table, not a user's mistake
            raise LookupError(f"importing {module} registered no {self.what} '{name}'")

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {len(self.names())} names)"


__all__ = ["Registry"]
