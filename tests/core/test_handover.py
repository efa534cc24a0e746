"""Cooperative handover: ask the holder, who finishes and releases to you."""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from trio_lease import (
    AcquireTimeout,
    BackendUnavailable,
    Lease,
    LeaseBusy,
    LeaseConfigError,
    LeaseLost,
    LeaseRecord,
    SingletonContext,
    run_singleton,
)
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import FaultyBackend

from .conftest import SETTINGS

pytestmark = pytest.mark.anyio

L = SETTINGS.heartbeat_timeout


async def test_the_holder_is_told_and_the_requester_gets_the_lease_next() -> None:
    """request_handover → grant.handover_requested; the release goes to the requester, not a
    third contender already waiting, and the token increases."""
    store = MemoryStore()
    holder = Lease("job", "a", MemoryBackend(store), SETTINGS)
    third = Lease("job", "c", MemoryBackend(store), SETTINGS)
    requester = Lease("job", "b", MemoryBackend(store), SETTINGS)
    order: list[str] = []
    async with anyio.create_task_group() as tg:

        async def hold() -> None:
            async with holder.held() as grant:
                order.append(f"a:{grant.fencing_token}")
                await grant.handover_requested.wait()
                assert grant.handover_to == requester.identity
                order.append("a:asked")

        async def contend(lease: Lease) -> None:
            async with lease.held() as grant:
                order.append(f"{lease.owner}:{grant.fencing_token}")

        tg.start_soon(hold)
        await anyio.sleep(0.1)
        tg.start_soon(contend, third)
        await anyio.sleep(0.1)
        start = anyio.current_time()
        assert await requester.request_handover()
        await contend(requester)
        handed_over_in = anyio.current_time() - start
    assert order[:4] == ["a:1", "a:asked", "b:2", "c:3"]
    # Noticed on the watch, not at the next renewal (R) and not after L.
    assert handed_over_in < SETTINGS.heartbeat_interval


async def test_a_third_contender_waits_out_the_reservation_if_the_requester_never_comes() -> None:
    """Bounded: a released record reserved for a requester that does not take it is open to
    all once it has stood for L."""
    store = MemoryStore()
    holder = Lease("job", "a", MemoryBackend(store), SETTINGS)
    requester = Lease("job", "b", MemoryBackend(store), SETTINGS)
    third = Lease("job", "c", MemoryBackend(store), SETTINGS)
    async with holder.held() as grant:
        assert await requester.request_handover()
        await grant.handover_requested.wait()
    released = store.records["job"]
    assert released.holder == "" and released.handover_to == requester.identity
    start = anyio.current_time()
    with pytest.raises(AcquireTimeout):
        async with third.held(timeout=L - 1):
            pass
    async with third.held() as taken:
        assert taken.fencing_token == 2
    assert anyio.current_time() - start == pytest.approx(L, abs=0.1)
    assert store.records["job"].handover_to == ""  # a new grant clears the request


async def test_asking_a_dead_holder_costs_the_requester_nothing() -> None:
    """A request is a write, but not the holder's: the requester, which saw the record stand
    unchanged before asking, takes the lease L after it first saw that version, not L after its
    request. A contender that did not write the request counts from when it saw it (to it, the
    write is a change like a renewal)."""
    store = MemoryStore()
    dying = FaultyBackend(MemoryBackend(store))
    holder = Lease("job", "a", dying, SETTINGS)
    requester = Lease("job", "b", MemoryBackend(store), SETTINGS)
    other = Lease("job", "c", MemoryBackend(store), SETTINGS)
    acquired = anyio.Event()

    async def hold() -> None:
        with pytest.raises(LeaseLost):
            async with holder.held():
                acquired.set()
                dying.pause()  # the holder dies: it renews no more
                await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold)
        await acquired.wait()
        await requester.read()
        seen = anyio.current_time()
        await anyio.sleep(L / 3)
        assert await requester.request_handover()
        for lease, expires_in in ((requester, L - L / 3), (other, L)):
            with pytest.raises(LeaseBusy) as busy:
                async with lease.try_held():
                    pass
            assert busy.value.expires_in == pytest.approx(expires_in, abs=0.1)
        async with requester.held() as grant:
            taken = anyio.current_time()
            assert grant.fencing_token == 2
    assert taken - seen == pytest.approx(L, abs=0.1)


