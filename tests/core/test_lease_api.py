"""The Lease API around the guarantees: Akka-style calls, try_held, timeouts, acquire safety."""

from __future__ import annotations

import math
import random

import anyio
import pytest

from trio_lease import (
    AcquireTimeout,
    BackendUnavailable,
    Lease,
    LeaseBusy,
    LeaseConfigError,
    LeaseError,
    LeaseLost,
    LeaseRecord,
    LeaseSettings,
)
from trio_lease._waiting import EXPIRY_JITTER
from trio_lease.abc import Changes, Emit
from trio_lease.backends.memory import MemoryBackend

from .conftest import World

pytestmark = pytest.mark.anyio


async def test_acquire_release_check_lease_follow_the_seed_contract(world: World) -> None:
    """§5.2: acquire True/False, check_lease only while held, release True then False."""
    a, b = world.lease("a"), world.lease("b")
    async with a.host(), b.host():
        assert not a.check_lease()
        assert await a.acquire()
        assert a.check_lease()
        assert not await b.acquire()
        assert not b.check_lease()
        assert await a.release()
        assert not a.check_lease()
        assert not await a.release()  # we no longer hold it
        assert await b.acquire()
        assert b.check_lease()


async def test_acquire_outside_a_host_scope_is_a_clear_error(world: World) -> None:
    """§3: acquire() without `async with lease.host():` says how to host the heartbeat."""
    with pytest.raises(LeaseError, match=r"async with lease\.host\(\)"):
        await world.lease("a").acquire()


async def test_acquire_keeps_renewing_in_its_host(world: World) -> None:
    """§5.2: the heartbeat of acquire() renews for as long as the host scope lives."""
    lease = world.lease("a")
    async with lease.host():
        assert await lease.acquire()
        await anyio.sleep(10 * world.settings.heartbeat_timeout)
        assert lease.check_lease()


async def test_on_lost_is_called_exactly_once_after_acquire(world: World) -> None:
    """§5.2: on_lost(cause) fires once per grant when the lease is lost, and not on release."""
    backend = world.backend()
    causes: list[BaseException | None] = []
    lease = world.lease("a")
    async with lease.host():
        assert await lease.acquire(on_lost=causes.append)
        current = await backend.get("job")
        assert current is not None
        await backend.update(
            LeaseRecord(name="job", holder="thief_1", fencing_token=50), current.version
        )
        await anyio.sleep(5 * world.settings.heartbeat_timeout)
        assert not lease.check_lease()
    assert len(causes) == 1
    assert isinstance(causes[0], LeaseLost) and "thief_1" in str(causes[0])

    released: list[BaseException | None] = []
    other = world.lease("a", name="other")
    async with other.host():
        assert await other.acquire(on_lost=released.append)
        assert await other.release()
        await anyio.sleep(world.settings.heartbeat_timeout)
    assert released == []


async def test_async_on_lost_callback_is_awaited(world: World) -> None:
    """§5.2: an async on_lost callback runs to completion."""
    partitioned = world.faulty()
    seen = anyio.Event()

    async def on_lost(cause: BaseException | None) -> None:
        await anyio.sleep(0.1)
        seen.set()

    lease = world.lease("a", backend=partitioned)
    async with lease.host():
        assert await lease.acquire(on_lost=on_lost)
        partitioned.pause()
        with anyio.fail_after(world.settings.deadline + 1):
            await seen.wait()


async def test_acquire_raises_backend_unavailable_when_unreachable(world: World) -> None:
    """§5.2: an unreachable backend makes acquire() raise, not return False."""
    broken = world.faulty(error_rate=1.0)
    lease = world.lease("a", backend=broken)
    async with lease.host():
        with pytest.raises(BackendUnavailable):
            await lease.acquire()


async def test_acquire_with_lost_reply_adopts_the_landed_grant(world: World) -> None:
    """§4.2: an acquire write that landed but whose reply was lost is resolved by a re-read."""
    lossy = world.faulty()
    lossy.lose_next_replies(1)
    lease = world.lease("a", backend=lossy)
    async with lease.held() as grant:
        record = await world.backend().get("job")
        assert record is not None and record.fencing_token == grant.fencing_token
        assert record.holder == lease.identity


async def test_cancelled_acquire_releases_a_write_that_landed(world: World) -> None:
    """§5.1: cancelled while its grant write is in flight, held() releases it before unwinding."""
    slow = world.faulty(reply_latency=0.4)
    lease = world.lease("a", backend=slow)
    # get: replies at 0.4; create: applied at 0.4, reply due at 0.8: cancel in between.
    with anyio.move_on_after(0.6) as scope:
        async with lease.held():
            pytest.fail("the body must not run")
    assert scope.cancelled_caught
    record = await world.backend().get("job")
    assert record is not None and record.holder == "" and record.fencing_token == 1
    async with world.lease("b").held() as grant:  # acquirable at once
        assert grant.fencing_token == 2


