"""Semaphore: at most ``limit`` grants at once, one ordinary lease record per slot.

The tests taking ``world`` run on every backend (memory and the Kubernetes emulator on virtual
time, SQLite and etcd on real time), on asyncio and trio; durations derive from
``world.settings``. The churn measurement runs on the memory store on virtual time.
"""

from __future__ import annotations

import random
import warnings

import anyio
import pytest

from tests.conftest import World
from trio_lease import (
    AcquireTimeout,
    Grant,
    Group,
    Lease,
    LeaseBusy,
    LeaseConfigError,
    LeaseLost,
    LeaseSettings,
    Semaphore,
    SemaphoreGrant,
)
from trio_lease.backends.memory import MemoryBackend, MemoryStore

from ._own_process import OwnProcess
from .conftest import SETTINGS

pytestmark = pytest.mark.anyio


@pytest.fixture
def world(every_world: World) -> World:
    """A World on every backend (``every_world``)."""
    return every_world


def _semaphore(world: World, owner: str, limit: int, name: str = "pool") -> Semaphore:
    """A contender in a process of its own."""
    return Semaphore(name, owner, OwnProcess(world.backend()), world.settings, limit=limit)


async def test_at_most_limit_grants_at_once_each_with_its_slot(world: World) -> None:
    """Five contenders of a limit-2 semaphore: never more than two grants, on slots 0 and 1."""
    inside: list[int] = []
    most = 0
    slots_seen: set[int] = set()
    hold = world.settings.heartbeat_interval

    async def contend(owner: str) -> None:
        nonlocal most
        async with _semaphore(world, owner, 2).held() as grant:
            assert grant.slot not in inside
            inside.append(grant.slot)
            slots_seen.add(grant.slot)
            most = max(most, len(inside))
            await anyio.sleep(hold)
            inside.remove(grant.slot)

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(contend, f"c{i}")
    assert most == 2
    assert slots_seen == {0, 1}


async def test_each_slot_is_its_own_lease_with_increasing_tokens(world: World) -> None:
    """A grant holds the lease ``<name>~slot~<slot>``; each slot's fencing token increases."""
    tokens: dict[int, list[int]] = {0: [], 1: []}
    for round_ in range(3):
        async with anyio.create_task_group() as tg:
            for i in range(2):

                async def take(owner: str) -> None:
                    async with _semaphore(world, owner, 2).held() as grant:
                        assert grant.lease_name == f"pool~slot~{grant.slot}"
                        tokens[grant.slot].append(grant.fencing_token)
                        await anyio.sleep(world.settings.heartbeat_interval)

                tg.start_soon(take, f"r{round_}-{i}")
    for slot_tokens in tokens.values():
        assert len(slot_tokens) == 3
        assert slot_tokens == sorted(set(slot_tokens))


async def test_a_semaphore_grant_is_the_slot_leases_grant() -> None:
    """A SemaphoreGrant is a Grant reading the slot lease's own grant: same token, deadline,
    identity and handover request, and lost with it when the slot's record is taken away."""
    store = MemoryStore()
    sem = Semaphore("pool", "a", MemoryBackend(store), SETTINGS, limit=1)
    with pytest.raises(LeaseLost):
        async with sem.held() as granted:
            assert isinstance(granted, Grant)
            slot_grant = granted.grant
            assert slot_grant is not granted
            assert granted.lease_name == slot_grant.lease_name == "pool~slot~0"
            assert granted.fencing_token == slot_grant.fencing_token
            assert granted.identity == slot_grant.identity == sem.identity
            assert granted.handover_requested is slot_grant.handover_requested
            await anyio.sleep(SETTINGS.heartbeat_interval)
            assert granted.deadline == slot_grant.deadline
            assert not granted.lost
            other = Semaphore("pool", "b", MemoryBackend(store), SETTINGS, limit=1).slot_lease(0)
            assert await other.request_handover()
            await granted.handover_requested.wait()
            assert granted.handover_to == other.identity
            store.delete("pool~slot~0")
            await anyio.sleep_forever()
    assert granted.lost and slot_grant.lost
    assert granted.remaining() == 0.0


async def test_try_held_raises_lease_busy_when_every_slot_is_taken(world: World) -> None:
    """try_held() takes a free slot at once, and raises LeaseBusy naming the holder when none is."""
    first = _semaphore(world, "a", 1)
    second = _semaphore(world, "b", 1)
    async with first.try_held() as grant:
        assert grant.slot == 0
        with pytest.raises(LeaseBusy) as busy:
            async with second.try_held():
                pass
        assert first.identity in busy.value.holder
        assert await second.holders() == [first.identity]
    assert await second.holders() == [None]


