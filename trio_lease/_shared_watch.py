"""The shared watch: one feed per backend object, multiplexed to every waiter and holder.

Every waiting contender and every holder of a process that watches a lease of a backend
object subscribes here (:meth:`SharedWatch.follow`); one :class:`~trio_lease._feed.WatchFeed`
follows all of them with as few streams as the backend can (one on Kubernetes, etcd and
SQLite). The feed runs in the task of one subscriber at a time (its host): each subscriber's
task is a candidate, and when the host leaves, one candidate takes over and the feed resumes
from the resume point it kept (structured concurrency: no task outlives the scopes that use it,
and no scope waits for another's). Each change of host costs the feed a restart (one resumed
watch request), so the next host is a holder's subscription if there is one (it stays as long
as its grant), else the oldest: waiters come and go with every grant, and handing the feed from
waiter to waiter made, for 200 waiters granted in turn, a restart nearly every grant.

Each subscription keeps only the latest state of its lease (a slow subscriber never holds the
feed up, and a burst of changes wakes it once); a subscription can filter states before they
wake it (a holder ignores its own renewals). Feed failures that retrying cannot fix wake every
subscriber with :class:`FeedFailure`; the feed runs again after a pause.

One hub per backend object and event loop while it has subscribers (its locks and events belong
to the event loop that made them); the feed object, with its resume point, lives as long as the
backend, one per event loop too (:mod:`._per_loop`): two loops in two threads never share one.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Final

import anyio

from ._abc import LeaseBackend, LeaseRecord, Watched, WatchFeed
from ._feed import PerNameFeed
from ._host import sole_error
from ._per_loop import PerLoop

__all__ = ["FeedFailure", "SharedWatch", "shared_watch"]

logger = logging.getLogger("trio_lease")

#: Pause before running a feed again after it failed or returned.
RERUN_PAUSE: Final = 1.0

#: The hub of each backend object, per event loop (a hub's locks and tasks are its loop's).
_hubs: PerLoop[LeaseBackend, SharedWatch] = PerLoop("trio_lease.hubs", weakref.WeakKeyDictionary)
#: The feed of each backend object, per event loop; kept while the backend lives.
_feeds: PerLoop[LeaseBackend, WatchFeed] = PerLoop("trio_lease.feeds", weakref.WeakKeyDictionary)


class FeedFailure:
    """Delivered to every subscriber when the feed failed with an error retrying cannot fix."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error: Exception = error


State = LeaseRecord | None
Receive = Callable[[State | FeedFailure], Awaitable[None]]


def shared_watch(backend: LeaseBackend) -> SharedWatch | None:
    """The hub of ``backend`` (made on first use), or None if it cannot watch."""
    if not backend.supports_watch:
        return None
    hub = _hubs.get(backend)
    if hub is None:
        feed = _feeds.get(backend)
        if feed is None:
            feed = _feeds[backend] = backend.watch_feed() or PerNameFeed(backend)
        hub = _hubs[backend] = SharedWatch(backend, feed)
    return hub


class _Subscription:
    """One subscriber's latest undelivered state, and what wakes it."""

    __slots__ = ("_event", "_pending", "_state", "interesting")

    def __init__(self, interesting: Callable[[State], bool] | None) -> None:
        self.interesting = interesting
        self._pending = False
        self._state: State | FeedFailure = None
        self._event = anyio.Event()

    def put(self, state: State | FeedFailure) -> None:
        if (
            self.interesting is not None
            and not isinstance(state, FeedFailure)
            and not self.interesting(state)
        ):
            return
        self._state = state
        if not self._pending:
            self._pending = True
            self._event.set()

    async def take(self) -> State | FeedFailure:
        while not self._pending:
            await self._event.wait()
        self._event = anyio.Event()
        self._pending = False
        state, self._state = self._state, None
        return state