async def test_try_held_raises_busy_with_holder_and_expiry(world: World) -> None:
    """§3: try_held() raises LeaseBusy naming the holder and when it may expire."""
    a, b = world.lease("a"), world.lease("b")
    async with a.held():
        with pytest.raises(LeaseBusy) as info:
            async with b.try_held():
                pytest.fail("must not run")
    assert info.value.holder == a.identity
    assert 0 < info.value.expires_in <= world.settings.heartbeat_timeout


async def test_held_timeout_raises_acquire_timeout(world: World) -> None:
    """§3: held(timeout=) raises AcquireTimeout, which is also a TimeoutError."""
    a, b = world.lease("a"), world.lease("b")
    async with a.held():
        start = anyio.current_time()
        with pytest.raises(TimeoutError) as info:
            async with b.held(timeout=2.0):
                pytest.fail("must not run")
        assert isinstance(info.value, AcquireTimeout)
        assert anyio.current_time() - start == pytest.approx(2.0)


async def _handed_over(a: Lease, b: Lease) -> float:
    """``a`` holds the lease for 30 s while ``b`` waits for it; returns how long after a's
    release b was granted it."""
    acquired_at: list[float] = []

    async def contender() -> None:
        async with b.held():
            acquired_at.append(anyio.current_time())

    async with anyio.create_task_group() as tg:
        async with a.held():
            tg.start_soon(contender)
            await anyio.sleep(30)
        released = anyio.current_time()
    return acquired_at[0] - released


async def test_waiting_contender_wakes_on_release_without_polling(world: World) -> None:
    """§5.3: with a watch, the waiter acquires right after the release, not a poll later."""
    waited = await _handed_over(world.lease("a"), world.lease("b"))
    assert waited < 0.05 * world.settings.wait_interval


async def test_polling_contender_acquires_within_a_poll_interval(world: World) -> None:
    """§5.3: without a watch, the waiter re-reads on a jittered period and acquires."""
    b = world.lease("b", backend=world.faulty(watch_enabled=False))
    waited = await _handed_over(world.lease("a"), b)
    assert 0 < waited <= 1.2 * world.settings.wait_interval + 0.01


