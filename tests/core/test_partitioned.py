"""run_partitioned: each key on one live member at a time, balanced, moved on join and leave.

The tests taking ``world`` run on every backend, on asyncio and trio; :func:`assign`'s balance
and moves are checked directly.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable

import anyio
import pytest

from tests.conftest import STARVED, World
from trio_lease import (
    Grant,
    Lease,
    LeaseConfigError,
    LeaseLost,
    LeaseRecord,
    add_observer,
    remove_observer,
    run_partitioned,
)
from trio_lease._group import partition_group
from trio_lease._identity import incarnation
from trio_lease._namespace import record_name
from trio_lease._partitioned import (
    RELEASES_AT_ONCE,
    RETRY_CAP,
    RETRY_FIRST,
    assign,
    retry_delay,
)
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import FaultyBackend

from ._own_process import OwnProcess
from ._recorder import Recorder
from .conftest import SETTINGS

pytestmark = pytest.mark.anyio


@pytest.fixture
def world(every_world: World) -> World:
    """A World on every backend (``every_world``)."""
    return every_world


class _Members:
    """run_partitioned members over ``keys`` on one memory store, each a process of its own
    (a backend it can pause); ``where`` names the member each key last started on."""

    def __init__(self, keys: list[str], owners: Iterable[str]) -> None:
        store = MemoryStore()
        self.keys = keys
        self.where: dict[str, str] = {}
        self.backends = {owner: OwnProcess(MemoryBackend(store)) for owner in owners}

    async def member(self, owner: str) -> None:
        """Run member ``owner`` until cancelled (or until it loses its membership)."""

        async def fn(key: str, grant: Grant) -> None:
            self.where[key] = owner
            await anyio.sleep_forever()

        with contextlib.suppress(LeaseLost):
            await run_partitioned(
                self.keys,
                fn,
                name="jobs",
                owner=owner,
                backend=self.backends[owner],
                settings=SETTINGS,
            )

    async def balanced(self, shares: list[int], excluded: str = "") -> float:
        """Wait until the keys run in ``shares`` (sorted counts), none on ``excluded``; return
        how long that took."""
        began = anyio.current_time()
        where = self.where
        while sorted(Counter(where.values()).values()) != shares or excluded in where.values():
            await anyio.sleep(0.01)
        return anyio.current_time() - began


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
            while True:
                try:
                    await run_partitioned(
                        keys,
                        work(owner),
                        name="jobs",
                        owner=owner,
                        backend=OwnProcess(world.backend()),
                        settings=s,
                    )
                except LeaseLost as exc:
                    # On a real store a loaded machine may starve a member of its group lease
                    # (it must then stop, as it does); it joins again, as a supervised process
                    # would. On virtual time nothing starves: any loss fails the test.
                    if not world.tolerance or not re.search(STARVED, f"LeaseLost: {exc}"):
                        raise

    # Each step settles within 4R on virtual time. On a real store this test checks who runs
    # what, not how fast (the virtual-time tests below do): a loaded machine may starve a
    # member's renewals for a while, so a step there may take up to 10 L.
    within = 4 * s.heartbeat_interval if not world.tolerance else 10 * s.heartbeat_timeout

    async def settles(shares: list[int], members: set[str]) -> None:
        with anyio.move_on_after(within):
            while (
                sorted(Counter(where.values()).values()) != shares
                or set(where.values()) != members
                or sum(running.values()) != len(keys)
            ):
                await anyio.sleep(0.01)
        assert sorted(Counter(where.values()).values()) == shares
        assert set(where.values()) == members
        assert sum(running.values()) == len(keys)

    scopes = {owner: anyio.CancelScope() for owner in ("a", "b", "c")}
    async with anyio.create_task_group() as tg:
        tg.start_soon(member, "a", scopes["a"])
        tg.start_soon(member, "b", scopes["b"])
        await settles([3, 3], {"a", "b"})
        tg.start_soon(member, "c", scopes["c"])
        await settles([2, 2, 2], {"a", "b", "c"})
        scopes["c"].cancel()
        await settles([3, 3], {"a", "b"})
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
    async with contextlib.AsyncExitStack() as streams, anyio.create_task_group() as tg:
        for owner in ("a", "b"):
            send, receive = anyio.create_memory_object_stream[Iterable[str]](1)
            senders.append(await streams.enter_async_context(send))
            await streams.enter_async_context(receive)  # the caller's to close
            tg.start_soon(
                functools.partial(
                    run_partitioned,
                    receive,
                    work(owner),
                    name="jobs",
                    owner=owner,
                    backend=OwnProcess(MemoryBackend(store)),
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
    backends = [OwnProcess(MemoryBackend(store)) for _ in range(10)]

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
    s = SETTINGS
    keys = [f"k{i:02}" for i in range(12)]
    members = _Members(keys, ("a", "b", "c", "d"))

    async with anyio.create_task_group() as tg:
        for owner in ("a", "b", "c"):
            tg.start_soon(members.member, owner)
        await members.balanced([4, 4, 4])
        before = dict(members.where)
        tg.start_soon(members.member, "d")
        join = await members.balanced([3, 3, 3, 3])
        moved = sum(members.where[key] != before[key] for key in keys)
        members.backends["d"].pause()  # d crashes: it renews no more
        crash = await members.balanced([4, 4, 4], excluded="d")
        tg.cancel_scope.cancel()
    assert join <= s.wait_interval
    # Exactly the keys the assignment moves, no more.
    identity = {owner: f"{owner}_{incarnation()}" for owner in members.backends}
    shares = assign(keys, [identity[o] for o in "abc"])
    joined = assign(keys, [identity[o] for o in "abcd"])
    assert moved == sum(len(set(shares[identity[o]]) - set(joined[identity[o]])) for o in "abc")
    assert s.heartbeat_timeout - s.heartbeat_interval <= crash
    assert crash <= s.heartbeat_timeout + s.wait_interval


@pytest.mark.parametrize("delay", [0.5, 7.5], ids=["replaced-at-once", "replaced-after-half-l"])
@pytest.mark.parametrize("asker", ["replacement", "member"])
async def test_a_crash_replaced_at_once_fails_over_within_l(delay: float, asker: str) -> None:
    """Measured on virtual time, 12 keys on three members: one crashes and its replacement joins
    ``delay`` later (0.5 s, or L/2: a process's start on a loaded machine); every key runs again,
    balanced over the live members, within L + R + T + wait_interval of the crash: the
    replacement never counts the dead member alive, the dead member's keys it gets are cleared
    for it by a member that watched them stand for L, and the members that still list the dead
    one do not ask it for its keys once it has stopped renewing (a request is a write: every
    other member would count the dead member's expiry from it). ``asker`` picks the names whose
    assignments make the case: the replacement, were it to count the dead member alive, or a
    member that still lists it, would ask it for keys that then go to another member."""
    s = SETTINGS
    keys = [f"k{i:02}" for i in range(12)]

    def ident(owner: str) -> str:
        return f"{owner}_{incarnation()}"

    def asked_in_vain(a: str, b: str, c: str, d: str) -> int:
        """How many keys of ``c`` (dead) ``asker`` would ask ``c`` for that then go to a member
        that cannot have them cleared for it: a and b list ``c`` alive until L after its last
        renewal, so once ``d`` joins they start their keys of the assignment to a, b, ``c`` and
        ``d``; ``d`` would too if it counted ``c`` alive."""
        dead = set(assign(keys, [ident(o) for o in (a, b, c)])[ident(c)])
        four = assign(keys, [ident(o) for o in (a, b, c, d)])
        after = assign(keys, [ident(o) for o in (a, b, d)])
        # Who asks, and who gets the key then: for the replacement's requests, a or b; for a
        # member's, the other one (a key going to the replacement is cleared for it).
        pairs = [(d, a), (d, b)] if asker == "replacement" else [(a, b), (b, a)]
        return sum(
            len(dead & set(four[ident(who)]) & set(after[ident(then)])) for who, then in pairs
        )

    def cleared_for_replacement(a: str, b: str, c: str, d: str) -> int:
        """How many of ``c``'s keys go to ``d`` once ``c`` is gone: each must be cleared for it
        by a member that watched it stand for L."""
        dead = set(assign(keys, [ident(o) for o in (a, b, c)])[ident(c)])
        return len(dead & set(assign(keys, [ident(o) for o in (a, b, d)])[ident(d)]))

    def makes_the_case(a: str, b: str, c: str, d: str) -> bool:
        return asked_in_vain(a, b, c, d) >= 1 and cleared_for_replacement(a, b, c, d) >= 1

    # Identities hash differently in every process (their incarnation id): pick the names that
    # make the case (keys asked for in vain, and keys the replacement gets cleared), the live
    # members' too (with some ids no dead member and replacement do it beside one pair of
    # live names).
    for a, b in itertools.product((f"a{i}" for i in range(10)), (f"b{i}" for i in range(10))):
        names = itertools.product((f"c{i}" for i in range(30)), (f"d{i}" for i in range(30)))
        c, d = max(names, key=lambda pair: makes_the_case(a, b, *pair))
        if makes_the_case(a, b, c, d):
            break
    assert makes_the_case(a, b, c, d)
    members = _Members(keys, (a, b, c, d))

    async with anyio.create_task_group() as tg:
        for owner in (a, b, c):
            tg.start_soon(members.member, owner)
        await members.balanced([4, 4, 4])
        await anyio.sleep(s.heartbeat_timeout)  # settled: c's keys renewed many times
        members.backends[c].pause()  # c is killed: it renews no more
        crashed = anyio.current_time()
        await anyio.sleep(delay)
        tg.start_soon(members.member, d)  # its replacement
        await members.balanced([4, 4, 4], excluded=c)
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
    a_keys = OwnProcess(MemoryBackend(store))  # a's key leases: they stop renewing
    held = anyio.Event()

    async def fn(key: str, grant: Grant) -> None:
        started[key] = anyio.current_time()
        await anyio.sleep_forever()

    async def member(owner: str, *, task_status: anyio.abc.TaskStatus[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            group = partition_group("jobs", owner, OwnProcess(MemoryBackend(store)), s)
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
                run_partitioned,
                keys,
                fn,
                name="jobs",
                owner="b",
                backend=OwnProcess(MemoryBackend(store)),
                settings=s,
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


async def test_a_failing_key_backs_off_on_its_member_while_every_other_key_runs_on() -> None:
    """A key whose fn always raises is run again on the member holding it after pauses that
    double from RETRY_FIRST up to RETRY_CAP (each within its jitter band), every failure is
    told to the observers, and the other keys run once each, never interrupted."""
    store = MemoryStore()
    s = SETTINGS
    keys = [f"k{i}" for i in range(6)]
    failed_at: list[float] = []
    failed_on: set[str] = set()
    runs: Counter[str] = Counter()
    cancelled: Counter[str] = Counter()

    def work(member: str) -> Callable[[str, Grant], Awaitable[None]]:
        async def fn(key: str, grant: Grant) -> None:
            if key == "k0":
                failed_at.append(anyio.current_time())
                failed_on.add(member)
                raise RuntimeError("poison")
            runs[key] += 1
            try:
                await anyio.sleep_forever()
            finally:
                cancelled[key] += 1

        return fn

    observer = Recorder()
    add_observer(observer)
    try:
        async with anyio.create_task_group() as tg:
            for owner in ("a", "b"):
                tg.start_soon(
                    functools.partial(
                        run_partitioned,
                        keys,
                        work(owner),
                        name="jobs",
                        owner=owner,
                        backend=OwnProcess(MemoryBackend(store)),
                        settings=s,
                    )
                )
            await anyio.sleep(20 * RETRY_CAP)
            assert not cancelled  # nothing else was cancelled while k0 kept failing
            tg.cancel_scope.cancel()
    finally:
        remove_observer(observer)
    assert len(failed_on) == 1  # retried where it is held, not moved
    assert runs == dict.fromkeys(keys[1:], 1)
    gaps = [later - earlier for earlier, later in itertools.pairwise(failed_at)]
    assert len(gaps) >= 20
    for failures, gap in enumerate(gaps, start=1):
        ceiling = min(RETRY_CAP, RETRY_FIRST * 2 ** (failures - 1))
        assert ceiling / 2 <= gap <= ceiling
    assert max(gaps) <= RETRY_CAP
    assert min(gaps[-5:]) >= RETRY_CAP / 2  # capped, still retried
    told = [
        (name, details)
        for step, name, details in observer.calls
        if step == "key_failed" and details["key"] == "k0"
    ]
    assert len(told) == len(failed_at)
    assert [details["failures"] for _, details in told] == list(range(1, len(told) + 1))
    assert [details["retry_in"] for _, details in told[:-1]] == pytest.approx(gaps)
    assert {name for name, _ in told} == {record_name("jobs", "key", "k0")}


async def test_stop_on_error_ends_the_member_with_the_key_error_bare() -> None:
    """With stop_on_error, a key's error ends the member and comes out of run_partitioned as
    itself, not inside an ExceptionGroup, with the key's other runs cancelled."""
    store = MemoryStore()
    stopped: list[str] = []

    async def fn(key: str, grant: Grant) -> None:
        if key == "k2":
            await anyio.sleep(5)
            raise KeyError("bad tenant")
        try:
            await anyio.sleep_forever()
        finally:
            stopped.append(key)

    with pytest.raises(KeyError) as caught:
        await run_partitioned(
            ["k1", "k2", "k3"],
            fn,
            name="jobs",
            owner="a",
            backend=MemoryBackend(store),
            settings=SETTINGS,
            stop_on_error=True,
        )
    assert type(caught.value) is KeyError
    assert caught.value.args == ("bad tenant",)
    assert sorted(stopped) == ["k1", "k3"]
    # Its keys were released: another member takes them at once.
    k1 = Lease(record_name("jobs", "key", "k1"), "b", MemoryBackend(store), SETTINGS)
    async with k1.try_held():
        pass


async def test_stop_on_error_keeps_every_error_of_keys_failing_together() -> None:
    """Two keys failing at the same moment with stop_on_error: both errors come out, as one
    ExceptionGroup of the two."""

    async def fn(key: str, grant: Grant) -> None:
        await anyio.sleep(10 - anyio.current_time() % 10)  # both wake on the same tick
        raise ValueError(key)

    with pytest.raises(ExceptionGroup) as caught:
        await run_partitioned(
            ["k1", "k2"],
            fn,
            name="jobs",
            owner="a",
            backend=MemoryBackend(MemoryStore()),
            settings=SETTINGS,
            stop_on_error=True,
        )
    assert sorted(str(exc) for exc in caught.value.exceptions) == ["k1", "k2"]
    assert all(type(exc) is ValueError for exc in caught.value.exceptions)


def test_retry_delay_doubles_then_caps_within_its_jitter() -> None:
    """retry_delay: RETRY_FIRST doubled per failure up to RETRY_CAP, scaled by 1 down to ½
    by the jitter; below the cap never shorter than the previous pause; no overflow."""
    for failures in range(1, 40):
        ceiling = min(RETRY_CAP, RETRY_FIRST * 2 ** (failures - 1))
        assert retry_delay(failures, 0.0) == ceiling
        assert retry_delay(failures, 0.999) == pytest.approx(ceiling / 2, rel=1e-3)
        if 2 * ceiling <= RETRY_CAP:  # below the cap, a pause never shortens
            assert retry_delay(failures + 1, 0.999) >= retry_delay(failures, 0.0) * 0.999
    assert retry_delay(10**6, 0.5) == RETRY_CAP * 0.75


async def test_inputs_are_refused_up_front_naming_the_argument() -> None:
    """A bad name, owner, keys, fn or stop_on_error raises LeaseConfigError or TypeError naming
    the argument before anything is written to the store."""

    async def fn(key: str, grant: Grant) -> None:
        pass

    def plain(key: str, grant: Grant) -> None:
        pass

    class SyncCall:
        def __call__(self, key: str, grant: Grant) -> None:
            pass

    backend = FaultyBackend(MemoryBackend(MemoryStore()))
    good: dict[str, object] = {
        "keys": ["k1"],
        "fn": fn,
        "name": "jobs",
        "owner": "a",
        "backend": backend,
    }
    cases: list[tuple[dict[str, object], type[Exception], str]] = [
        ({"name": ""}, LeaseConfigError, "name"),
        ({"name": None}, LeaseConfigError, "name"),
        ({"owner": ""}, LeaseConfigError, "owner"),
        ({"keys": []}, LeaseConfigError, "keys"),
        ({"keys": None}, TypeError, "keys"),
        ({"keys": 7}, TypeError, "keys"),
        ({"fn": plain}, TypeError, "fn"),
        ({"fn": SyncCall()}, TypeError, "fn"),
        ({"fn": None}, TypeError, "fn"),
        ({"stop_on_error": "yes"}, TypeError, "stop_on_error"),
        ({"backend": object()}, LeaseConfigError, "backend"),
    ]
    for change, error, argument in cases:
        arguments = {**good, **change}
        keys, work = arguments.pop("keys"), arguments.pop("fn")
        with pytest.raises(error, match=argument):
            await run_partitioned(keys, work, **arguments)  # type: ignore[arg-type]
    assert not backend.calls


async def test_an_object_with_an_async_call_is_a_valid_fn() -> None:
    """fn may be any object whose __call__ is an async function: it runs the keys."""
    ran: list[str] = []

    class Consumer:
        async def __call__(self, key: str, grant: Grant) -> None:
            ran.append(key)

    with anyio.move_on_after(5):
        await run_partitioned(
            ["k1"],
            Consumer(),
            name="jobs",
            owner="a",
            backend=MemoryBackend(MemoryStore()),
            settings=SETTINGS,
        )
    assert ran == ["k1"]


class _Releases(OwnProcess):
    """A process's client that notes each release it writes and how many are in flight."""

    def __init__(self, inner: MemoryBackend) -> None:
        super().__init__(inner, latency=0.05)
        self.released: list[str] = []
        self.in_flight = 0
        self.most = 0

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        if not record.is_free:
            return await super().update(record, expected_version)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            return await super().update(record, expected_version)
        finally:
            self.in_flight -= 1
            self.released.append(record.name)


async def test_a_member_leaving_with_many_keys_leaves_first_and_releases_a_few_at_a_time() -> None:
    """A member holding 100 keys that is cancelled releases its group lease first, then its
    keys at most RELEASES_AT_ONCE at a time, none timing out, and every one of them runs on the
    other member within wait_interval plus one second of the cancel."""
    store = MemoryStore()
    s = SETTINGS
    keys = [f"k{i:03}" for i in range(200)]
    where: dict[str, str] = {}
    started: dict[str, float] = {}
    leaving = _Releases(MemoryBackend(store))

    def work(member: str) -> Callable[[str, Grant], Awaitable[None]]:
        async def fn(key: str, grant: Grant) -> None:
            where[key] = member
            started[key] = anyio.current_time()
            await anyio.sleep_forever()

        return fn

    b_scope = anyio.CancelScope()

    async def b() -> None:
        with b_scope:
            await run_partitioned(
                keys, work("b"), name="jobs", owner="b", backend=leaving, settings=s
            )

    async with anyio.create_task_group() as tg:
        tg.start_soon(
            functools.partial(
                run_partitioned,
                keys,
                work("a"),
                name="jobs",
                owner="a",
                backend=OwnProcess(MemoryBackend(store)),
                settings=s,
            )
        )
        tg.start_soon(b)
        with anyio.fail_after(10 * s.heartbeat_timeout):
            while sorted(Counter(where.values()).values()) != [100, 100]:
                await anyio.sleep(0.1)
        theirs = sorted(key for key, member in where.items() if member == "b")
        cancelled = anyio.current_time()
        b_scope.cancel()
        with anyio.fail_after(s.heartbeat_timeout):
            while any(where[key] == "b" for key in theirs):
                await anyio.sleep(0.01)
        took = max(started[key] for key in theirs) - cancelled
        tg.cancel_scope.cancel()
    assert leaving.released[0].startswith(record_name("jobs", "partition-member", ""))
    assert sorted(leaving.released[1:]) == sorted(record_name("jobs", "key", key) for key in theirs)
    assert leaving.most <= RELEASES_AT_ONCE
    assert took <= s.wait_interval + 1.0


async def test_a_bad_key_set_from_the_stream_comes_out_bare() -> None:
    """A key set received on the stream with an empty key ends the member with a bare
    LeaseConfigError naming the key, not an ExceptionGroup."""
    send, receive = anyio.create_memory_object_stream[Iterable[str]](2)

    async def fn(key: str, grant: Grant) -> None:
        await anyio.sleep_forever()

    async with send, receive:
        await send.send(["k1"])
        await send.send(["k1", ""])
        with pytest.raises(LeaseConfigError, match="non-empty string") as caught:
            await run_partitioned(
                receive,
                fn,
                name="jobs",
                owner="a",
                backend=MemoryBackend(MemoryStore()),
                settings=SETTINGS,
            )
    assert type(caught.value) is LeaseConfigError
