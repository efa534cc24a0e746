"""The shared watch: one feed per backend object, its waiters and its holders.

The hub (trio_lease/_shared_watch.py) runs one :class:`~trio_lease.abc.WatchFeed` for every
subscriber of a backend object; waiters wake on it (trio_lease/_waiting.py) and holders learn of
a takeover from it (trio_lease/_heartbeat.py), confirming each foreign state with one read.

Most tests use :class:`ScriptedBackend`, a memory backend whose feed the test controls: it
forwards the store's commits, drops them, or delivers them late, and the test can inject states
(replays, inventions) or make the feed fail. Everything runs on virtual time, on asyncio and
trio, with L = 60 s and R = 20 s so that a loss seen on the watch (milliseconds) and a loss seen
at the next renewal (up to R later) are far apart.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from trio_lease import (
    AcquireTimeout,
    BackendUnavailable,
    Lease,
    LeaseConfigError,
    LeaseLost,
    LeaseSettings,
)
from trio_lease._shared_watch import RERUN_PAUSE, FeedFailure, SharedWatch, shared_watch
from trio_lease.abc import LeaseRecord, Publish, Watched, WatchFeed
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.testing import virtual_time_backends

pytestmark = pytest.mark.anyio

#: L = 60 s, R = 20 s (T = 5 s, D = 40 s): a renewal every 20 s, a waiter polls every 20 s.
SETTINGS = LeaseSettings(heartbeat_timeout=60, heartbeat_interval=20)

#: "At once" on virtual time: a watch event plus one confirming read take a few checkpoints.
AT_ONCE = 0.01

State = LeaseRecord | None


class ScriptedFeed(WatchFeed):
    """A feed the test controls; it counts its runs and keeps a resume point across them.

    ``mode``: "forward" publishes each commit of the store, "drop" publishes nothing, "lag"
    publishes each commit ``lag`` seconds late. ``fail_with``: raised at the start of every run.
    """

    def __init__(self, store: MemoryStore, mode: str = "forward", lag: float = 0.0) -> None:
        self.store = store
        self.mode = mode
        self.lag = lag
        self.fail_with: Exception | None = None
        self.runs = 0
        self.active = 0
        self.most_active = 0
        #: Events seen by every run so far (the "resume point": it must survive reruns).
        self.resume = 0
        #: The resume point each run started from.
        self.started_from: list[int] = []
        self._publish: Publish | None = None
        self._watched: Watched | None = None
        self._fail: anyio.Event | None = None
        self._failure: Exception | None = None
        #: Late events (due time, name, state), kept on the feed like a resume point.
        self.backlog: list[tuple[float, str, State]] = []
        self._more: anyio.Event | None = None

    def inject(self, name: str, state: State) -> None:
        """Publish ``state`` for ``name`` now, through the running feed."""
        assert self._publish is not None, "the feed is not running"
        self._publish(name, state)

    def watching(self, name: str) -> bool:
        return self._watched is not None and name in self._watched

    def fail_now(self, error: Exception) -> None:
        """Make the running feed raise ``error``."""
        assert self._fail is not None, "the feed is not running"
        self._failure = error
        self._fail.set()

    async def _deliver_late(self, publish: Publish) -> None:
        while True:
            now = anyio.current_time()
            while self.backlog and self.backlog[0][0] <= now:
                _, name, state = self.backlog.pop(0)
                publish(name, state)
            self._more = anyio.Event()
            with anyio.move_on_after(self.backlog[0][0] - now if self.backlog else 3600):
                await self._more.wait()

    async def run(self, watched: Watched, publish: Publish) -> None:
        self.runs += 1
        self.started_from.append(self.resume)
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            if self.fail_with is not None:
                raise self.fail_with
            self._publish, self._watched = publish, watched
            self._fail = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._deliver_late, publish)

                def listener(name: str, state: State) -> None:
                    self.resume += 1
                    if self.mode == "forward":
                        publish(name, state)
                    elif self.mode == "lag":
                        self.backlog.append((anyio.current_time() + self.lag, name, state))
                        if self._more is not None:
                            self._more.set()

                self.store._listeners.append(listener)
                try:
                    await self._fail.wait()
                finally:
                    self.store._listeners.remove(listener)
                assert self._failure is not None
                raise self._failure
        finally:
            self.active -= 1
            self._publish = self._watched = self._fail = None


class ScriptedBackend(MemoryBackend):
    """A memory backend with a :class:`ScriptedFeed`, counting its reads and writes."""

    def __init__(self, store: MemoryStore, feed: ScriptedFeed | None = None) -> None:
        super().__init__(store)
        self.feed = feed if feed is not None else ScriptedFeed(store)
        self.gets = 0
        self.updates = 0
        #: Raised by every request while set (a misconfigured client).
        self.broken: Exception | None = None
        #: Seconds a read's reply takes to arrive (the record is read before).
        self.reply_delay = 0.0

    def watch_feed(self) -> ScriptedFeed:
        return self.feed

    async def get(self, name: str) -> LeaseRecord | None:
        self.gets += 1
        if self.broken is not None:
            raise self.broken
        record = await super().get(name)
        if self.reply_delay:
            await anyio.sleep(self.reply_delay)
        return record

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        if self.broken is not None:
            raise self.broken
        return await super().create(record)

    async def update(self, record: LeaseRecord, expected_version: str) -> LeaseRecord:
        self.updates += 1
        if self.broken is not None:
            raise self.broken
        return await super().update(record, expected_version)


def _hub(backend: ScriptedBackend) -> SharedWatch:
    hub = shared_watch(backend)
    assert hub is not None
    return hub


async def _settle() -> None:
    """Let every ready task run (a few checkpoints; no virtual time passes)."""
    for _ in range(20):
        await anyio.lowlevel.checkpoint()


async def _follow(
    hub: SharedWatch,
    name: str,
    into: list[State | FeedFailure],
    **kw: Any,
) -> None:
    async def receive(state: State | FeedFailure) -> None:
        into.append(state)

    await hub.follow(name, receive, **kw)


async def _follow_in(
    scope: anyio.CancelScope, hub: SharedWatch, name: str, into: list[State | FeedFailure]
) -> None:
    """:func:`_follow` within ``scope``: cancelling it makes this subscriber leave."""
    with scope:
        await _follow(hub, name, into)


def _record(name: str, holder: str, token: int = 1) -> LeaseRecord:
    return LeaseRecord(name=name, holder=holder, lease_duration=60, fencing_token=token)


# -- the hub ------------------------------------------------------------------------------------


async def test_one_feed_serves_every_subscriber_of_every_name() -> None:
    """Many subscribers on many names run one feed, once, and each gets its own name's states."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    hub = _hub(backend)
    seen: dict[tuple[str, int], list[State | FeedFailure]] = {}
    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c", "d", "e"):
            for i in range(4):
                seen[name, i] = []
                tg.start_soon(_follow, hub, name, seen[name, i])
        await _settle()
        assert hub.subscribers == 20
        for name in ("a", "c"):
            await backend.create(_record(name, "x"))
        await _settle()
        tg.cancel_scope.cancel()
    assert (backend.feed.runs, backend.feed.most_active) == (1, 1)
    for (name, _), states in seen.items():
        holders = [s.holder for s in states if isinstance(s, LeaseRecord)]
        assert holders == (["x"] if name in ("a", "c") else []), name