async def test_polling_wait_never_overshoots_the_expiry(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§5.3: a polling wait is jittered, but never ends more than EXPIRY_JITTER past the silent
    holder's expiry (with the largest jitter, a wait of 1.2 x 1.4 s spans the expiry here)."""
    monkeypatch.setattr(random, "uniform", lambda low, high: high)  # largest jitter
    settings = LeaseSettings(
        heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=1, poll_interval=1.4
    )
    backend = world.backend()
    await backend.create(LeaseRecord(name="job", holder="dead_1", lease_duration=15))
    contender = Lease("job", "b", backend, settings)
    start = anyio.current_time()
    async with contender.held():
        late = anyio.current_time() - (start + 15)
    assert 0 <= late <= EXPIRY_JITTER + 0.002 + world.tolerance


async def test_grant_check_passes_while_held_and_raises_after_release(world: World) -> None:
    """§5: Grant.check() returns while the grant is valid and raises LeaseLost once released
    (the stall case, a deadline passed without a checkpoint, is in tests/core/test_stall.py)."""
    async with world.lease("a").held() as grant:
        grant.check()
        await anyio.sleep(3 * world.settings.heartbeat_timeout)  # renewed meanwhile
        grant.check()
    with pytest.raises(LeaseLost, match="released"):
        grant.check()


async def test_holder_and_watch_holder_report_changes(world: World) -> None:
    """§3: holder() is the holder as last read; watch_holder() yields each change."""
    a, b = world.lease("a"), world.lease("b")
    seen: list[str | None] = []

    async def watch() -> None:
        async with b.watch_holder() as holders:
            async for holder in holders:
                seen.append(holder)
                if len(seen) == 3:
                    return

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await anyio.sleep(0.1)
        async with a.held():
            await anyio.sleep(1)
    assert seen == [None, a.identity, None]
    assert b.holder() is None


async def test_last_record_is_the_record_as_last_read(world: World) -> None:
    """last_record: None before any read, then the record of the last read (holder, token)."""
    a, b = world.lease("a"), world.lease("b")
    assert world.lease("c").last_record is None  # never read
    async with a.held() as grant:
        with pytest.raises(LeaseBusy):
            async with b.try_held():
                pytest.fail("granted")
        record = b.last_record
        assert record is not None
        assert (record.holder, record.fencing_token) == (a.identity, grant.fencing_token)


async def test_lost_after_body_finished_without_checkpoint_still_raises(world: World) -> None:
    """§4.5: a loss seen at exit raises LeaseLost even if the body never hit a checkpoint."""
    frozen = world.faulty()
    lease = world.lease("a", backend=frozen, clock=lambda: anyio.current_time())
    with pytest.raises(LeaseLost):
        async with lease.held():
            frozen.pause()
            with anyio.CancelScope(shield=True):  # a body that ignores cancellation
                await anyio.sleep(world.settings.deadline + 1)


def test_bad_constructor_arguments_are_config_errors() -> None:
    """§3: empty names or owners and non-backends are LeaseConfigError (a ValueError)."""
    backend = MemoryBackend()
    for args in (("", "a", backend), ("n", "", backend), ("n", "a", object())):
        with pytest.raises(LeaseConfigError):
            Lease(*args)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Lease("n", "", backend)


async def test_leaving_watch_holder_closes_the_backend_stream(world: World) -> None:
    """Closing watch_holder() closes the backend's watch stream at once, not at GC."""
    closed: list[bool] = []

    class Recording(MemoryBackend):
        def watch(self, name: str) -> Changes[LeaseRecord | None]:
            inner = super().watch(name)

            async def follow(emit: Emit[LeaseRecord | None]) -> None:
                try:
                    async with inner as states:
                        async for state in states:
                            await emit(state)
                finally:
                    closed.append(True)

            return Changes(follow)

    backend = world.backend()
    assert isinstance(backend, MemoryBackend)
    lease = world.lease("a", backend=Recording(backend.store))
    async with lease.watch_holder() as holders:
        async for holder in holders:
            assert holder is None
            break
    assert closed == [True]


async def test_release_between_first_read_and_watch_start_wakes_the_waiter(world: World) -> None:
    """A release landing after the waiter's first read but before its watch starts still
    wakes it at once (not a poll interval later)."""
    a = world.lease("a")
    backend = world.backend()
    released_at: list[float] = []

    class ReleaseBeforeWatch(MemoryBackend):
        def watch(self, name: str) -> Changes[LeaseRecord | None]:
            inner = super().watch(name)

            async def follow(emit: Emit[LeaseRecord | None]) -> None:
                if not released_at:
                    await a._akka.end_hold(raise_unknown=True)  # a releases before the watch opens
                    released_at.append(anyio.current_time())
                async with inner as states:
                    async for state in states:
                        await emit(state)

            return Changes(follow)

    assert isinstance(backend, MemoryBackend)
    b = world.lease("b", backend=ReleaseBeforeWatch(backend.store))
    async with a.host():
        assert await a.acquire()
        start = anyio.current_time()
        async with b.held():
            acquired = anyio.current_time()
    assert released_at
    assert acquired - start < 0.1 * world.settings.wait_interval


@pytest.mark.parametrize(("name", "owner"), [("job", "me\ud800"), ("jo\udc00b", "me")])
def test_a_name_or_owner_that_is_not_unicode_text_is_a_config_error(name: str, owner: str) -> None:
    """A lone surrogate in a lease name or owner is refused when the lease is made: no store
    keeps it (each writes UTF-8; the Kubernetes PUT raised UnicodeEncodeError, untyped)."""
    with pytest.raises(LeaseConfigError, match="lone UTF-16 surrogate"):
        Lease(name, owner, MemoryBackend())


async def test_async_with_lease_raises_at_once_naming_both_forms(world: World) -> None:
    """`async with lease:` runs no body: a TypeError naming `lease.held()` and `lease.host()`."""
    lease = world.lease("a")
    ran = False
    with pytest.raises(TypeError) as caught:
        async with lease:  # type: ignore[attr-defined]
            ran = True
    assert not ran
    message = str(caught.value)
    assert "lease.held()" in message and "lease.host()" in message and "'job'" in message
    assert await lease.backend.get("job") is None  # nothing was acquired either


async def test_the_host_yields_the_lease_and_releases_on_leaving(world: World) -> None:
    """`async with lease.host() as same:` gives the lease; leaving releases what acquire() took."""
    lease = world.lease("a")
    async with lease.host() as same:
        assert same is lease
        assert await lease.acquire()
    record = await lease.backend.get("job")
    assert record is not None and not record.holder  # released: no holder
    assert not lease.check_lease()


@pytest.mark.parametrize("timeout", [-1, -0.001, float("nan"), float("-inf"), "5", True])
async def test_held_refuses_a_timeout_that_is_not_seconds_at_least_zero(
    world: World, timeout: object
) -> None:
    """held(timeout=-1) (once taken as 0), NaN or a non-number: LeaseConfigError naming the rule."""
    lease = world.lease("a")
    with pytest.raises(LeaseConfigError) as caught:
        lease.held(timeout=timeout)  # type: ignore[arg-type]
    assert "lease.held(timeout=...)" in str(caught.value)
    assert "None (wait without bound) or a number of seconds >= 0" in str(caught.value)
    assert await lease.backend.get("job") is None


async def test_held_accepts_seconds_and_infinity_as_timeouts(world: World) -> None:
    """held(timeout=1) and held(timeout=math.inf) (no bound, as None) take a free lease."""
    lease = world.lease("a")
    for timeout in (1, 2.5, math.inf):
        async with lease.held(timeout=timeout) as grant:
            assert grant.fencing_token >= 1
