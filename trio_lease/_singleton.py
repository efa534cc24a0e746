"""run_singleton: run one task cluster-wide, only while holding the lease (docs/design.md §7).

Akka's Cluster Singleton with a lease, in structured form. A :class:`Singleton` loops
forever: wait for the lease, run ``fn`` inside ``held()``; on loss ``fn`` is cancelled at once
(no graceful drain: another owner may already be taking over), and only after it has fully
exited does the runner wait ``retry_interval`` (jittered) and compete again. When ``fn``
returns, the lease is released and the runner competes again after ``retry_interval`` (or
stops, with ``stop_when_done=True``). An exception from ``fn`` propagates out of the runner
after the lease is released.

Leaving the runner's scope (its task is cancelled, for example on SIGTERM) is a *graceful
stop*: ``fn`` sees ``ctx.stopping`` set (Akka's stop message) and gets up to ``stop_grace``
seconds to finish, while renewals continue; then it is cancelled, then the lease is released.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from ._exceptions import LeaseLost
from ._grant import Grant
from ._lease import Lease
from ._outcome import Outcome
from ._settings import check_seconds

__all__ = [
    "Following",
    "Leading",
    "Singleton",
    "SingletonContext",
    "SingletonState",
    "Stopped",
    "Stopping",
    "run_singleton",
]

logger = logging.getLogger("trio_lease")


@dataclasses.dataclass(frozen=True, slots=True)
class Following:
    """Not leading; ``holder`` is the leader as last read (None when free or unknown)."""

    holder: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Leading:
    """Running ``fn`` under the grant with this fencing token."""

    fencing_token: int


@dataclasses.dataclass(frozen=True, slots=True)
class Stopping:
    """Leaving: ``fn`` was asked to stop and is being given its grace period."""

    fencing_token: int


@dataclasses.dataclass(frozen=True, slots=True)
class Stopped:
    """The runner has returned."""


SingletonState = Following | Leading | Stopping | Stopped


@dataclasses.dataclass(frozen=True, slots=True)
class SingletonContext:
    """What ``fn`` gets: its grant, and the event set when it should stop gracefully."""

    grant: Grant
    stopping: anyio.Event

    @property
    def fencing_token(self) -> int:
        return self.grant.fencing_token


SingletonFn = Callable[[SingletonContext], Awaitable[object]]


class Singleton:
    """Runs ``fn`` only while ``lease`` is held; see the module docstring.

    Start it in a task group (``await tg.start(singleton.run)`` returns at first acquisition),
    follow it with :meth:`states`, and wire :meth:`healthy` to a health check.
    """

    def __init__(
        self,
        lease: Lease,
        fn: SingletonFn,
        *,
        retry_interval: float = 5.0,
        stop_grace: float = 10.0,
        stop_when_done: bool = False,
    ) -> None:
        retry = check_seconds(retry_interval, "run_singleton(retry_interval=...)")
        grace = check_seconds(stop_grace, "run_singleton(stop_grace=...)")
        #: The lease held while ``fn`` runs.
        self.lease: Lease = lease
        #: The task run while the lease is held.
        self.fn: SingletonFn = fn
        #: Seconds (jittered) between the end of a run and the next competition for the lease.
        self.retry_interval: float = retry
        #: Seconds ``fn`` gets to finish after a graceful stop is asked, before it is cancelled.
        self.stop_grace: float = grace
        #: Stop the runner when ``fn`` returns instead of competing again.
        self.stop_when_done: bool = stop_when_done
        self._state: SingletonState = Following(None)
        self._subscribers: list[MemoryObjectSendStream[SingletonState]] = []
        self._grant: Grant | None = None
        self._ever_led: bool = False

    @property
    def state(self) -> SingletonState:
        return self._state

    def _set_state(self, state: SingletonState) -> None:
        if state == self._state:
            return
        self._state = state
        for subscriber in list(self._subscribers):
            try:
                subscriber.send_nowait(state)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.remove(subscriber)

    async def states(self) -> AsyncIterator[SingletonState]:  # noqa: ASYNC900  no scope, no await in finally
        """Yield the current state, then every change, until the runner stops."""
        send, receive = anyio.create_memory_object_stream[SingletonState](math.inf)
        self._subscribers.append(send)
        # Every yield stands outside any scope (no task, no timer, no `with`): the caller's
        # loop body runs under the caller's scopes only. The finally has no await, so a caller
        # that drops the iterator without closing it loses nothing: whenever the generator is
        # finalised, the subscription is removed the same way. (So no producer task is needed,
        # as a Changes stream has: the states come from this object, not from a backend.)
        try:
            state = self._state
            while True:
                yield state
                if isinstance(state, Stopped):
                    return
                state = await receive.receive()
        finally:
            if send in self._subscribers:
                self._subscribers.remove(send)
            send.close()
            receive.close()

    def healthy(self) -> bool:
        """False when the runner believes it leads but its deadline has passed.

        That happens when ``fn`` does not react to cancellation, or the event loop is blocked:
        another owner may already be running the singleton.
        """
        if isinstance(self._state, Leading | Stopping) and self._grant is not None:
            return not self._grant.lost
        return True

    async def run(self, *, task_status: TaskStatus[Grant] = anyio.TASK_STATUS_IGNORED) -> None:  # noqa: ASYNC128  _lead_once calls task_status.started()
        """Compete for the lease and run ``fn`` while holding it, forever (or until done)."""
        started = False
        try:
            while True:
                tracker = anyio.CancelScope()
                outcome = Outcome()  # fn's own error bare, also after the caller's deadline
                fn_returned = False
                with outcome.settled():
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._track_holder, tracker)
                        try:
                            with outcome.body():
                                fn_returned = await self._lead_once(tracker, task_status, started)
                        finally:
                            tracker.cancel()
                started = started or self._ever_led
                self._set_state(Following(self.lease.holder()))
                if fn_returned and self.stop_when_done:
                    return
                await anyio.sleep(self.retry_interval * random.uniform(0.8, 1.2))
        finally:
            self._set_state(Stopped())
            for subscriber in self._subscribers:
                subscriber.close()

    async def _lead_once(
        self, tracker: anyio.CancelScope, task_status: TaskStatus[Grant], started: bool
    ) -> bool:
        """Wait for the lease and run fn once; True if fn returned, False if the lease was lost."""
        try:
            async with self.lease.held() as grant:
                tracker.cancel()
                self._grant = grant
                self._ever_led = True
                self._set_state(Leading(grant.fencing_token))
                if not started:
                    task_status.started(grant)
                await self._run_fn(grant)
            return True
        except LeaseLost:
            return False  # fn has fully exited: held() returns only after the body did
        finally:
            self._grant = None

    async def _track_holder(self, scope: anyio.CancelScope) -> None:
        """While following, publish who leads (as last read by the lease; no extra I/O)."""
        with scope:
            while True:
                self._set_state(Following(self.lease.holder()))
                await anyio.sleep(self.lease.settings.wait_interval / 2)

    async def _run_fn(self, grant: Grant) -> None:
        """Run fn shielded from outer cancellation, so that leaving the runner is graceful."""
        stopping = anyio.Event()
        fn_scope = anyio.CancelScope(shield=True)
        finished = anyio.Event()
        outcome = Outcome()  # fn's own error bare, also when the runner's scope was cancelled

        async def run_fn() -> None:
            try:
                with fn_scope:
                    await self.fn(SingletonContext(grant, stopping))
            except BaseException as exc:  # noqa: ASYNC103  to the runner below, bare; cancel too
                outcome.given(exc)
            finally:
                finished.set()

        async def hand_over() -> None:
            # Another contender asked for the lease: stop fn gracefully; held() then releases,
            # reserving the lease for the requester.
            await grant.handover_requested.wait()
            if not finished.is_set():
                logger.info("lease %r: handing over to %s", self.lease.name, grant.handover_to)
                self._set_state(Stopping(grant.fencing_token))
                stopping.set()
                with anyio.move_on_after(self.stop_grace):
                    await finished.wait()
                fn_scope.cancel()

        with outcome.settled():
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_fn)
                tg.start_soon(hand_over)
                try:
                    await finished.wait()
                    tg.cancel_scope.cancel()
                except anyio.get_cancelled_exc_class():
                    with anyio.CancelScope(shield=True):
                        if not grant.lost:
                            # Leaving the runner's scope: ask fn to stop, give it stop_grace.
                            self._set_state(Stopping(grant.fencing_token))
                            stopping.set()
                            with anyio.move_on_after(self.stop_grace):
                                await finished.wait()
                        fn_scope.cancel()  # on loss at once, else after the grace period
                        await finished.wait()
                    raise


async def run_singleton(  # noqa: ASYNC128  Singleton.run calls task_status.started()
    lease: Lease,
    fn: SingletonFn,
    *,
    retry_interval: float = 5.0,
    stop_grace: float = 10.0,
    stop_when_done: bool = False,
    task_status: TaskStatus[Grant] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``fn(ctx)`` cluster-wide, only while holding ``lease``; see :class:`Singleton`."""
    singleton = Singleton(
        lease,
        fn,
        retry_interval=retry_interval,
        stop_grace=stop_grace,
        stop_when_done=stop_when_done,
    )
    await singleton.run(task_status=task_status)