async def test_next_subscriber_reruns_the_same_feed_when_its_host_leaves() -> None:
    """When the subscriber hosting the feed leaves, another runs the same feed object again,
    from the resume point the first run left."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    hub = _hub(backend)
    first: list[State | FeedFailure] = []
    second: list[State | FeedFailure] = []
    async with anyio.create_task_group() as tg:
        host_scope = anyio.CancelScope()
        tg.start_soon(_follow_in, host_scope, hub, "job", first)
        await _settle()
        tg.start_soon(_follow, hub, "job", second)
        await _settle()
        await backend.create(_record("job", "x"))
        await _settle()
        assert backend.feed.runs == 1
        host_scope.cancel()
        await _settle()
        assert backend.feed.runs == 2
        assert hub.feed is backend.feed
        await backend.update(_record("job", "y", 2), "1")
        await _settle()
        tg.cancel_scope.cancel()
    assert backend.feed.started_from == [0, 1]
    assert backend.feed.most_active == 1
    assert [s.holder for s in first if isinstance(s, LeaseRecord)] == ["x"]
    assert [s.holder for s in second if isinstance(s, LeaseRecord)] == ["x", "y"]


class PerNameBackend(MemoryBackend):
    """A memory backend offering only ``watch(name)``: the hub runs a PerNameFeed on it."""

    def watch_feed(self) -> None:
        return None


async def test_a_holders_subscription_is_preferred_as_the_next_host() -> None:
    """When the host leaves, a lasting subscriber (a holder) takes the feed over, not the
    next waiter in line: waiters come and go with every grant, and each change of host costs
    the feed a restart."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    hub = _hub(backend)
    first = anyio.CancelScope()
    second = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_follow_in, first, hub, "a", [])
        await _settle()
        tg.start_soon(_follow_in, second, hub, "b", [])
        await _settle()
        tg.start_soon(functools.partial(_follow, hub, "c", [], lasting=True))
        await _settle()
        assert backend.feed.runs == 1
        first.cancel()  # the host leaves: the holder's subscription, not "b", runs the feed
        await _settle()
        assert backend.feed.runs == 2
        second.cancel()  # "b" was never the host: no restart
        await _settle()
        assert (backend.feed.runs, backend.feed.active) == (2, 1)
        tg.cancel_scope.cancel()


