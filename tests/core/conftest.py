"""Fixtures for the core tests: a World is a shared store, its settings and its clients.

Guarantee tests take ``world`` and use only the public API plus ``world.new_backend()``, so the
same tests run on every backend a world is defined for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from trio_lease import Lease, LeaseBackend, LeaseSettings
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import FaultyBackend

#: L = 15 s, R = 1.5 s, T = 0.5 s, so D = 10 s and the safety margin is about 4.98 s.
SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)


@dataclasses.dataclass
class World:
    """A store shared by several clients, and the settings leases use on it."""

    name: str
    settings: LeaseSettings
    new_backend: Callable[[], LeaseBackend]
    #: Slack (seconds) that timing assertions allow for scheduling jitter and request latency:
    #: 0 on virtual time, where every assertion is exact; a small margin on real time (a real
    #: server). Guarantee tests use it only where real time can add to what virtual time does.
    tolerance: float = 0.0
    opened: list[LeaseBackend] = dataclasses.field(default_factory=list)

    def backend(self) -> LeaseBackend:
        backend = self.new_backend()
        self.opened.append(backend)
        return backend

    def faulty(self, **faults: Any) -> FaultyBackend:
        return FaultyBackend(self.backend(), **faults)

    def lease(
        self, owner: str, *, backend: LeaseBackend | None = None, name: str = "job", **kw: Any
    ) -> Lease:
        return Lease(name, owner, backend or self.backend(), self.settings, **kw)

    async def aclose(self) -> None:
        for backend in self.opened:
            await backend.aclose()


@pytest.fixture
async def world() -> AsyncIterator[World]:
    """The memory backend on virtual time (every test runs on asyncio and trio)."""
    store = MemoryStore()
    w = World("memory", SETTINGS, lambda: MemoryBackend(store))
    yield w
    await w.aclose()
