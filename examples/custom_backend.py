"""A custom backend in 40 lines, proven with the conformance suite, then used by a Lease.

    python examples/custom_backend.py

A backend is only a compare-and-swap store of records (trio_lease.abc); expiry, deadlines,
fencing and reentrancy come from the core, so this dictionary-backed store gets all of them.
"""

from __future__ import annotations

import dataclasses
import itertools

import anyio
import anyio.lowlevel

from trio_lease import ConflictError, Lease, LeaseBackend, LeaseRecord, LeaseSettings
from trio_lease.testing import check_backend


class DictStore:
    def __init__(self) -> None:
        self.records: dict[str, LeaseRecord] = {}
        self.versions = itertools.count(1)


class DictBackend(LeaseBackend):
    """Each DictBackend is one client of a shared DictStore."""

    def __init__(self, store: DictStore) -> None:
        self.store = store

    async def get(self, name: str) -> LeaseRecord | None:
        await anyio.lowlevel.checkpoint()
        return self.store.records.get(name)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        await anyio.lowlevel.checkpoint()
        if record.name in self.store.records:
            raise ConflictError(f"{record.name!r} exists")
        return self._put(record)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        await anyio.lowlevel.checkpoint()
        current = self.store.records.get(record.name)
        if current is None or current.version != expected_version:
            raise ConflictError(f"{record.name!r} moved on")
        return self._put(record)

    def _put(self, record: LeaseRecord) -> LeaseRecord:
        stored = dataclasses.replace(record, version=str(next(self.store.versions)))
        self.store.records[record.name] = stored
        return stored


async def main() -> None:
    store = DictStore()
    await check_backend(lambda: DictBackend(store))
    print("DictBackend passes check_backend")
    settings = LeaseSettings(
        heartbeat_timeout="15s", heartbeat_interval="1.5s", lease_operation_timeout="500ms"
    )
    lease = Lease("demo", "me", DictBackend(store), settings)
    async with lease.held() as grant:
        print("held with fencing token", grant.fencing_token)


if __name__ == "__main__":
    anyio.run(main)