async def test_waiters_granted_in_turn_restart_the_feed_only_a_few_times() -> None:
    """Twenty waiters on twenty busy leases, each granted in turn and then holding on: the
    feed moves to the first holder's subscription and stays there (it restarted at nearly
    every grant when the next waiter in line took it over)."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    names = [f"job-{i}" for i in range(20)]
    held: list[str] = []
    async with anyio.create_task_group() as outer:
        releases = []
        for name in names:
            release = anyio.Event()
            releases.append(release)
            outer.start_soon(_hold_until, Lease(name, "other", MemoryBackend(store), SETTINGS),
                             release)
        await anyio.sleep(1)
        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(_take_and_keep, Lease(name, "a", backend, SETTINGS), held)
            await anyio.sleep(1)
            for release in releases:
                release.set()
                await anyio.sleep(1)
            await anyio.sleep(1)
            assert sorted(held) == sorted(names)
            tg.cancel_scope.cancel()
    assert backend.feed.most_active == 1
    assert backend.feed.runs <= 3


async def _hold_until(lease: Lease, release: anyio.Event) -> None:
    async with lease.held():
        await release.wait()


async def _take_and_keep(lease: Lease, held: list[str]) -> None:
    async with lease.held():
        held.append(lease.name)
        await anyio.sleep_forever()


@pytest.mark.parametrize(
    "kind",
    [
        "memory",
        "per-name",
    ],
)
async def test_a_change_during_the_handover_between_hosts_is_published(kind: str) -> None:
    """A change committed while the feed moves from the subscriber that left to the next one
    (a few checkpoints with no run active) still reaches the remaining subscriber."""
    missed = []
    for checkpoints in [k for k in range(6) for _ in range(10)]:  # trio shuffles its run queue
        store = MemoryStore()
        backend = MemoryBackend(store) if kind == "memory" else PerNameBackend(store)
        hub = shared_watch(backend)
        assert hub is not None
        states: list[State | FeedFailure] = []
        async with anyio.create_task_group() as tg:
            host = anyio.CancelScope()
            tg.start_soon(_follow_in, host, hub, "job", [])
            await _settle()
            tg.start_soon(_follow, hub, "job", states)
            await _settle()
            states.clear()  # a per-name watch yields the current record first
            host.cancel()
            for _ in range(checkpoints):
                await anyio.lowlevel.checkpoint()
            store._commit(_record("job", "x"))
            await anyio.sleep(5)
            tg.cancel_scope.cancel()
        if [s.holder for s in states if isinstance(s, LeaseRecord)][-1:] != ["x"]:
            missed.append(checkpoints)
    assert missed == []


async def test_first_read_is_delivered_before_any_event() -> None:
    """A subscriber's ``first`` read is delivered even if the feed never publishes."""
    store = MemoryStore()
    backend = ScriptedBackend(store, ScriptedFeed(store, mode="drop"))
    await backend.create(_record("job", "x"))
    states: list[State | FeedFailure] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: _follow(_hub(backend), "job", states, first=lambda: backend.get("job"))
        )
        await _settle()
        tg.cancel_scope.cancel()
    assert [s.holder for s in states if isinstance(s, LeaseRecord)] == ["x"]