async def test_a_waiter_takes_a_released_slot_at_once(world: World) -> None:
    """A waiting contender gets a released slot at once (the watch), well before its next poll,
    and the holder that asks again right after releasing waits behind it.

    The waiter polls only every 20 R, so a grant that came from a poll instead of the watch
    takes seconds; on real time the bound is a quarter of that poll interval, which a loaded
    machine's scheduling does not reach (virtual time keeps the tight bound)."""
    holder = _semaphore(world, "a", 1)
    polls = 20 * world.settings.heartbeat_interval
    waiter = Semaphore(
        "pool",
        "b",
        OwnProcess(world.backend()),
        LeaseSettings(**{**world.settings.model_dump(), "poll_interval": polls}),
        limit=1,
    )
    order: list[str] = []
    release = anyio.Event()
    released_at: list[float] = []
    granted_at: list[float] = []

    async def hold_then_again() -> None:
        async with holder.held():
            order.append("a")
            await release.wait()
        released_at.append(anyio.current_time())
        async with holder.held():
            order.append("a again")

    async def wait() -> None:
        async with waiter.held():
            granted_at.append(anyio.current_time())
            order.append("b")
            await anyio.sleep(world.settings.heartbeat_interval)

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_then_again)
        await anyio.sleep(world.settings.heartbeat_interval)
        tg.start_soon(wait)
        await anyio.sleep(world.settings.heartbeat_interval * 2.5)
        release.set()
    assert order == ["a", "b", "a again"]
    bound = world.settings.heartbeat_interval / 2 if world.tolerance == 0 else polls / 4
    assert granted_at[0] - released_at[0] < bound


async def test_a_timeout_ends_the_wait_with_acquire_timeout(world: World) -> None:
    """held(timeout=...) raises AcquireTimeout when no slot frees in time, and withdraws its
    request: the holder's release is open to others at once."""
    holder = _semaphore(world, "a", 1)
    waiter = _semaphore(world, "b", 1)
    third = _semaphore(world, "c", 1)
    async with holder.held() as grant:
        with pytest.raises(AcquireTimeout):
            async with waiter.held(timeout=world.settings.heartbeat_interval):
                pass
    async with third.try_held() as taken:
        assert taken.fencing_token == grant.fencing_token + 1


async def test_a_lowered_limit_drains_the_slots_above_it(world: World) -> None:
    """set_limit(1) asks the holder of slot 1 to leave (cooperatively, it is not cancelled);
    from then on only slot 0 is granted, so at most one grant remains."""
    sem = _semaphore(world, "a", 2)
    other = _semaphore(world, "b", 2)
    drained: list[int] = []
    inside: list[int] = []
    lowered = anyio.Event()
    after: list[tuple[int, int]] = []  # (slot, grants at once) of grants begun after lowering

    async def hold(semaphore: Semaphore, rounds: int) -> None:
        for _ in range(rounds):
            async with semaphore.held() as grant:
                inside.append(grant.slot)
                if lowered.is_set():
                    after.append((grant.slot, len(inside)))
                with anyio.move_on_after(world.settings.heartbeat_interval * 2):
                    await _either(grant)
                if grant.drain_requested.is_set() or grant.handover_requested.is_set():
                    drained.append(grant.slot)
                inside.remove(grant.slot)

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold, sem, 3)
        tg.start_soon(hold, other, 3)
        await anyio.sleep(world.settings.heartbeat_interval / 2)
        assert sorted(inside) == [0, 1]
        await sem.set_limit(1)
        await other.set_limit(1)
        lowered.set()
    assert drained[0] == 1  # the holder of slot 1 was asked first, and left
    assert len(after) == 4  # the four grants left, one at a time on slot 0
    assert all(slot == 0 and count == 1 for slot, count in after)
    assert sem.limit == 1


