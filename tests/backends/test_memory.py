"""The memory backend follows the SPI."""

from __future__ import annotations

import pytest

from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import check_backend

pytestmark = pytest.mark.anyio


async def test_memory_backend_passes_conformance() -> None:
    """MemoryBackend clients sharing one MemoryStore pass check_backend."""
    store = MemoryStore()
    await check_backend(lambda: MemoryBackend(store))