async def test_a_change_during_the_first_read_is_not_hidden_by_it() -> None:
    """A change published while the subscriber's ``first`` read is in flight (its reply is
    slow) still reaches the subscriber after that older read: the read does not replace it."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    await backend.create(_record("job", "x"))

    async def slow_read() -> State:
        current = await backend.get("job")
        await anyio.sleep(1)  # the reply travels; the record changes meanwhile
        return current

    states: list[State | FeedFailure] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _follow(_hub(backend), "job", states, first=slow_read))
        await _settle()
        await backend.update(_record("job", "y", 2), "1")
        await anyio.sleep(2)
        tg.cancel_scope.cancel()
    assert [s.holder for s in states if isinstance(s, LeaseRecord)][-1] == "y"


async def test_unwatched_names_are_dropped() -> None:
    """States of names nobody follows reach no one, and a name leaves the watched set with its
    last subscriber."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    hub = _hub(backend)
    states: list[State | FeedFailure] = []
    async with anyio.create_task_group() as tg:
        other = anyio.CancelScope()
        tg.start_soon(_follow, hub, "job", states)
        tg.start_soon(_follow_in, other, hub, "other", [])
        await _settle()
        assert backend.feed.watching("other")
        other.cancel()
        await _settle()
        assert not backend.feed.watching("other") and backend.feed.watching("job")
        backend.feed.inject("other", _record("other", "x"))
        backend.feed.inject("nobody", _record("nobody", "x"))
        backend.feed.inject("job", _record("job", "y"))
        await _settle()
        tg.cancel_scope.cancel()
    assert [s.holder for s in states if isinstance(s, LeaseRecord)] == ["y"]


async def test_slow_subscriber_gets_only_the_latest_state() -> None:
    """A subscriber busy with one state gets only the latest of those published meanwhile."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    hub = _hub(backend)
    got: list[str] = []
    fast: list[State | FeedFailure] = []

    async def slow(state: State | FeedFailure) -> None:
        assert isinstance(state, LeaseRecord)
        got.append(state.holder)
        await anyio.sleep(1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(hub.follow, "job", slow)
        tg.start_soon(_follow, hub, "job", fast)
        await _settle()
        for i in range(1, 6):
            backend.feed.inject("job", _record("job", f"h{i}", i))
            await _settle()
        await anyio.sleep(5)
        tg.cancel_scope.cancel()
    assert got == ["h1", "h5"]
    assert len(fast) == 5  # the fast subscriber is not held up by the slow one


async def test_feed_failure_wakes_every_subscriber_and_feed_runs_again_after_pause() -> None:
    """A feed raising LeaseConfigError wakes every subscriber with it, and runs again after
    RERUN_PAUSE (not before)."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    hub = _hub(backend)
    seen: list[list[State | FeedFailure]] = [[] for _ in range(3)]
    async with anyio.create_task_group() as tg:
        for i, into in enumerate(seen):
            tg.start_soon(_follow, hub, f"lease-{i % 2}", into)
        await _settle()
        backend.feed.fail_now(LeaseConfigError("the feed is misconfigured"))
        await _settle()
        for into in seen:
            assert len(into) == 1 and isinstance(into[0], FeedFailure)
            assert isinstance(into[0].error, LeaseConfigError)
        assert backend.feed.runs == 1
        await anyio.sleep(RERUN_PAUSE * 0.9)
        assert backend.feed.runs == 1
        await anyio.sleep(RERUN_PAUSE * 0.2)
        assert backend.feed.runs == 2
        backend.feed.inject("lease-0", _record("lease-0", "x"))  # and it serves again
        await _settle()
        tg.cancel_scope.cancel()
    assert isinstance(seen[0][-1], LeaseRecord)


async def test_hub_is_dropped_with_its_last_subscriber() -> None:
    """The last subscriber leaving drops the hub (the next subscriber makes a new one), while the
    feed object, with its resume point, stays with the backend."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    hub = _hub(backend)
    assert _hub(backend) is hub
    with anyio.move_on_after(1):
        await _follow(hub, "job", [])
    again = _hub(backend)
    assert again is not hub
    assert again.feed is hub.feed is backend.feed
    assert _hub(ScriptedBackend(store)) is not again  # one hub per backend object


async def test_a_hub_fetched_before_its_last_subscriber_left_still_shares_one_run() -> None:
    """A subscriber that got the hub just before its last subscriber left (a holder fetches it,
    then starts following in a new task) and a later subscriber still share one run of the
    feed."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    early: list[State | FeedFailure] = []
    late: list[State | FeedFailure] = []
    async with anyio.create_task_group() as tg:
        leaving = anyio.CancelScope()
        tg.start_soon(_follow_in, leaving, _hub(backend), "other", [])
        await _settle()
        fetched = _hub(backend)  # as Holding._renew_when_turn does, before start_soon
        leaving.cancel()
        await _settle()
        tg.start_soon(_follow, fetched, "job", early)
        await _settle()
        tg.start_soon(_follow, _hub(backend), "job", late)
        await _settle()
        await backend.create(_record("job", "x"))
        await _settle()
        tg.cancel_scope.cancel()
    assert backend.feed.most_active == 1
    assert len(early) == len(late) == 1


