"""What the shared-watch tests of the real stores (SQLite, etcd) have in common: running a
feed, waiting on real time, and a foreign write that must end a grant through the watch."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import pytest
from anyio.abc import TaskGroup

from trio_lease import (
    Lease,
    LeaseBackend,
    LeaseConfigError,
    LeaseLost,
    LeaseRecord,
    LeaseSettings,
)
from trio_lease._abc import Watched, WatchFeed

#: Renewals far apart (20 s) and records long-lived: only the watch can act within a test.
SLOW = LeaseSettings(heartbeat_timeout=60, heartbeat_interval=20, lease_operation_timeout=2)
LIMIT = 30  # seconds: a hang guard, never a timing assert
Published = list[tuple[str, LeaseRecord | None]]


async def until(condition: Callable[[], bool]) -> None:
    """Wait (polling) until ``condition()`` holds."""
    while not condition():
        await anyio.sleep(0.01)


def start_waiters(tg: TaskGroup, backend: LeaseBackend, count: int) -> list[int]:
    """Start ``count`` tasks in ``tg``, task i waiting for lease ``job{i}`` of ``backend``
    (settings :data:`SLOW`); returns the list each appends its i to once granted."""
    acquired: list[int] = []

    async def wait(i: int) -> None:
        async with Lease(f"job{i}", "me", backend, SLOW).held():
            acquired.append(i)

    for i in range(count):
        tg.start_soon(wait, i)
    return acquired


@contextlib.asynccontextmanager
async def running(feed: WatchFeed, *names: str) -> AsyncIterator[Published]:
    """Run ``feed`` on ``names`` within the hang guard; yield the list of what it publishes."""
    watched = Watched()
    for name in names:
        watched.add(name)
    published: Published = []
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(feed.run, watched, lambda name, state: published.append((name, state)))
            yield published
            tg.cancel_scope.cancel()


async def refused_after(
    feed: WatchFeed, change: Callable[[], Awaitable[object]]
) -> tuple[Published, LeaseConfigError]:
    """Run ``feed`` on lease job; once it has published one state, ``change()`` the file; wait
    until the run ends in LeaseConfigError. Returns what it published and that error."""
    watched = Watched()
    watched.add("job")
    published: Published = []
    failed: list[LeaseConfigError] = []

    async def follow() -> None:
        try:
            await feed.run(watched, lambda name, state: published.append((name, state)))
        except LeaseConfigError as exc:
            failed.append(exc)

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await until(lambda: len(published) == 1)
            await change()
            await until(lambda: bool(failed))
    return published, failed[0]


async def a_foreign_write_cancels_the_holder(mine: LeaseBackend, other: LeaseBackend) -> None:
    """``other`` writes another holder into ``mine``'s grant: the scope ends in LeaseLost and
    ``mine`` sent no renewal (the first is 20 s on): the watch ended it."""
    updates = [0]
    update = mine.update

    async def counted(record: LeaseRecord, expected_version: str) -> LeaseRecord:
        updates[0] += 1
        return await update(record, expected_version)

    mine.update = counted  # type: ignore[method-assign]
    async with mine, other:
        with pytest.raises(LeaseLost), anyio.fail_after(LIMIT):
            async with Lease("job", "me", mine, SLOW).held():
                current = await other.get("job")
                assert current is not None and current.holder
                taken = dataclasses.replace(
                    current, holder="intruder", fencing_token=current.fencing_token + 1
                )
                await other.update(taken, current.version)
                await anyio.sleep_forever()
    assert updates[0] == 0
