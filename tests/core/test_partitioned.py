"""run_partitioned: each key on one live member at a time, balanced, moved on join and leave.

The tests taking ``world`` run on every backend, on asyncio and trio; :func:`assign`'s balance
and moves are checked directly.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterable

import anyio
import pytest

from tests.conftest import World
from trio_lease import Grant, Lease, LeaseConfigError, LeaseLost, run_partitioned
from trio_lease._group import partition_group
from trio_lease._identity import incarnation
from trio_lease._namespace import record_name
from trio_lease._partitioned import assign
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import FaultyBackend

from .conftest import SETTINGS

pytestmark = pytest.mark.anyio


@pytest.fixture
def world(every_world: World) -> World:
    """A World on every backend (``every_world``)."""
    return every_world


class _OwnProcess(FaultyBackend):
    """A client of the store standing for a process of its own (its own store key)."""

    @property
    def store_key(self) -> Hashable:
        return ("own process", id(self))


def test_assign_is_balanced_deterministic_and_moves_few_keys() -> None:
    """Every member gets ⌊K/M⌋ or ⌈K/M⌉ keys, the result depends only on the sorted inputs; a
    join moves at most 2.5 times the newcomer's share, and a leave moves, besides the leaver's
    keys, at most 1.5 times its share between the others (measured: not the minimum)."""
    keys = [f"k{i}" for i in range(100)]
    for m in range(1, 16):
        members = [f"m{j}" for j in range(m)]
        shares = assign(keys, members)
        assert sorted(k for taken in shares.values() for k in taken) == sorted(keys)
        assert {len(taken) for taken in shares.values()} <= {100 // m, -(-100 // m)}
        assert assign(reversed(keys), list(reversed(members))) == shares
        joined = assign(keys, [*members, "new"])
        moved = sum(len(set(shares[member]) - set(joined[member])) for member in members)
        assert moved <= 2.5 * len(joined["new"])
        if m > 1:
            left = assign(keys, members[1:])
            among = sum(len(set(shares[member]) - set(left[member])) for member in members[1:])
            assert among <= 1.5 * len(shares[members[0]])


async def test_each_key_runs_on_one_member_at_a_time_and_moves(world: World) -> None:
    """Two members then a third: every key runs on exactly one member at a time with an
    increasing token per key, shares balance, and the third's leave hands its keys back."""
    s = world.settings
    keys = [f"k{i}" for i in range(6)]
    running: Counter[str] = Counter()
    most = 0
    tokens: dict[str, list[int]] = {key: [] for key in keys}
    where: dict[str, str] = {}

    def work(member: str) -> Callable[[str, Grant], Awaitable[None]]:
        async def fn(key: str, grant: Grant) -> None:
            nonlocal most
            running[key] += 1
            most = max(most, running[key])
            tokens[key].append(grant.fencing_token)
            where[key] = member
            try:
                await anyio.sleep_forever()
            finally:
                running[key] -= 1

        return fn

    async def member(owner: str, scope: anyio.CancelScope) -> None:
        with scope:
            await run_partitioned(
                keys,
                work(owner),
                name="jobs",
                owner=owner,
                backend=_OwnProcess(world.backend()),
                settings=s,
            )

    scopes = {owner: anyio.CancelScope() for owner in ("a", "b", "c")}
    async with anyio.create_task_group() as tg:
        tg.start_soon(member, "a", scopes["a"])
        tg.start_soon(member, "b", scopes["b"])
        await anyio.sleep(4 * s.heartbeat_interval)
        assert sorted(Counter(where.values()).values()) == [3, 3]
        tg.start_soon(member, "c", scopes["c"])
        await anyio.sleep(4 * s.heartbeat_interval)
        assert sorted(Counter(where.values()).values()) == [2, 2, 2]
        assert sum(running.values()) == 6
        scopes["c"].cancel()
        await anyio.sleep(4 * s.heartbeat_interval)
        assert set(where.values()) == {"a", "b"}
        assert sorted(Counter(where.values()).values()) == [3, 3]
        assert sum(running.values()) == 6
        tg.cancel_scope.cancel()
    assert most == 1
    for key_tokens in tokens.values():
        assert key_tokens == sorted(set(key_tokens))