def test_each_event_loop_gets_its_own_hub() -> None:
    """A backend used on asyncio, then on trio, works on both: the hub (whose locks and events
    belong to one loop) was dropped when the first loop's subscribers left."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    hubs: list[SharedWatch] = []

    async def use(holder: str) -> None:
        states: list[State | FeedFailure] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_follow, _hub(backend), "job", states)
            await _settle()
            current = await backend.get("job")
            if current is None:
                await backend.create(_record("job", holder))
            else:
                await backend.update(_record("job", holder, 2), current.version)
            await _settle()
            hubs.append(_hub(backend))
            tg.cancel_scope.cancel()
        assert [s.holder if isinstance(s, LeaseRecord) else s for s in states] == [holder]

    for (name, options), holder in zip(virtual_time_backends(), ["x", "y"], strict=True):
        anyio.run(use, holder, backend=name, backend_options=options)
    assert hubs[0] is not hubs[1]
    assert backend.feed.runs == 2


# -- waiters ------------------------------------------------------------------------------------


async def _hold_then_release(lease: Lease, holding: anyio.Event, release_after: float) -> None:
    async with lease.held():
        holding.set()
        await anyio.sleep(release_after)


async def _waited_for_release(holder: Lease, waiter: Lease, release_after: float) -> float:
    """``holder`` takes the lease and releases it ``release_after`` s on; returns how long
    ``waiter``, asking from the holder's grant on, took to be granted it."""
    holding = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_hold_then_release, holder, holding, release_after)
        await holding.wait()
        start = anyio.current_time()
        async with waiter.held():
            waited = anyio.current_time() - start
    return waited


@pytest.mark.parametrize(("mode", "woken"), [("forward", True), ("drop", False)])
async def test_release_wakes_a_waiting_contender_through_the_shared_feed(
    mode: str, woken: bool
) -> None:
    """A release by the holder wakes a waiting contender at once, well before its next poll,
    through the shared feed (with a feed that drops events it waits for the poll)."""
    store = MemoryStore()
    backend = ScriptedBackend(store, ScriptedFeed(store, mode=mode))
    holder = Lease("job", "holder", MemoryBackend(store), SETTINGS)
    waiter = Lease("job", "waiter", backend, SETTINGS)
    acquired_after = await _waited_for_release(holder, waiter, 3.0)
    assert backend.feed.runs == 1
    if woken:
        assert 3.0 <= acquired_after < 3.0 + AT_ONCE
    else:
        assert acquired_after >= SETTINGS.wait_interval


@pytest.mark.parametrize("feed", ["scripted", "memory"])
async def test_release_wakes_a_waiter_sharing_the_holders_feed(feed: str) -> None:
    """Holder and waiter on one backend object share one feed run; the holder hosts it, and
    its release (after its subscription left) still wakes the waiter at once."""
    store = MemoryStore()
    backend: MemoryBackend = ScriptedBackend(store) if feed == "scripted" else MemoryBackend(store)
    holder = Lease("job", "holder", backend, SETTINGS)
    waiter = Lease("job", "waiter", backend, SETTINGS)
    acquired_after = await _waited_for_release(holder, waiter, 3.0)
    assert 3.0 <= acquired_after < 3.0 + AT_ONCE
    if isinstance(backend, ScriptedBackend):
        assert backend.feed.most_active == 1


async def test_release_during_the_waiters_subscription_read_wakes_it() -> None:
    """A release while the waiter's subscription read is in flight (slow replies) wakes the
    waiter when that read returns, not at its next poll."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    backend.reply_delay = 0.5
    holder = Lease("job", "holder", MemoryBackend(store), SETTINGS)
    waiter = Lease("job", "waiter", backend, SETTINGS)
    # The waiter's attempt reads until 0.5 s, its subscription's read from 0.5 to 1 s.
    acquired_after = await _waited_for_release(holder, waiter, 0.7)
    assert acquired_after < 3.0  # a poll would come after SETTINGS.wait_interval (20 s)


async def test_feed_config_error_ends_the_wait_with_it() -> None:
    """A feed raising LeaseConfigError wakes the waiter, whose wait ends with that error at once
    (not a timeout, not at the next poll)."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    holder = Lease("job", "holder", MemoryBackend(store), SETTINGS)
    waiter = Lease("job", "waiter", backend, SETTINGS)
    holding = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_hold_then_release, holder, holding, 100.0)
        await holding.wait()

        async def misconfigure() -> None:
            await anyio.sleep(2)
            backend.broken = LeaseConfigError("the credentials were revoked")
            backend.feed.fail_now(LeaseConfigError("the watch is forbidden"))

        tg.start_soon(misconfigure)
        start = anyio.current_time()
        with pytest.raises(LeaseConfigError, match="revoked"):
            async with waiter.held(timeout=15):
                pass
        assert anyio.current_time() - start < 2 + AT_ONCE
        tg.cancel_scope.cancel()