async def _either(grant: SemaphoreGrant) -> None:
    async with anyio.create_task_group() as tg:

        async def on(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(on, grant.drain_requested)
        tg.start_soon(on, grant.handover_requested)


async def test_a_lost_slot_cancels_the_body_with_lease_lost(world: World) -> None:
    """Cut off from the store, a grant's body is cancelled at the slot's deadline and a bare
    LeaseLost comes out; then another contender takes the slot with a higher token."""
    hanging = OwnProcess(world.backend())
    cut_off = Semaphore("pool", "a", hanging, world.settings, limit=1)
    with pytest.raises(LeaseLost) as lost:
        async with cut_off.held() as grant:
            hanging.pause()
            await anyio.sleep_forever()
    assert lost.value.lease_name == "pool~slot~0"
    hanging.resume()
    async with _semaphore(world, "b", 1).held() as taken:
        assert taken.fencing_token > grant.fencing_token


async def test_bad_arguments_raise_lease_config_error(world: World) -> None:
    """A limit that is not a positive int, an empty name or a negative timeout is refused."""
    backend = world.backend()
    for limit in (0, -1, 1.5, True):
        with pytest.raises(LeaseConfigError, match="limit"):
            Semaphore("pool", "a", backend, limit=limit)  # type: ignore[arg-type]
    with pytest.raises(LeaseConfigError):
        Semaphore("", "a", backend, limit=1)
    for timeout in (-1, float("nan"), "5"):
        with pytest.raises(LeaseConfigError, match=r"semaphore\.held\(timeout=\.\.\.\).*>= 0"):
            Semaphore("pool", "a", backend, limit=1).held(timeout=timeout)  # type: ignore[arg-type]


async def test_tasks_of_one_process_never_share_a_slot() -> None:
    """Three tasks of one owner in one process get three grants on three slots (a slot lease
    is reentrant per identity: the semaphore must not let them share one)."""
    backend = MemoryBackend(MemoryStore())
    sem = Semaphore("pool", "same", backend, SETTINGS, limit=3)
    slots: list[int] = []
    entered = anyio.Event()

    async def take() -> None:
        async with sem.held() as grant:
            slots.append(grant.slot)
            if len(slots) == 3:
                entered.set()
            await entered.wait()

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(take)
    assert sorted(slots) == [0, 1, 2]
    with pytest.raises(LeaseBusy) as busy:
        async with sem.held() as a, sem.held() as b, sem.held() as c, sem.try_held():
            del a, b, c
    # Every slot is held in this process: no takeover time to give, only the release.
    assert "inf" not in str(busy.value)
    assert "held in this process" in str(busy.value) and "releases" in str(busy.value)


@pytest.mark.campaign  # 20 virtual minutes of eight contenders: half a minute of CPU
async def test_no_waiter_starves_under_churn() -> None:
    """Measured: limit 2, eight contenders in processes of their own, each asking again at
    once after every hold, for 20 minutes of virtual time: each gets its share of the grants,
    and no wait (finished or still going at the end) exceeds four times the fair-share wait."""
    store = MemoryStore()
    hold = 2 * SETTINGS.heartbeat_interval
    contenders = [
        Semaphore("pool", f"c{i}", OwnProcess(MemoryBackend(store)), SETTINGS, limit=2)
        for i in range(8)
    ]
    waits: list[float] = []
    asked: dict[int, float] = {}
    grants = dict.fromkeys(range(8), 0)
    rng = random.Random(7)

    async def churn(index: int) -> None:
        while True:
            asked[index] = anyio.current_time()
            async with contenders[index].held():
                waits.append(anyio.current_time() - asked.pop(index))
                grants[index] += 1
                await anyio.sleep(hold * rng.uniform(0.5, 1.5))

    with anyio.move_on_after(20 * 60):
        async with anyio.create_task_group() as tg:
            for index in range(8):
                tg.start_soon(churn, index)
    waits.extend(anyio.current_time() - since for since in asked.values())
    # Eight contenders, two slots, holds of `hold` on average: served in turn, each waits for
    # three others' holds on its slot, 3 * hold (the mean measured is within 5 % of it).
    fair = 3 * hold
    assert sum(waits) / len(waits) == pytest.approx(fair, rel=0.1)
    assert max(waits) <= 4 * fair
    assert sorted(waits)[int(len(waits) * 0.99)] <= 2.5 * fair
    assert min(grants.values()) >= 0.8 * max(grants.values())


async def test_waiters_of_one_process_are_served_in_arrival_order() -> None:
    """In one process, waiters of a semaphore are granted slots first come, first served."""
    backend = MemoryBackend(MemoryStore())
    sem = Semaphore("pool", "same", backend, SETTINGS, limit=1)
    order: list[int] = []

    async def wait(index: int) -> None:
        async with sem.held():
            order.append(index)
            await anyio.sleep(1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, -1)
        await anyio.sleep(0.1)
        for index in range(5):
            tg.start_soon(wait, index)
            await anyio.sleep(0.1)
    assert order == [-1, 0, 1, 2, 3, 4]


async def test_without_a_watch_a_waiter_polls() -> None:
    """On a store without a watch, a waiter in another process gets a released slot within
    wait_interval (it polls)."""
    store = MemoryStore()

    def contender(owner: str) -> Semaphore:
        backend = OwnProcess(MemoryBackend(store), watch_enabled=False)
        return Semaphore("pool", owner, backend, SETTINGS, limit=1)

    holder, waiter = contender("a"), contender("b")
    released_at: list[float] = []

    async def hold() -> None:
        async with holder.held():
            await anyio.sleep(10)
        released_at.append(anyio.current_time())

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold)
        await anyio.sleep(1)
        async with waiter.held() as grant:
            assert grant.slot == 0
            assert anyio.current_time() - released_at[0] <= SETTINGS.wait_interval * 1.2 + 0.01


