"""The conformance suite (``trio_lease.testing.check_backend``) passes on every backend, and
fails, naming the rule, on a backend that breaks one.

``every_world`` (tests/conftest.py) gives the memory backend, the Kubernetes backend on the
in-process emulator (both lease kinds), SQLite and a real etcd, on asyncio and trio.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from collections.abc import AsyncIterator, Callable

import anyio
import anyio.lowlevel
import pytest

from tests.conftest import World
from trio_lease import ConflictError, LeaseBackend, LeaseRecord
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import BackendConformanceError, check_backend

pytestmark = pytest.mark.anyio


async def test_backend_passes_conformance(every_world: World) -> None:
    """Clients of one store of each backend pass check_backend."""
    await check_backend(every_world.new_backend)


# -- backends that break one rule each ------------------------------------------------------------


class MissingReadsAsRecord(MemoryBackend):
    async def get(self, name: str) -> LeaseRecord | None:
        return await super().get(name) or LeaseRecord(name=name)


class CreateWithoutVersion(MemoryBackend):
    async def create(self, record: LeaseRecord) -> LeaseRecord:
        return dataclasses.replace(await super().create(record), version="")


class CreateEchoesAnotherHolder(MemoryBackend):
    async def create(self, record: LeaseRecord) -> LeaseRecord:
        return dataclasses.replace(await super().create(record), holder="someone-else")


class CreateOverwrites(MemoryBackend):
    async def create(self, record: LeaseRecord) -> LeaseRecord:
        current = await self.get(record.name)
        if current is None:
            return await super().create(record)
        return await super().update(record, current.version)


class UpdateKeepsVersion(MemoryBackend):
    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        stored = await super().update(record, expected_version)
        return dataclasses.replace(stored, version=expected_version)


class UpdateIgnoresVersion(MemoryBackend):
    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        current = await self.get(record.name)
        return await super().update(record, current.version if current else expected_version)


class UpdateCreatesMissing(MemoryBackend):
    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        if await self.get(record.name) is None:
            return await super().create(record)
        return await super().update(record, expected_version)


def _commit(store: MemoryStore, record: LeaseRecord) -> LeaseRecord:
    stored = dataclasses.replace(record, version=secrets.token_hex(8))
    store.records[record.name] = stored
    return stored


class CreateCheckThenWrite(MemoryBackend):
    """Checks for the record, yields to other tasks, then writes: not atomic."""

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        if record.name in self.store.records:
            raise ConflictError("exists")
        await anyio.lowlevel.checkpoint()
        return _commit(self.store, record)


class UpdateCheckThenWrite(MemoryBackend):
    """Compares the version, yields to other tasks, then writes: not atomic."""

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        current = self.store.records.get(record.name)
        if current is None or current.version != expected_version:
            raise ConflictError("conflict")
        await anyio.lowlevel.checkpoint()
        return _commit(self.store, record)


class WatchSeesNoChange(MemoryBackend):
    """An old-style watch (an async generator): the core runs it through its adapter."""

    async def watch(self, name: str) -> AsyncIterator[LeaseRecord | None]:  # type: ignore[override]
        yield await self.get(name)
        await anyio.sleep_forever()


class UpdateDropsHandoverTo(MemoryBackend):
    """Stores every field but handover_to (a backend written before cooperative handover)."""

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        return await super().update(dataclasses.replace(record, handover_to=""), expected_version)


class UpdateEchoesButDropsHandoverTo(MemoryBackend):
    """Returns the record it was given but stores it without handover_to."""

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        stored = await super().update(dataclasses.replace(record, handover_to=""), expected_version)
        return dataclasses.replace(stored, handover_to=record.handover_to)


class UpdateKeepsOldHandoverTo(MemoryBackend):
    """Never clears a handover request: an update writing "" keeps the stored one."""

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        current = self.store.records.get(record.name)
        if current is not None and not record.handover_to:
            record = dataclasses.replace(record, handover_to=current.handover_to)
        return await super().update(record, expected_version)


class WatchDropsHandoverTo(MemoryBackend):
    """An old-style watch (an async generator) built on the new form of its base class."""

    async def watch(self, name: str) -> AsyncIterator[LeaseRecord | None]:  # type: ignore[override]
        async with super().watch(name) as records:
            async for state in records:
                yield state if state is None else dataclasses.replace(state, handover_to="")


def _shared(cls: type[MemoryBackend]) -> Callable[[], object]:
    store = MemoryStore()
    return lambda: cls(store)


BROKEN = [
    (lambda: object, "factory must return a LeaseBackend"),
    (lambda: _shared(MissingReadsAsRecord), "get of a missing record returns None"),
    (lambda: _shared(CreateWithoutVersion), "create returns the record with a version"),
    (lambda: _shared(CreateEchoesAnotherHolder), "create returns what it stored, as the core"),
    (lambda: MemoryBackend, "a created record is visible to other clients"),
    (lambda: _shared(CreateOverwrites), "create of an existing record raises ConflictError"),
    (lambda: _shared(UpdateKeepsVersion), "every write produces a new version"),
    (lambda: _shared(UpdateIgnoresVersion), "update with a stale version raises ConflictError"),
    (lambda: _shared(UpdateCreatesMissing), "update of a missing record raises ConflictError"),
    (lambda: _shared(CreateCheckThenWrite), "exactly one concurrent create wins"),
    (lambda: _shared(UpdateCheckThenWrite), "exactly one concurrent update from a version wins"),
    (lambda: _shared(WatchSeesNoChange), "watch yields the current state at once and a change"),
    (lambda: _shared(UpdateDropsHandoverTo), "update stores handover_to and returns it"),
    (lambda: _shared(UpdateEchoesButDropsHandoverTo), "get returns the handover_to an update"),
    (lambda: _shared(UpdateKeepsOldHandoverTo), 'an update writing handover_to "" clears it'),
    (lambda: _shared(WatchDropsHandoverTo), "watch yields the handover_to an update stored"),
]


@pytest.mark.parametrize(("make_factory", "rule"), BROKEN, ids=[rule for _, rule in BROKEN])
async def test_a_broken_rule_is_reported(
    make_factory: Callable[[], Callable[[], object]], rule: str
) -> None:
    """A backend breaking one rule of the SPI fails check_backend with that rule's message."""
    factory = make_factory()
    with pytest.raises(BackendConformanceError, match=f"^{re.escape(rule)}"):
        await check_backend(factory, watch_timeout=1.0)  # type: ignore[arg-type]


async def test_conforming_memory_backend_raises_nothing() -> None:
    """The control: the unbroken memory backend passes with the same arguments."""
    store = MemoryStore()
    backend: Callable[[], LeaseBackend] = lambda: MemoryBackend(store)  # noqa: E731
    await check_backend(backend, watch_timeout=1.0)