# -- holders: a loss seen on the watch ----------------------------------------------------------


async def _take_over(store: MemoryStore, how: str) -> None:
    current = store.records["job"]
    if how == "delete":
        store.delete("job")
    elif how == "other holder":
        store._commit(
            dataclasses.replace(current, holder="thief", fencing_token=current.fencing_token + 1)
        )
    else:  # our identity, a new grant (another incarnation's token)
        store._commit(dataclasses.replace(current, fencing_token=current.fencing_token + 1))


async def _held_until_lost(
    lease: Lease, action: Callable[[], Awaitable[None]], at: float
) -> tuple[float, LeaseLost]:
    """Hold ``lease``, run ``action`` ``at`` s into the body; return when (after the action)
    and with what the body was cancelled."""
    acted: list[float] = []
    with pytest.raises(LeaseLost) as lost:
        async with lease.held():
            await anyio.sleep(at)
            await action()
            acted.append(anyio.current_time())
            await anyio.sleep_forever()
    return anyio.current_time() - acted[0], lost.value


@pytest.mark.parametrize(
    ("how", "cause"),
    [
        ("other holder", "taken over by 'thief'"),
        ("delete", "deleted"),
        ("new token", "rewritten with fencing token"),
    ],
)
async def test_foreign_change_on_the_watch_cancels_the_holder_at_once(how: str, cause: str) -> None:
    """A takeover, a deletion or a new grant written into the store cancels the holder's body
    with a bare LeaseLost within milliseconds, long before its next renewal."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    lease = Lease("job", "a", backend, SETTINGS)
    after, lost = await _held_until_lost(lease, lambda: _take_over(store, how), at=1.0)
    assert type(lost) is LeaseLost
    assert after < AT_ONCE
    assert cause in lost.cause and "seen on the watch" in lost.cause
    assert backend.updates == 0  # no renewal was due: only the watch could tell


async def test_nested_bodies_of_a_reentrant_grant_are_cancelled_at_once() -> None:
    """A takeover seen on the watch cancels every body of a reentrant grant (nested held() of
    one owner, on two Lease objects) at once."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    outer_lease = Lease("job", "a", backend, SETTINGS)
    inner_lease = Lease("job", "a", backend, SETTINGS)
    cancelled: list[float] = []
    with pytest.raises(LeaseLost, match="seen on the watch"):
        async with outer_lease.held():
            with pytest.raises(LeaseLost, match="seen on the watch"):
                async with inner_lease.held():
                    await anyio.sleep(1)
                    await _take_over(store, "other holder")
                    taken = anyio.current_time()
                    try:
                        await anyio.sleep_forever()
                    finally:
                        cancelled.append(anyio.current_time() - taken)
            await anyio.sleep_forever()
    assert cancelled and cancelled[0] < AT_ONCE


async def test_acquire_on_lost_is_called_at_once_on_a_takeover_seen_on_the_watch() -> None:
    """acquire()'s on_lost is called within milliseconds of a takeover seen on the watch."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    lease = Lease("job", "a", backend, SETTINGS)
    lost = anyio.Event()
    causes: list[BaseException | None] = []

    def on_lost(cause: BaseException | None) -> None:
        causes.append(cause)
        lost.set()

    async with lease.host():
        assert await lease.acquire(on_lost=on_lost)
        await anyio.sleep(1)
        await _take_over(store, "delete")
        with anyio.fail_after(AT_ONCE):
            await lost.wait()
        assert not lease.check_lease()
    assert len(causes) == 1 and isinstance(causes[0], LeaseLost)
    assert "seen on the watch" in causes[0].cause


async def test_many_holders_and_a_waiter_share_one_feed_and_only_the_taken_one_is_lost() -> None:
    """Holders of five leases and a waiter on one backend object run one feed; a takeover of
    one lease cancels its holder only."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    blocker = Lease("busy", "other", MemoryBackend(store), SETTINGS)
    outcome: dict[str, str] = {}

    async def hold(name: str) -> None:
        try:
            async with Lease(name, "a", backend, SETTINGS).held():
                await anyio.sleep(3 * SETTINGS.heartbeat_timeout)
            outcome[name] = "held"
        except LeaseLost:
            outcome[name] = f"lost at {anyio.current_time() - start:.3f}"

    start = anyio.current_time()
    async with blocker.held(), anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(hold, f"lease-{i}")
        tg.start_soon(_wait_in_vain, Lease("busy", "a", backend, SETTINGS))
        await anyio.sleep(1)
        store._commit(
            dataclasses.replace(store.records["lease-2"], holder="thief", fencing_token=9)
        )
    assert outcome.pop("lease-2") == "lost at 1.000"
    assert set(outcome.values()) == {"held"}
    assert backend.feed.most_active == 1
    assert backend.feed.runs <= 3  # the first, then at most a handover per subscriber that left


