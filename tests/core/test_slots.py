"""In-flight request slots: renewals and releases are served before acquisitions."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

from trio_lease import Lease, LeaseSettings
from trio_lease._abc import LeaseRecord
from trio_lease._exceptions import BackendUnavailable
from trio_lease._slots import Slots, Urgency, is_urgent, urgent, urgent_deadline
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


async def test_a_slot_waiter_is_a_bare_future_on_asyncio(anyio_backend_name: str) -> None:
    """On asyncio a waiter is a future itself (a request waiting for a slot holds nothing
    else: what the dozens of renewals waiting at a tick of the grid hold sets off the
    collector's young collections); on trio awaiting it parks the task. Either way the slot
    handed over ends the wait, and a handed waiter is done and not cancelled."""
    import asyncio

    from trio_lease._loops import current

    waiter = current().waiter()
    if anyio_backend_name == "asyncio":
        assert type(waiter) is asyncio.Future  # type: ignore[comparison-overlap]
    assert not waiter.done()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_await, waiter)
        await anyio.wait_all_tasks_blocked()
        waiter.set_result(None)
    assert waiter.done()
    assert not waiter.cancelled()


async def _await(waiter: object) -> None:
    await waiter  # type: ignore[misc]


async def test_a_waiter_whose_wait_was_cancelled_is_skipped_and_the_slot_goes_on() -> None:
    """A waiter cancelled in the queue is never handed the slot: the next one gets it."""
    slots = Slots(1)
    assert slots.try_acquire()
    got: list[str] = []

    async def wait(name: str) -> None:
        await slots.acquire()
        got.append(name)
        slots.release()

    async with anyio.create_task_group() as tg:
        first = anyio.CancelScope()
        tg.start_soon(_in_scope, first, wait, "first")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(wait, "second")
        await anyio.wait_all_tasks_blocked()
        assert slots.waiting == 2
        first.cancel()
        await anyio.wait_all_tasks_blocked()
        assert slots.waiting == 1
        slots.release()
    assert got == ["second"]
    assert repr(slots) == "<Slots 1/1 free, 0 waiting>"


async def _in_scope(scope: anyio.CancelScope, wait: Any, name: str) -> None:
    with scope:
        await wait(name)


async def test_try_acquire_takes_a_free_slot_and_never_one_that_is_taken() -> None:
    slots = Slots(1)
    assert slots.try_acquire()
    assert not slots.try_acquire()  # none free: nothing taken, nothing queued
    assert repr(slots) == "<Slots 0/1 free, 0 waiting>"
    got: list[str] = []

    async def waiter() -> None:
        await slots.acquire()
        got.append("waiter")

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.01)
        assert slots.waiting == 1
        slots.release()  # handed to the waiter, not left free for a try_acquire
        assert not slots.try_acquire()
    assert got == ["waiter"]
    slots.release()
    assert slots.try_acquire()


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


async def _queue_by(slots: Slots, order: list[str], name: str, deadline: float | None) -> None:
    if deadline is None:
        await slots.acquire()
    else:
        with urgent(deadline):
            await slots.acquire()
    order.append(name)
    await anyio.sleep(1)
    slots.release()


async def test_urgent_waiters_go_nearest_deadline_first() -> None:
    """Urgent waiters are served by their deadline, those without one last; then the rest."""
    slots = Slots(1)
    order: list[str] = []
    await slots.acquire()
    arrivals = (("plain", None), ("d30", 30.0), ("release", math.inf), ("d10", 10.0),
                ("d20", 20.0), ("d10-later", 10.0))
    async with anyio.create_task_group() as tg:
        for name, deadline in arrivals:
            tg.start_soon(_queue_by, slots, order, name, deadline)
            await anyio.sleep(0.01)  # arrive in this order
        assert slots.waiting == 6
        slots.release()
    assert order == ["d10", "d10-later", "d20", "d30", "release", "plain"]
    assert repr(slots) == "<Slots 1/1 free, 0 waiting>"


async def test_an_urgency_moved_between_requests_orders_each_wait_by_its_value_then() -> None:
    """A task marked once with an Urgency (a holder's renewal task) waits with the deadline the
    Urgency holds when it starts waiting; moving it later does not reorder a wait in progress,
    and the next request waits with the new value."""
    slots = Slots(1)
    order: list[str] = []
    moving = Urgency(30.0)

    async def marked_task() -> None:
        with urgent(moving):
            await slots.acquire()  # waits with 30
            order.append(f"moving {urgent_deadline()}")
            slots.release()
            moving.deadline = 5.0
            await anyio.sleep(0.05)
            await slots.acquire()  # waits with 5, ahead of the 10 that arrived first
            order.append(f"moving {urgent_deadline()}")
            slots.release()

    await slots.acquire()
    async with anyio.create_task_group() as tg:
        tg.start_soon(marked_task)
        await anyio.sleep(0.01)
        tg.start_soon(_queue_by, slots, order, "d20", 20.0)
        await anyio.sleep(0.01)
        moving.deadline = 1.0  # too late for the wait already queued with 30
        slots.release()  # to d20 (queued with 20, against the marked task's 30)
        await slots.acquire()  # waits (not urgent) until d20 and the marked task are done
        tg.start_soon(_queue_by, slots, order, "d10", 10.0)
        await anyio.sleep(0.1)  # d10 waits with 10; the marked task waits again, now with 5
        slots.release()
    assert order == ["d20", "moving 1.0", "moving 5.0", "d10"]


async def test_a_cancelled_urgent_waiter_leaves_the_queue() -> None:
    """An urgent waiter cancelled before its turn is no longer counted nor handed a slot."""
    slots = Slots(1)
    order: list[str] = []
    await slots.acquire()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_queue_by, slots, order, "later", 20.0)
        tg.start_soon(_queue_by, slots, order, "earlier", 10.0)
        await anyio.sleep(0.01)
        async with anyio.create_task_group() as inner:
            doomed = anyio.CancelScope()

            async def wait() -> None:
                with doomed, urgent(5.0):
                    await slots.acquire()
                    order.append("doomed")  # on asyncio a completed wait is not cancelled
                    slots.release()

            inner.start_soon(wait)
            await anyio.sleep(0.01)
            assert slots.waiting == 3
            doomed.cancel()
        assert slots.waiting == 2
        slots.release()
    assert order == ["earlier", "later"]
    assert repr(slots) == "<Slots 1/1 free, 0 waiting>"


class _Deadlines(MemoryBackend):
    """Records the urgency deadline of each renewal; fails the renewals at the times given."""

    def __init__(self, fail_at: tuple[float, ...]) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.marks: list[tuple[float, float | None]] = []

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        now = anyio.current_time()
        if record.holder:  # not the release
            self.marks.append((now, urgent_deadline()))
        if any(start <= now < start + 0.5 for start in self.fail_at):
            raise BackendUnavailable("down for the test")
        return await super().update(record, expected_version)


async def test_a_renewal_carries_its_lease_deadline_and_a_retry_the_same_one() -> None:
    """Each renewal waits for a slot with its grant's deadline; a retry keeps the older one."""
    settings = LeaseSettings(
        heartbeat_timeout=10, heartbeat_interval=1, lease_operation_timeout=0.2
    )
    backend = _Deadlines(fail_at=())
    async with Lease("job", "a", backend, settings).held() as grant:
        start = anyio.current_time()
        backend.fail_at = (start + 3.0,)  # the renewal due at 3 s and its retries fail
        await anyio.sleep(6)
        assert not grant.lost
    marks = [(at - start, mark) for at, mark in backend.marks if mark is not None]
    assert len(marks) >= 5
    for at, mark in marks:
        assert at < mark - start <= at + 10, (at, mark)  # the deadline of the grant then
    failed = [mark for at, mark in marks if 3.0 <= at < 3.5]
    assert len(failed) >= 2, marks  # the first attempt and at least one retry
    assert len(set(failed)) == 1, "a retry keeps the deadline of the renewal that failed"
    after = [mark for at, mark in marks if at >= 3.5]
    assert after[0] == failed[0], "the retry that succeeds still waits with the old deadline"
    assert all(mark > failed[0] for mark in after[1:]), "then the renewed one"


async def test_hundreds_of_urgent_waiters_cancelled_together_leave_and_the_next_is_served() -> None:
    """A stalled server's bound cancels every renewal waiting at once: each leaves the queue
    (found by its entry, not by a scan), none is handed a slot, and the next waiter gets it."""
    slots = Slots(1)
    served: list[str] = []
    assert slots.try_acquire()

    async def wait(name: str, deadline: float) -> None:
        with urgent(deadline):
            await slots.acquire()
        served.append(name)
        slots.release()

    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as stalled:
            async with anyio.create_task_group() as doomed:
                for index in range(300):
                    doomed.start_soon(wait, f"doomed {index}", 1.0 + index)
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(wait, "next", 1000.0)
                await anyio.wait_all_tasks_blocked()
                assert slots.waiting == 301
                stalled.cancel()
        assert slots.waiting == 1
        slots.release()
    assert served == ["next"]
    assert repr(slots) == "<Slots 1/1 free, 0 waiting>"
