"""A process-local backend: records in a dict, for tests and single-process programs.

Several :class:`MemoryBackend` objects can share one :class:`MemoryStore` (each then behaves like
a separate client of the same server). Watches are woken by an in-process event.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import AsyncIterator, Hashable

import anyio
import anyio.lowlevel

from .._abc import LeaseBackend, LeaseRecord
from .._exceptions import ConflictError

__all__ = ["MemoryBackend", "MemoryStore"]


class MemoryStore:
    """The shared state behind one or more :class:`MemoryBackend` objects."""

    def __init__(self) -> None:
        #: The stored records, by lease name.
        self.records: dict[str, LeaseRecord] = {}
        self._versions: itertools.count[int] = itertools.count(1)
        self._changed: dict[str, anyio.Event] = {}

    def _commit(self, record: LeaseRecord) -> LeaseRecord:
        stored = dataclasses.replace(record, version=str(next(self._versions)))
        self.records[record.name] = stored
        event = self._changed.pop(record.name, None)
        if event is not None:
            event.set()
        return stored

    def delete(self, name: str) -> None:
        """Remove a record (an operator's action; the core never deletes)."""
        self.records.pop(name, None)
        event = self._changed.pop(name, None)
        if event is not None:
            event.set()

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

    async def watch(self, name: str) -> AsyncIterator[LeaseRecord | None]:
        """Yield the current record, then the record after every change."""
        while True:
            changed = self.store.changed(name)
            yield self.store.records.get(name)
            await changed.wait()
