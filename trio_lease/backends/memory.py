"""A process-local backend: records in a dict, for tests and single-process programs.

Several :class:`MemoryBackend` objects can share one :class:`MemoryStore` (each then behaves like
a separate client of the same server). Watches are woken by an in-process event; the shared
watch (:class:`MemoryFeed`) is told of every commit of the store and publishes the watched ones.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Hashable

import anyio
import anyio.lowlevel

from .._abc import LeaseBackend, LeaseRecord, Publish, Watched, WatchFeed
from .._exceptions import ConflictError
from ..abc import Changes, Emit

__all__ = ["MemoryBackend", "MemoryFeed", "MemoryStore"]


class MemoryStore:
    """The shared state behind one or more :class:`MemoryBackend` objects."""

    def __init__(self) -> None:
        #: The stored records, by lease name.
        self.records: dict[str, LeaseRecord] = {}
        self._versions: itertools.count[int] = itertools.count(1)
        self._changed: dict[str, anyio.Event] = {}
        self._listeners: list[Publish] = []

    def _commit(self, record: LeaseRecord) -> LeaseRecord:
        stored = dataclasses.replace(record, version=str(next(self._versions)))
        self.records[record.name] = stored
        self._tell(record.name, stored)
        return stored

    def _tell(self, name: str, state: LeaseRecord | None) -> None:
        event = self._changed.pop(name, None)
        if event is not None:
            event.set()
        for listener in list(self._listeners):
            listener(name, state)

    def delete(self, name: str) -> None:
        """Remove a record (an operator's action; the core never deletes)."""
        if self.records.pop(name, None) is not None:
            self._tell(name, None)

    def changed(self, name: str) -> anyio.Event:
        """An event set at the next change of ``name``."""
        event = self._changed.get(name)
        if event is None:
            event = self._changed[name] = anyio.Event()
        return event


class MemoryBackend(LeaseBackend):
    """Stores records in a :class:`MemoryStore` (a new private one by default)."""

    supports_watch: bool = True

    def __init__(self, store: MemoryStore | None = None) -> None:
        #: The records, possibly shared with other MemoryBackend objects.
        self.store: MemoryStore = store if store is not None else MemoryStore()

    @property
    def store_key(self) -> Hashable:
        return ("memory", id(self.store))

    async def get(self, name: str) -> LeaseRecord | None:
        await anyio.lowlevel.checkpoint()
        return self.store.records.get(name)

    async def names(self) -> list[str]:
        await anyio.lowlevel.checkpoint()
        return sorted(self.store.records)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        await anyio.lowlevel.checkpoint()
        if record.name in self.store.records:
            raise ConflictError(f"lease {record.name!r} already exists")
        return self.store._commit(record)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        await anyio.lowlevel.checkpoint()
        current = self.store.records.get(record.name)
        if current is None:
            raise ConflictError(f"lease {record.name!r} does not exist")
        if current.version != expected_version:
            raise ConflictError(
                f"lease {record.name!r} is at version {current.version}, not {expected_version}"
            )
        return self.store._commit(record)

    def watch_feed(self) -> WatchFeed | None:
        """The store's commits (None in a subclass with a watch of its own: that is used)."""
        if type(self).watch is not MemoryBackend.watch:
            return None
        return MemoryFeed(self.store)

    def watch(self, name: str) -> Changes[LeaseRecord | None]:
        """The current record, then the record after every change."""
        follow = functools.partial(self._follow, name)
        return Changes(follow, what=f"{type(self).__name__}.watch({name!r})")

    async def _follow(self, name: str, emit: Emit[LeaseRecord | None]) -> None:
        while True:
            changed = self.store.changed(name)
            await emit(self.store.records.get(name))
            await changed.wait()


class MemoryFeed(WatchFeed):
    """The shared watch of a :class:`MemoryStore`: every commit, published as it happens."""

    def __init__(self, store: MemoryStore) -> None:
        self.store: MemoryStore = store
        #: The version last published per name (None: absent): the resume point between runs.
        self._published: dict[str, str | None] = {}

    async def run(self, watched: Watched, publish: Publish) -> None:
        def listener(name: str, state: LeaseRecord | None) -> None:
            if name in watched:
                self._published[name] = state.version if state is not None else None
                publish(name, state)

        self.store._listeners.append(listener)
        # Changes made while no run was active (the hosting subscriber left): publish them.
        for name in watched:
            state = self.store.records.get(name)
            if self._published.get(name, "") != (state.version if state is not None else None):
                listener(name, state)
        try:
            await anyio.sleep_forever()
        finally:
            self.store._listeners.remove(listener)