async def test_run_singleton_stops_fn_gracefully_and_hands_over() -> None:
    """run_singleton: a handover request sets ctx.stopping; fn finishes, the requester leads."""
    store = MemoryStore()
    leader = Lease("job", "a", MemoryBackend(store), SETTINGS)
    requester = Lease("job", "b", MemoryBackend(store), SETTINGS)
    events: list[str] = []
    leading = anyio.Event()

    async def work(ctx: SingletonContext) -> None:
        events.append(f"leading {ctx.fencing_token}")
        leading.set()
        await ctx.stopping.wait()
        events.append("stopping")

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_singleton, leader, work)
        await leading.wait()
        assert await requester.request_handover()
        async with requester.held() as grant:
            events.append(f"requester {grant.fencing_token}")
        tg.cancel_scope.cancel()
    assert events[:3] == ["leading 1", "stopping", "requester 2"]


async def test_nothing_to_hand_over_when_free_or_already_ours() -> None:
    """False when the lease is free (acquire it instead) or held by this very owner."""
    backend = MemoryBackend()
    lease = Lease("job", "a", backend, SETTINGS)
    assert not await lease.request_handover()
    async with lease.held():
        assert not await lease.request_handover()


async def test_asking_twice_writes_once() -> None:
    """A second request by the same requester finds its request in the record."""
    store = MemoryStore()
    holder = Lease("job", "a", MemoryBackend(store), SETTINGS)
    requester = Lease("job", "b", MemoryBackend(store), SETTINGS)
    async with holder.held():
        assert await requester.request_handover()
        version = store.records["job"].version
        assert await requester.request_handover()
        assert store.records["job"].version == version


async def test_renewals_keep_the_request_and_the_grant() -> None:
    """A holder that ignores the request keeps renewing (same token), request kept."""
    store = MemoryStore()
    holder = Lease("job", "a", MemoryBackend(store), SETTINGS)
    requester = Lease("job", "b", MemoryBackend(store), SETTINGS)
    async with holder.held() as grant:
        assert await requester.request_handover()
        await anyio.sleep(SETTINGS.heartbeat_interval * 4)
        assert not grant.lost and grant.handover_requested.is_set()
        record = store.records["job"]
        assert record.holder == holder.identity and record.fencing_token == grant.fencing_token
        assert record.handover_to == requester.identity


async def test_a_backend_that_drops_the_request_is_a_configuration_error() -> None:
    """A store that does not keep handover_to is named, instead of a handover never coming."""

    class Forgetful(MemoryBackend):
        async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
            return await super().update(
                dataclasses.replace(record, handover_to=""), expected_version
            )

    store = MemoryStore()
    holder = Lease("job", "a", MemoryBackend(store), SETTINGS)
    requester = Lease("job", "b", Forgetful(store), SETTINGS)
    async with holder.held():
        with pytest.raises(LeaseConfigError, match="does not store handover requests"):
            await requester.request_handover()


async def test_an_unreadable_record_cannot_be_asked_for() -> None:
    """Unknown holder: the request is refused with BackendUnavailable, nothing written."""
    store = MemoryStore()
    store._commit(LeaseRecord(name="job", fencing_token=3, unreadable="spec: garbage"))
    version = store.records["job"].version
    with pytest.raises(BackendUnavailable, match="unreadable"):
        await Lease("job", "b", MemoryBackend(store), SETTINGS).request_handover()
    assert store.records["job"].version == version
