"""A lease's life played out on a memory store (virtual time), for the tests of what its
observers (a recorder, metrics, tracing) are told about it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import anyio
import pytest

from trio_lease import Lease, LeaseLost, LeaseObserver
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import FaultyBackend

from .conftest import SETTINGS


def takeover(store: MemoryStore, name: str = "job") -> None:
    """Another holder writes the record, as a contender that judged it expired would."""
    record = store.records[name]
    store._commit(
        dataclasses.replace(record, holder="intruder", fencing_token=record.fencing_token + 1)
    )


async def wait_behind_a_holder(
    observer: LeaseObserver,
    *,
    holding: float = 4,
    body: float = 0,
    meanwhile: Callable[[], object] = lambda: None,
) -> tuple[Lease, Lease]:
    """Lease "job": "a" holds it for ``holding`` s; from 0.1 s on "b" (told to ``observer``)
    waits for it, then holds it ``body`` s and releases it. ``meanwhile`` runs 1 s into b's
    wait. Returns (a's lease, b's lease) on one store."""
    store = MemoryStore()
    holder = Lease("job", "a", MemoryBackend(store), SETTINGS)
    waiter = Lease("job", "b", MemoryBackend(store), SETTINGS, observers=[observer])

    async def hold_for_a_while() -> None:
        async with holder.held():
            await anyio.sleep(holding)

    async def take() -> None:
        async with waiter.held():
            await anyio.sleep(body)

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_for_a_while)
        await anyio.sleep(0.1)
        tg.start_soon(take)
        await anyio.sleep(1)
        meanwhile()
    return holder, waiter


async def lose(lease: Lease, change: Callable[[MemoryStore], object]) -> None:
    """``lease`` (on a memory backend) is granted; ``change`` writes its store under it; the
    scope ends in LeaseLost within L."""
    backend = lease.backend
    assert isinstance(backend, MemoryBackend)
    with pytest.raises(LeaseLost):
        async with lease.held():
            change(backend.store)
            await anyio.sleep(SETTINGS.heartbeat_timeout)


def failing(backend: FaultyBackend) -> None:
    """Every request of ``backend`` fails from now on (BackendUnavailable)."""
    backend.error_rate = 1.0


async def fail_until_lost(
    observer: LeaseObserver, fail: Callable[[FaultyBackend], object] = failing
) -> FaultyBackend:
    """A lease told to ``observer``, on a FaultyBackend over memory, is granted; ``fail`` breaks
    the backend; the scope ends in LeaseLost within L. Returns the backend."""
    backend = FaultyBackend(MemoryBackend())
    lease = Lease("job", "me", backend, SETTINGS, observers=[observer])
    with pytest.raises(LeaseLost):
        async with lease.held():
            fail(backend)
            await anyio.sleep(SETTINGS.heartbeat_timeout)
    return backend