async def _wait_in_vain(lease: Lease) -> None:
    with pytest.raises(AcquireTimeout):
        async with lease.held(timeout=2 * SETTINGS.heartbeat_timeout):
            pass


# -- holders: no false loss ---------------------------------------------------------------------


async def _hold_for(
    lease: Lease, seconds: float, during: Callable[[], Coroutine[Any, Any, None]]
) -> None:
    """Hold ``lease`` for ``seconds`` while ``during`` runs; the grant must stay valid."""
    async with lease.held() as grant, anyio.create_task_group() as tg:
        tg.start_soon(during)
        await anyio.sleep(seconds)
        grant.check()
        tg.cancel_scope.cancel()


async def test_replayed_old_state_is_no_loss() -> None:
    """A feed replaying an old state (another holder, an older token) while the holder renews
    does not cancel it: the confirming read shows the grant still ours."""
    store = MemoryStore()
    backend = ScriptedBackend(store)
    store._commit(_record("job", "previous", 7))
    store.records["job"] = dataclasses.replace(store.records["job"], holder="")  # released
    lease = Lease("job", "a", backend, SETTINGS)

    async def replay() -> None:
        old = _record("job", "previous", 7)
        for _ in range(10):
            await anyio.sleep(5)
            backend.feed.inject("job", old)
            backend.feed.inject("job", None)

    gets_before = backend.gets
    await _hold_for(lease, 3 * SETTINGS.heartbeat_timeout, replay)
    assert backend.updates >= 3 * SETTINGS.heartbeat_timeout / SETTINGS.heartbeat_interval - 1
    assert backend.gets - gets_before >= 10  # each replay was confirmed by a read


async def test_lagging_feed_delivering_the_previous_grant_is_no_loss() -> None:
    """A feed that delivers the previous holder's states after this holder took over costs
    reads, not the grant."""
    store = MemoryStore()
    backend = ScriptedBackend(store, ScriptedFeed(store, mode="lag", lag=30))
    other = Lease("job", "previous", MemoryBackend(store), SETTINGS)
    async with anyio.create_task_group() as tg:
        holding = anyio.Event()
        tg.start_soon(_hold_then_release, other, holding, 25.0)  # renews once, then releases
        await holding.wait()
        lease = Lease("job", "a", backend, SETTINGS)
        async with lease.held() as grant:  # at the waiter's poll after the release (~40 s)
            gets_before = backend.gets
            late = [s for _, _, s in backend.feed.backlog if s is not None and s.holder != ""]
            assert late and late[0].holder.startswith("previous")  # still to be delivered
            await anyio.sleep(3 * SETTINGS.heartbeat_timeout)
            grant.check()
    assert backend.gets - gets_before >= 1  # the late states were seen, and confirmed by a read
    assert backend.updates >= 3 * SETTINGS.heartbeat_timeout / SETTINGS.heartbeat_interval - 1


async def test_invented_foreign_states_cost_bounded_reads() -> None:
    """A feed inventing foreign states without pause costs at most one read per CONFIRM_PAUSE
    (no read storm), and no loss."""
    from trio_lease._heartbeat import CONFIRM_PAUSE

    store = MemoryStore()
    backend = ScriptedBackend(store)
    lease = Lease("job", "a", backend, SETTINGS)
    flood = 10.0

    async def invent() -> None:
        for i in range(int(flood / 0.01)):
            backend.feed.inject("job", _record("job", f"ghost{i}", 1000 + i))
            await anyio.sleep(0.01)

    async with lease.held() as grant:
        await _settle()  # the holder's subscription started the feed
        gets_before = backend.gets
        await invent()
        reads = backend.gets - gets_before
        grant.check()
    assert 1 <= reads <= flood / CONFIRM_PAUSE + 2


