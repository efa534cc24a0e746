"""The memory backend follows the SPI."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from trio_lease import LeaseRecord
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import check_backend

pytestmark = pytest.mark.anyio


async def test_memory_backend_passes_conformance() -> None:
    """MemoryBackend clients sharing one MemoryStore pass check_backend."""
    store = MemoryStore()
    await check_backend(lambda: MemoryBackend(store))


async def test_names_lists_every_record_of_the_store() -> None:
    """MemoryBackend.names() lists the records of its store, shared by its backends; a
    backend's foreign_names() is empty by default."""
    store = MemoryStore()
    first, second = MemoryBackend(store), MemoryBackend(store)
    assert await first.names() == []
    now = datetime.now(UTC)
    for name in ("b", "a"):
        await first.create(LeaseRecord(name, "me_1", 15.0, 1, now, now))
    assert await second.names() == ["a", "b"]
    assert await second.foreign_names() == []
