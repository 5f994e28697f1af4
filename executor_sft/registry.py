"""Named extension points: one table of name -> implementation per kind of thing users extend.

Retriever kinds, filter strata, rewards, model backends and executor tools each own a
`Registry`. Built-ins register themselves exactly as a user's code does, with
`REGISTRY.register("name")` as a decorator or a call. A config may also name an implementation
by its import path, `package.module:attr`, so a user's own file plugs in with no registration
call at all (the way verl resolves a tool by class path).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

from executor_sft.errors import ConfigError, UserError

T = TypeVar("T")


class UnknownNameError(UserError, ValueError):
    """A name that no registry entry and no importable `module:attr` path provides."""


def is_import_path(name: str) -> bool:
    """`package.module:attr` (a colon with text on both sides, no spaces)."""
    module, sep, attr = name.partition(":")
    return bool(sep and module and attr) and " " not in name


def import_path(name: str, what: str) -> object:
    """The object `package.module:attr` names (`attr` may be dotted: `mod:Class.method`)."""
    module_name, _, attr = name.partition(":")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownNameError(f"{what} {name!r}: cannot import module {module_name!r} ({exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UnknownNameError(f"{what} {name!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Name -> implementation, for one extension point (`what` names it in error messages)."""

    def __init__(self, what: str):
        self.what = what
        self._entries: dict[str, T] = {}

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...
    @overload
    def register(self, name: str, obj: T, *, replace: bool = False) -> T: ...

    def register(self, name: str, obj: T | None = None, *, replace: bool = False):
        """Add `obj` under `name` (or decorate it). Re-using a name is a bug unless `replace`."""

        def add(item: T) -> T:
            if not name or ":" in name:
                raise ValueError(f"{self.what} name {name!r}: use a plain name (no ':')")
            if name in self._entries and not replace and self._entries[name] is not item:
                raise ValueError(f"{self.what} {name!r} is already registered; pass replace=True")
            self._entries[name] = item
            return item

        return add if obj is None else add(obj)

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def get(self, name: str) -> T:
        """The entry `name`, or the object a `module:attr` path names."""
        if name in self._entries:
            return self._entries[name]
        if is_import_path(name):
            return import_path(name, self.what)  # type: ignore[return-value]
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UnknownNameError(
            f"unknown {self.what} {name!r}: {hint}choose from {list(self.names())} "
            "or give an import path 'package.module:attr'"
        )

    def get_instance(self, name: str, cls: type[T], shape: str) -> T:
        """`get`, checked to be a `cls` (an import path may name anything); `shape` is how the
        one-line `ConfigError` names what the entry should be."""
        entry = self.get(name)
        if not isinstance(entry, cls):
            raise ConfigError(f"{self.what} {name!r} is a {type(entry).__name__}, not an {shape}")
        return entry

    def check(self, name: str) -> str:
        """`name` if it resolves (for config validators), else `UnknownNameError`."""
        self.get(name)
        return name

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {list(self._entries)})"