@pytest.mark.parametrize("mode", ["drop", "fail", "unavailable", "lag"])
async def test_silent_feed_leaves_the_deadline_rules(mode: str) -> None:
    """A feed that drops every event, fails every run (with an error retrying cannot fix, or
    against its contract with a transient one) or lags far behind leaves the holder renewing
    normally; a real takeover is then found by the next renewal."""
    store = MemoryStore()
    feed = ScriptedFeed(store, mode="lag" if mode == "lag" else "drop", lag=1000)
    if mode == "fail":
        feed.fail_with = LeaseConfigError("the watch is forbidden")
    elif mode == "unavailable":
        feed.fail_with = BackendUnavailable("the watch connection was reset")
    backend = ScriptedBackend(store, feed)
    lease = Lease("job", "a", backend, SETTINGS)
    R, T = SETTINGS.heartbeat_interval, SETTINGS.lease_operation_timeout

    async def take_over() -> None:
        await _take_over(store, "other holder")

    after, lost = await _held_until_lost(lease, take_over, at=3 * R + 1)
    assert backend.updates >= 3  # renewed normally until the takeover
    assert R - 1 <= after <= R - 1 + T  # found by the renewal due R after the last one
    assert "taken over by 'thief'" in lost.cause and "watch" not in lost.cause
    if mode in ("fail", "unavailable"):
        assert feed.runs > 1  # the hub kept running it again


async def test_timeout_still_applies_with_a_shared_watch() -> None:
    """A waiter on a backend with a shared watch and a held lease still times out."""
    store = MemoryStore()
    holder = Lease("job", "holder", MemoryBackend(store), SETTINGS)
    waiter = Lease("job", "waiter", ScriptedBackend(store), SETTINGS)
    holding = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_hold_then_release, holder, holding, 100.0)
        await holding.wait()
        with pytest.raises(AcquireTimeout):
            async with waiter.held(timeout=30):
                pass
        tg.cancel_scope.cancel()


async def test_a_waiter_is_not_woken_by_the_holders_renewals() -> None:
    """Followers cost nothing per renewal: a waiter that polls every L reads about once per L
    while the holder renews every R, yet still takes over at once when the holder releases."""
    store = MemoryStore()
    settings = LeaseSettings(
        heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5, poll_interval=15
    )
    holder = Lease("job", "a", MemoryBackend(store), settings)
    waiter_backend = ScriptedBackend(store)
    waiter = Lease("job", "b", waiter_backend, settings)
    got: list[float] = []
    async with anyio.create_task_group() as tg:

        async def hold() -> None:
            async with holder.held():
                await anyio.sleep(60)

        async def wait() -> None:
            async with waiter.held():
                got.append(anyio.current_time())

        tg.start_soon(hold)
        await anyio.sleep(0.1)
        tg.start_soon(wait)
        await anyio.sleep(59)
        # 39 renewals went by: the waiter read when it started, when it subscribed, and at most
        # once per L since (its countdown restarted at each renewal it saw on the watch).
        assert waiter_backend.gets <= 2 + 59 // 15 + 1
        assert not got
    assert got and got[0] == pytest.approx(60, abs=0.05)  # the holder released at t = 60


async def test_invented_holder_changes_cost_a_waiter_bounded_reads() -> None:
    """A feed inventing holder changes at new versions every 10 ms, while every read shows the
    real holder unchanged: the waiter reads at most once per CONFIRM_PAUSE (a watch wake-up
    its read did not bear out makes the next one wait), not once per event; and it still takes
    the lease at once when the holder really releases."""
    from trio_lease._heartbeat import CONFIRM_PAUSE

    store = MemoryStore()
    backend = ScriptedBackend(store, ScriptedFeed(store, mode="drop"))  # no real events
    holder = Lease("job", "holder", MemoryBackend(store), SETTINGS)
    waiter = Lease("job", "waiter", backend, SETTINGS)
    flood = 10.0
    got: list[float] = []
    holding = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_hold_then_release, holder, holding, 15.0)
        await holding.wait()

        async def wait() -> None:
            async with waiter.held():
                got.append(anyio.current_time())

        tg.start_soon(wait)
        await anyio.sleep(1)  # waiting, subscribed
        gets_before = backend.gets
        for i in range(int(flood / 0.01)):
            ghost = dataclasses.replace(_record("job", f"ghost{i % 2}"), version=str(10_000 + i))
            backend.feed.inject("job", ghost)
            await anyio.sleep(0.01)
        reads = backend.gets - gets_before
        released_at = anyio.current_time() + 4  # the holder leaves at 15 s
        backend.feed.mode = "forward"
    assert 1 <= reads <= flood / CONFIRM_PAUSE + 2, reads
    assert got and 0 <= got[0] - released_at < CONFIRM_PAUSE + AT_ONCE