class SharedWatch:
    """The subscribers of one backend object's leases and the feed that serves them."""

    def __init__(self, backend: LeaseBackend, feed: WatchFeed) -> None:
        self.backend: LeaseBackend = backend
        self.feed: WatchFeed = feed
        self._watched = Watched()
        self._subscriptions: dict[str, set[_Subscription]] = {}
        self._candidates: list[_Candidate] = []
        self._hosting = False
        self._arrivals = 0
        #: How many times the feed was started (a new host, or a rerun after a failure).
        self.runs: int = 0

    def __repr__(self) -> str:
        return f"<SharedWatch of {self.backend!r}: {len(self._watched)} lease(s)>"

    @property
    def subscribers(self) -> int:
        """How many subscriptions are open now."""
        return sum(len(subs) for subs in self._subscriptions.values())

    async def follow(
        self,
        name: str,
        receive: Receive,
        *,
        first: Callable[[], Awaitable[State]] | None = None,
        interesting: Callable[[State], bool] | None = None,
        lasting: bool = False,
    ) -> None:
        """Call ``receive`` with each new state of lease ``name`` until cancelled.

        ``first``: read the current state once subscribed and deliver it first (a change
        between a caller's last read and the subscription is then not missed). ``interesting``
        filters states before they wake this subscriber. Errors of ``first`` are ignored (the
        feed's next state, or the caller's own next read, tells). ``lasting``: this subscriber
        expects to stay (a holder), so it is preferred as the feed's next host.
        """
        registered = _hubs.setdefault(self.backend, self)
        if registered is not self:
            # This hub was dropped (its last subscriber left after the caller fetched it) and
            # another made since: follow there, or the one feed would run twice at once.
            await registered.follow(
                name, receive, first=first, interesting=interesting, lasting=lasting
            )
            return
        subscription = _Subscription(interesting)
        subs = self._subscriptions.setdefault(name, set())
        subs.add(subscription)
        self._watched.add(name)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._host, lasting)
                if first is not None:
                    try:
                        state = await first()
                    except Exception as exc:  # a hint only: the feed or the caller reads again
                        logger.debug("lease %r: first read of a watch failed: %s", name, exc)
                    else:
                        # Delivered on its own, not put: a state the feed published while the
                        # read was in flight may be newer, and must follow, not be replaced.
                        if interesting is None or interesting(state):
                            await receive(state)
                while True:
                    await receive(await subscription.take())
        finally:
            subs.discard(subscription)
            if not subs:
                del self._subscriptions[name]
            self._watched.discard(name)
            if not self._subscriptions and _hubs.get(self.backend) is self:
                del _hubs[self.backend]  # the next subscriber makes a new hub on its loop

    def publish(self, name: str, state: State) -> None:
        """Hand a state of ``name`` to its subscribers (the feed's ``publish``)."""
        for subscription in self._subscriptions.get(name, ()):
            subscription.put(state)

    async def _host(self, lasting: bool) -> None:
        """Be a candidate to host the feed; run it while hosting (see the module docstring)."""
        self._arrivals += 1
        me = _Candidate(lasting, self._arrivals)
        self._candidates.append(me)
        try:
            while self._hosting or self._next_host() is not me:
                await me.wake.wait()
                me.wake = anyio.Event()
            self._candidates.remove(me)
            self._hosting = True
            try:
                await self._run_feed()
            finally:
                self._hosting = False
        finally:
            if me in self._candidates:
                self._candidates.remove(me)
            if not self._hosting:
                best = self._next_host()
                if best is not None:
                    best.wake.set()

    def _next_host(self) -> _Candidate | None:
        """A holder's subscription before a waiter's; the oldest among equals."""
        return min(self._candidates, key=_Candidate.rank, default=None)

    async def _run_feed(self) -> None:
        while self._subscriptions:
            self.runs += 1
            try:
                await self.feed.run(self._watched, self.publish)
            except Exception as exc:  # the backend's feed: told to every subscriber, then rerun
                error = exc
                if isinstance(exc, ExceptionGroup):  # from the feed's task group
                    single = sole_error(exc)
                    if isinstance(single, Exception):
                        error = single
                logger.warning(
                    "the shared watch of %r failed: %s; running it again in %g s",
                    self.backend,
                    error,
                    RERUN_PAUSE,
                )
                failure = FeedFailure(error)
                for subs in list(self._subscriptions.values()):
                    for subscription in subs:
                        subscription.put(failure)
            else:
                logger.info("the shared watch of %r ended; running it again", self.backend)
            await anyio.sleep(RERUN_PAUSE)


class _Candidate:
    """A subscriber's task waiting to host the feed."""

    __slots__ = ("arrival", "lasting", "wake")

    def __init__(self, lasting: bool, arrival: int) -> None:
        self.lasting = lasting
        self.arrival = arrival
        self.wake = anyio.Event()

    def rank(self) -> tuple[bool, int]:
        return (not self.lasting, self.arrival)