class _Stopped(OwnProcess):
    """A process that can be stopped as by SIGSTOP: while paused its requests hang and none of
    its timeouts cuts them short (they are shielded), so it resumes where it stopped."""

    async def _gate(self) -> None:
        with anyio.CancelScope(shield=True):
            await super()._gate()


async def test_a_waiter_paused_past_l_among_looping_holders_is_granted_soon() -> None:
    """A waiter whose store was out of reach for 2 L while it waited (its reservation lapsed and
    its slot went to others) asks again once back: granted within the documented bound, among
    six holders looping held() at limit 3."""
    store = MemoryStore()
    hold = 0.3
    loopers = [
        Semaphore("pool", f"c{i}", OwnProcess(MemoryBackend(store)), SETTINGS, limit=3)
        for i in range(6)
    ]
    paused = _Stopped(MemoryBackend(store))
    waiter = Semaphore("pool", "waiter", paused, SETTINGS, limit=3)
    waited: list[float] = []
    resumed_at: list[float] = []

    async def loop(sem: Semaphore) -> None:
        while True:
            async with sem.held():
                await anyio.sleep(hold)

    async def wait() -> None:
        async with waiter.held():
            waited.append(anyio.current_time())

    async def pause_while_waiting() -> None:
        probe = MemoryBackend(store)
        names = [waiter.slot_lease(slot).name for slot in range(3)]
        while True:  # until the waiter has a slot reserved for it
            records = [await probe.get(name) for name in names]
            if any(r is not None and r.handover_to == waiter.identity for r in records):
                break
            await anyio.sleep(0.01)
        paused.pause()
        await anyio.sleep(2 * SETTINGS.heartbeat_timeout)
        paused.resume()
        resumed_at.append(anyio.current_time())

    with anyio.move_on_after(10 * SETTINGS.heartbeat_timeout):
        async with anyio.create_task_group() as tg:
            for sem in loopers:
                tg.start_soon(loop, sem)
            await anyio.sleep(1.0)
            tg.start_soon(pause_while_waiting)
            await wait()
            tg.cancel_scope.cancel()
    assert waited, "the waiter was never granted a slot"
    # docs/partitioning.md: a waiter back in touch is granted within 2 wait_interval + 2 holds.
    assert waited[0] - resumed_at[0] <= 2 * SETTINGS.wait_interval + 2 * hold


async def test_semaphores_with_other_limits_on_one_name_warn_once() -> None:
    """A second live Semaphore of the process on the same store and name with another limit
    warns once (RuntimeWarning and a log line); the same limit, another name or a later
    mismatch on that name does not warn again."""
    backend = MemoryBackend(MemoryStore())
    first = Semaphore("warned-pool", "a", backend, SETTINGS, limit=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        same = Semaphore("warned-pool", "b", backend, SETTINGS, limit=2)
        Semaphore("other-pool", "c", backend, SETTINGS, limit=4)
    assert not caught
    with pytest.warns(RuntimeWarning, match=r"'warned-pool'.*limit 4.*limit 2"):
        larger = Semaphore("warned-pool", "d", backend, SETTINGS, limit=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Semaphore("warned-pool", "e", backend, SETTINGS, limit=3)
    assert not caught
    assert (first.limit, same.limit, larger.limit) == (2, 2, 4)


def test_every_feature_refuses_an_empty_name_naming_it() -> None:
    """Lease, Group, Semaphore and run_partitioned check a name with one rule and one kind of
    message: an empty or non-text name is a LeaseConfigError naming the argument."""
    backend = MemoryBackend(MemoryStore())
    for make, what in (
        (lambda name: Lease(name, "a", backend), "lease name"),
        (lambda name: Group(name, "a", backend), "group name"),
        (lambda name: Semaphore(name, "a", backend, limit=1), "semaphore name"),
    ):
        for bad in ("", None, "x\ud800"):
            with pytest.raises(LeaseConfigError, match=what):
                make(bad)
