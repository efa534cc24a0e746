"""Registries kept per running event loop.

A process may run several event loops at once, one per thread (a trio program beside an asyncio
one, a test runner's loops). What the library keeps across leases (the grants held, the shared
watch of each backend object) holds locks, events and tasks that belong to the loop that made
them, so each loop keeps its own: a :class:`PerLoop` is a mapping whose contents are those of the
running event loop (anyio's :class:`~anyio.lowlevel.RunVar`), made empty on the loop's first use
and dropped with the loop. Outside any event loop it reads as empty, and writing raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import TypeVar

from anyio.lowlevel import RunVar

__all__ = ["PerLoop"]

K = TypeVar("K")
V = TypeVar("V")


class PerLoop(MutableMapping[K, V]):
    """A mapping of which each running event loop sees its own copy (see the module docstring)."""

    __slots__ = ("_make", "_name", "_var")

    def __init__(self, name: str, make: Callable[[], MutableMapping[K, V]]) -> None:
        self._var: RunVar[MutableMapping[K, V]] = RunVar(name)
        self._make = make
        self._name = name

    def _mine(self) -> MutableMapping[K, V]:
        """The running loop's mapping, made on its first use."""
        try:
            return self._var.get()
        except LookupError:
            mapping = self._make()
            self._var.set(mapping)
            return mapping

    def _seen(self) -> MutableMapping[K, V]:
        """The running loop's mapping, or an empty one outside any event loop."""
        try:
            return self._mine()
        except RuntimeError:  # no event loop: anyio's NoEventLoopError, or sniffio's error
            return {}

    def __getitem__(self, key: K) -> V:
        return self._seen()[key]

    def __setitem__(self, key: K, value: V) -> None:
        self._mine()[key] = value

    def __delitem__(self, key: K) -> None:
        del self._mine()[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._seen())

    def __len__(self) -> int:
        return len(self._seen())

    def __repr__(self) -> str:
        return f"<PerLoop {self._name}: {len(self)} in this event loop>"
