"""In-flight request slots: renewals and releases are served before acquisitions."""

from __future__ import annotations

import anyio
import pytest

from trio_lease import Lease, LeaseSettings
from trio_lease._abc import LeaseRecord
from trio_lease._slots import Slots, is_urgent, urgent
from trio_lease.backends.memory import MemoryBackend

pytestmark = pytest.mark.anyio


async def _queue(slots: Slots, order: list[str], name: str, marked: bool = False) -> None:
    if marked:
        with urgent():
            await slots.acquire()
    else:
        await slots.acquire()
    order.append(name)
    await anyio.sleep(1)
    slots.release()


async def test_urgent_waiters_go_first_then_arrival_order() -> None:
    slots = Slots(1)
    order: list[str] = []
    await slots.acquire()  # busy: everyone below waits
    async with anyio.create_task_group() as tg:
        for name, marked in (("a", False), ("b", False), ("r1", True), ("c", False), ("r2", True)):
            tg.start_soon(_queue, slots, order, name, marked)
            await anyio.sleep(0.01)  # arrive in this order
        assert slots.waiting == 5
        slots.release()
    assert order == ["r1", "r2", "a", "b", "c"]
    assert repr(slots) == "<Slots 1/1 free, 0 waiting>"


async def test_a_free_slot_is_taken_without_a_checkpoint() -> None:
    slots = Slots(2)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await slots.acquire()  # would raise at a checkpoint: a cancelled scope
        await slots.acquire()
    assert not scope.cancelled_caught
    assert repr(slots) == "<Slots 0/2 free, 0 waiting>"


async def _doomed(slots: Slots, order: list[str], scopes: list[anyio.CancelScope]) -> None:
    with anyio.CancelScope() as scope:
        scopes.append(scope)
        await slots.acquire()
        order.append("doomed")  # on asyncio a completed wait is not cancelled: it got the slot
        slots.release()


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    slots = Slots(1)
    order: list[str] = []
    scopes: list[anyio.CancelScope] = []
    await slots.acquire()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_queue, slots, order, "first")
        await anyio.sleep(0.01)
        tg.start_soon(_doomed, slots, order, scopes)
        await anyio.sleep(0.01)
        tg.start_soon(_queue, slots, order, "last")
        await anyio.sleep(0.01)
        assert slots.waiting == 3
        scopes[0].cancel()  # leaves the queue before its turn
        await anyio.sleep(0.01)
        assert slots.waiting == 2
        slots.release()
    assert order == ["first", "last"]
    assert repr(slots) == "<Slots 1/1 free, 0 waiting>"


async def test_a_slot_handed_to_a_waiter_cancelled_in_the_same_instant_goes_to_the_next() -> None:
    slots = Slots(1)
    order: list[str] = []
    scopes: list[anyio.CancelScope] = []
    await slots.acquire()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_doomed, slots, order, scopes)
        await anyio.sleep(0.01)
        tg.start_soon(_queue, slots, order, "next")
        await anyio.sleep(0.01)
        scopes[0].cancel()  # cancelled, and before it runs again ...
        slots.release()  # ... handed the slot: it must pass it on
    assert order == ["next"]
    assert repr(slots) == "<Slots 1/1 free, 0 waiting>"


def test_slots_need_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Slots(0)


class _Recording(MemoryBackend):
    """Records whether each write (and read) ran in an urgent context."""

    def __init__(self) -> None:
        super().__init__()
        self.updates: list[tuple[str, bool]] = []
        self.gets: list[bool] = []

    async def get(self, name: str) -> LeaseRecord | None:
        self.gets.append(is_urgent())
        return await super().get(name)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        self.updates.append((record.holder, is_urgent()))
        return await super().create(record)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        self.updates.append((record.holder, is_urgent()))
        return await super().update(record, expected_version)


async def test_the_core_marks_renewals_and_releases_urgent_and_acquisitions_not() -> None:
    backend = _Recording()
    settings = LeaseSettings(
        heartbeat_timeout=10, heartbeat_interval=1, lease_operation_timeout=0.2
    )
    async with Lease("job", "a", backend, settings).held():
        assert not is_urgent(), "the body does not inherit the mark"
        acquiring = list(backend.updates)
        await anyio.sleep(5)  # a few renewals
    after = backend.updates[len(acquiring) :]
    renewing = [write for write in after if write[0] != ""]
    assert acquiring and not any(flag for _, flag in acquiring)
    assert len(renewing) >= 2 and all(flag for _, flag in renewing)
    assert after[-1] == ("", True), "the release is urgent"
    assert backend.gets[-1] is True, "the release's read is urgent too"