async def test_keys_may_change_while_running() -> None:
    """Keys given as a stream: added keys start, removed keys are cancelled and released, and
    the shares stay balanced between two members."""
    store = MemoryStore()
    s = SETTINGS
    running: dict[str, str] = {}

    def work(member: str) -> Callable[[str, Grant], Awaitable[None]]:
        async def fn(key: str, grant: Grant) -> None:
            assert key not in running
            running[key] = member
            try:
                await anyio.sleep_forever()
            finally:
                del running[key]

        return fn

    senders = []
    async with anyio.create_task_group() as tg:
        for owner in ("a", "b"):
            send, receive = anyio.create_memory_object_stream[Iterable[str]](1)
            senders.append(send)
            tg.start_soon(
                functools.partial(
                    run_partitioned,
                    receive,
                    work(owner),
                    name="jobs",
                    owner=owner,
                    backend=_OwnProcess(MemoryBackend(store)),
                    settings=s,
                )
            )
        for keys in (["k1", "k2"], ["k1", "k2", "k3", "k4", "k5", "k6"], ["k5", "k6"]):
            for send in senders:
                await send.send(keys)
            await anyio.sleep(4 * s.heartbeat_interval)
            assert sorted(running) == keys
            assert sorted(Counter(running.values()).values()) == [len(keys) // 2] * 2
        tg.cancel_scope.cancel()


async def test_bad_keys_raise_lease_config_error() -> None:
    """A key that is not a non-empty string, or a bare string as keys, is refused."""

    async def fn(key: str, grant: Grant) -> None:
        pass

    backend = MemoryBackend(MemoryStore())
    for keys in (["ok", ""], ["ok", 3], "abc"):
        with pytest.raises(LeaseConfigError):
            await run_partitioned(keys, fn, name="jobs", owner="a", backend=backend)  # type: ignore[arg-type]


async def test_ten_members_starting_together_do_not_storm() -> None:
    """Ten members started together on 50 keys: once settled each runs five, and the keys were
    granted at most twice each (no member took every key first), with few requests."""
    store = MemoryStore()
    s = SETTINGS
    keys = [f"k{i:02}" for i in range(50)]
    starts: Counter[str] = Counter()
    where: dict[str, str] = {}
    backends = [_OwnProcess(MemoryBackend(store)) for _ in range(10)]

    def work(member: str) -> Callable[[str, Grant], Awaitable[None]]:
        async def fn(key: str, grant: Grant) -> None:
            starts[key] += 1
            where[key] = member
            await anyio.sleep_forever()

        return fn

    async with anyio.create_task_group() as tg:
        for index, backend in enumerate(backends):
            tg.start_soon(
                functools.partial(
                    run_partitioned,
                    keys,
                    work(f"m{index}"),
                    name="jobs",
                    owner=f"m{index}",
                    backend=backend,
                    settings=s,
                )
            )
        await anyio.sleep(10 * s.heartbeat_interval)
        tg.cancel_scope.cancel()
    assert sorted(Counter(where.values()).values()) == [5] * 10
    assert max(starts.values()) <= 2
    assert sum(starts.values()) <= 70
    writes = sum(backend.calls["create"] + backend.calls["update"] for backend in backends)
    # 50 key leases and 10 member leases renewed every R for 10 R, plus a little for the start.
    assert writes <= 60 * 11 + 2 * 60


async def test_time_to_balance_after_a_join_and_after_a_crash() -> None:
    """Measured on virtual time, 12 keys on three members: a fourth member's join is balanced
    (3 keys each) within wait_interval, moving only the keys the assignment moves; after a
    member crashes (cut off from the store), its keys run elsewhere within L plus
    wait_interval."""
    store = MemoryStore()
    s = SETTINGS
    keys = [f"k{i:02}" for i in range(12)]
    where: dict[str, str] = {}
    backends = {owner: _OwnProcess(MemoryBackend(store)) for owner in ("a", "b", "c", "d")}

    def work(member: str) -> Callable[[str, Grant], Awaitable[None]]:
        async def fn(key: str, grant: Grant) -> None:
            where[key] = member
            await anyio.sleep_forever()

        return fn

    async def member(owner: str) -> None:
        with contextlib.suppress(LeaseLost):
            await run_partitioned(
                keys, work(owner), name="jobs", owner=owner, backend=backends[owner], settings=s
            )

    async def balanced(shares: list[int], excluded: str = "") -> float:
        began = anyio.current_time()
        while sorted(Counter(where.values()).values()) != shares or excluded in where.values():
            await anyio.sleep(0.01)
        return anyio.current_time() - began

    async with anyio.create_task_group() as tg:
        for owner in ("a", "b", "c"):
            tg.start_soon(member, owner)
        await balanced([4, 4, 4])
        before = dict(where)
        tg.start_soon(member, "d")
        join = await balanced([3, 3, 3, 3])
        moved = sum(where[key] != before[key] for key in keys)
        backends["d"].pause()  # d crashes: it renews no more
        crash = await balanced([4, 4, 4], excluded="d")
        tg.cancel_scope.cancel()
    assert join <= s.wait_interval
    # Exactly the keys the assignment moves, no more.
    identity = {owner: f"{owner}_{incarnation()}" for owner in backends}
    shares = assign(keys, [identity[o] for o in "abc"])
    joined = assign(keys, [identity[o] for o in "abcd"])
    assert moved == sum(len(set(shares[identity[o]]) - set(joined[identity[o]])) for o in "abc")
    assert s.heartbeat_timeout - s.heartbeat_interval <= crash
    assert crash <= s.heartbeat_timeout + s.wait_interval


async def test_a_crash_replaced_at_once_fails_over_within_l() -> None:
    """Measured on virtual time, 12 keys on three members: one crashes and its replacement joins
    0.5 s later; every key runs again, balanced over the live members, within L + R + T +
    wait_interval of the crash (the replacement never counts the dead member alive)."""
    store = MemoryStore()
    s = SETTINGS
    keys = [f"k{i:02}" for i in range(12)]
    where: dict[str, str] = {}
    def ident(owner: str) -> str:
        return f"{owner}_{incarnation()}"

    def asked_in_vain(c: str, d: str) -> set[str]:
        """The keys of ``c`` (dead) that ``d``, counting ``c`` alive, would ask it for and that
        then go to a or b: a request writes the record, so they would wait L more."""
        dead = set(assign(keys, [ident(o) for o in ("a", "b", c)])[ident(c)])
        wrongly = set(assign(keys, [ident(o) for o in ("a", "b", c, d)])[ident(d)])
        after = assign(keys, [ident(o) for o in ("a", "b", d)])
        return dead & wrongly & set(after[ident("a")] + after[ident("b")])

    # Identities hash differently in every process (their incarnation id): pick names for the
    # dead member and its replacement that make the case to pin.
    names = itertools.product((f"c{i}" for i in range(30)), (f"d{i}" for i in range(30)))
    c, d = next(pair for pair in names if asked_in_vain(*pair))
    backends = {owner: _OwnProcess(MemoryBackend(store)) for owner in ("a", "b", c, d)}

    def work(member: str) -> Callable[[str, Grant], Awaitable[None]]:
        async def fn(key: str, grant: Grant) -> None:
            where[key] = member
            await anyio.sleep_forever()

        return fn

    async def member(owner: str) -> None:
        with contextlib.suppress(LeaseLost):
            await run_partitioned(
                keys, work(owner), name="jobs", owner=owner, backend=backends[owner], settings=s
            )

    async def balanced(shares: list[int], excluded: str = "") -> float:
        began = anyio.current_time()
        while sorted(Counter(where.values()).values()) != shares or excluded in where.values():
            await anyio.sleep(0.01)
        return anyio.current_time() - began

    async with anyio.create_task_group() as tg:
        for owner in ("a", "b", c):
            tg.start_soon(member, owner)
        await balanced([4, 4, 4])
        await anyio.sleep(s.heartbeat_timeout)  # settled: c's keys renewed many times
        backends[c].pause()  # c is killed: it renews no more
        crashed = anyio.current_time()
        await anyio.sleep(0.5)
        tg.start_soon(member, d)  # its replacement
        await balanced([4, 4, 4], excluded=c)
        failover = anyio.current_time() - crashed
        tg.cancel_scope.cancel()
    bound = s.heartbeat_timeout + s.heartbeat_interval + s.lease_operation_timeout
    assert failover <= bound + s.wait_interval


async def test_a_key_its_live_holder_renews_no_more_is_taken_at_once_when_it_moves() -> None:
    """A key whose record names a live member that has not renewed it for L (it lost the key) is
    taken at once when a leave gives it to another member, not L after a handover request."""
    store = MemoryStore()
    s = SETTINGS
    keys = [f"k{i:02}" for i in range(12)]
    ident = {owner: f"{owner}_{incarnation()}" for owner in "abc"}
    moved = sorted(
        set(assign(keys, [ident["a"], ident["b"]])[ident["b"]])
        - set(assign(keys, [ident["a"], ident["b"], ident["c"]])[ident["b"]])
    )
    assert moved  # c's leave gives b these keys
    started: dict[str, float] = {}
    a_keys = _OwnProcess(MemoryBackend(store))  # a's key leases: they stop renewing
    held = anyio.Event()

    async def fn(key: str, grant: Grant) -> None:
        started[key] = anyio.current_time()
        await anyio.sleep_forever()

    async def member(owner: str, *, task_status: anyio.abc.TaskStatus[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            group = partition_group("jobs", owner, _OwnProcess(MemoryBackend(store)), s)
            async with group.joined():
                task_status.started(scope)
                await anyio.sleep_forever()

    async def a_holds(key: str, count: list[int]) -> None:
        with contextlib.suppress(LeaseLost):
            async with Lease(record_name("jobs", "key", key), "a", a_keys, s).held():
                count.append(1)
                if len(count) == len(keys):
                    held.set()
                await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        await tg.start(member, "a")
        count: list[int] = []
        for key in keys:
            tg.start_soon(a_holds, key, count)
        await held.wait()
        a_keys.pause()  # a stays in the group; its key records stand unrenewed from here
        c_scope = await tg.start(member, "c")
        tg.start_soon(
            functools.partial(
                run_partitioned, keys, fn, name="jobs", owner="b",
                backend=_OwnProcess(MemoryBackend(store)), settings=s,
            )
        )
        await anyio.sleep(s.heartbeat_timeout + s.wait_interval)  # b has watched them for L
        assert not set(moved) & set(started)
        left = anyio.current_time()
        c_scope.cancel()  # c leaves cleanly: b sees it at once
        with anyio.fail_after(2 * s.heartbeat_timeout):
            while not set(moved) <= set(started):
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert max(started[key] for key in moved) - left <= s.wait_interval
