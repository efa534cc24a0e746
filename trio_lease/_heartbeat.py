"""The holder's side: one Holding per grant, its renew loop and its deadline watchdog.

A :class:`Holding` is the process-local state of one grant: the fencing token, the last record we
confirmed, and the deadline (D after the *send* time of the last confirmed write). It is shared by
every scope of the same owner holding the same lease (reentrancy), so the registry keys it by
(store, lease name, owner identity).

Each hosting scope (a ``held()`` block, or the task group hosting ``acquire()``) runs
:meth:`Holding.guard`, which returns only once the grant is lost. Inside, every guard runs the
deadline watchdog, and whichever guard holds the renew lock runs the renew loop; when that scope
exits, the next guard takes the lock over. So renewals continue as long as any scope holds.

Every ``held()`` body runs in a cancel scope registered in :attr:`Holding.body_scopes`, cancelled
at the grant's deadline (on the event loop's clock), which moves with each confirmed renewal:
after an event-loop stall past the deadline, the body is cancelled with the other expired timers
instead of running until the watchdog's turn (:mod:`._bodies`).

Unknown outcomes (timeouts, 5xx, resets, cancelled writes) never extend the deadline: the holder
counts them as "not renewed" and re-reads before its next write. If the re-read shows another
holder, another token, or no record, the grant is lost at once; if it still shows us, the cached
version is adopted and renewal goes on. The deadline moves only when a write is *confirmed*: the
record the backend returns must show our holder, our token, our lease duration and a new version
(``_algorithm.echo_problem``); any other answer is an unknown outcome, resolved by a re-read. A
re-read that returns an unreadable record confirms nothing and loses nothing: the holder keeps
trying, and its deadline ends the grant if the record stays unreadable.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Hashable
from datetime import datetime

import anyio

from . import _algorithm as algo
from ._abc import LeaseBackend, LeaseRecord
from ._bodies import BodyScopes
from ._exceptions import ConflictError
from ._loops import WriteBound, current
from ._observer import LeaseInfo, LeaseObserver, everywhere, notify
from ._per_loop import PerLoop
from ._settings import LeaseSettings
from ._shared_watch import FeedFailure, SharedWatch, shared_watch
from ._slots import Urgency, urgent

__all__ = ["Holding", "registry"]

logger = logging.getLogger("trio_lease")

#: Longest pause after a watch event that a read showed to be no loss, before the next read.
CONFIRM_PAUSE = 0.25

#: Live grants of this event loop, by (store key, lease name, owner identity).
registry: PerLoop[tuple[Hashable, str, str], Holding] = PerLoop("trio_lease.holdings", dict)


class Holding:
    """The state of one grant held by this process (shared by reentrant scopes)."""

    def __init__(
        self,
        *,
        key: tuple[Hashable, str, str],
        backend: LeaseBackend,
        settings: LeaseSettings,
        record: LeaseRecord,
        send_time: float,
        clock: Callable[[], float],
        wall_clock: Callable[[], datetime],
        info: LeaseInfo | None = None,
        observers: tuple[LeaseObserver, ...] = (),
    ) -> None:
        #: The registry key: (store key, lease name, holder identity).
        self.key: tuple[Hashable, str, str] = key
        #: The lease name.
        self.name: str = record.name
        #: The holder identity written in the record.
        self.identity: str = record.holder
        #: The grant's fencing token.
        self.token: int = record.fencing_token
        #: The record as last confirmed (by a write's answer or a read).
        self.record: LeaseRecord = record
        #: When this holder stops believing it holds the lease (on its clock), unless renewed.
        self.deadline: float = algo.holder_deadline(send_time, settings)
        #: When the last confirmed write was sent (on the holder's clock).
        self.last_send: float = send_time
        #: When the grant's write was sent (on the holder's clock).
        self.granted_at: float = send_time
        #: Which lease observers are told about, and the lease's own observers.
        self.info: LeaseInfo = info or LeaseInfo(record.name, record.holder, record.holder)
        self.observers: tuple[LeaseObserver, ...] = observers
        #: Why the grant was lost; None while it is not.
        self.lost_cause: str | None = None
        #: True once every scope holding the grant has left (released or not).
        self.ended: bool = False
        #: How many scopes hold the grant (``held()`` blocks and ``acquire()``, reentrancy).
        self.holds: int = 0
        #: How many renewals were confirmed.
        self.renewals: int = 0
        self._backend: LeaseBackend = backend
        self._settings: LeaseSettings = settings
        #: Whether the holder's clock is the event loop's (anyio's, the default).
        self._loop_clock: bool = clock is anyio.current_time
        self._clock: Callable[[], float] = loop_clock() if self._loop_clock else clock
        #: Sleeps until an instant of the loop's clock (the seam's: shared on trio).
        self._sleep_until: Callable[[float], Awaitable[None]] | None = (
            current().sleep_until if self._loop_clock else None
        )
        self._wall_clock: Callable[[], datetime] = wall_clock
        self._needs_read: bool = False
        self._last_error: str | None = None
        #: The watchdog's one cancel scope while it runs; a loss or the end cancels it.
        self._watch_scope: anyio.CancelScope | None = None
        self._renew_lock: anyio.Lock = anyio.Lock()
        #: Set when a contender asked for the lease (``Lease.request_handover()``): the holder
        #: should finish and release; the release then reserves the lease for the requester.
        self.handover_requested: anyio.Event = anyio.Event()
        #: Who asked for a handover ("" until someone does).
        self.handover_to: str = ""
        #: The cancel scopes of the bodies guarded by this grant (``held()`` blocks), cancelled
        #: once the deadline passes, also when the event loop stalled past it and the watchdog
        #: has not run (:mod:`._bodies`).
        self.body_scopes: BodyScopes = BodyScopes(
            self._loop_deadline_at, alarm=self._loop_clock
        )

    # -- state ---------------------------------------------------------------------------------

    def is_active(self) -> bool:
        """Neither lost nor ended (the deadline may still have passed)."""
        return self.lost_cause is None and not self.ended

    def is_valid(self) -> bool:
        """True while the grant is neither lost nor ended and its deadline has not passed."""
        return not self.ended and self.lost_cause is None and self._clock() < self.deadline

    def _loop_deadline_at(self, loop_now: float) -> float:
        """The deadline on the event loop's clock, which reads ``loop_now`` (the holder's clock
        may be an injected one)."""
        if self._loop_clock:
            return self.deadline
        return loop_now + (self.deadline - self._clock())

    def _deadline_on_loop(self) -> float:
        """The deadline on the event loop's clock (its time read only for an injected clock)."""
        return self.deadline if self._loop_clock else self._loop_deadline_at(anyio.current_time())

    def check_deadline(self, *, passed: bool = False) -> None:
        """Declare the grant lost if its deadline has passed (no I/O, no checkpoint).

        ``passed`` says a body's scope already expired at :meth:`loop_deadline`: with an
        injected clock slower than the loop's, that can come a little before this holder's own
        clock reaches the deadline, and a body cancelled by its deadline has lost the grant.
        """
        if self.is_active() and (passed or self._clock() >= self.deadline):
            detail = f" (last error: {self._last_error})" if self._last_error else ""
            self.mark_lost(f"no renewal was confirmed before the holder's deadline{detail}")

    def mark_lost(self, cause: str) -> None:
        if self.lost_cause is None and not self.ended:
            self.lost_cause = cause
            logger.warning("lease %r lost by %s: %s", self.name, self.identity, cause)
            self._notify()
            self.tell("lost", cause=cause)

    def tell(self, step: str, **details: object) -> None:
        """Tell the observers (:mod:`._observer`) about a step of this grant."""
        if self.observers or everywhere():
            notify(self.observers, step, self.info, fencing_token=self.token, **details)

    def end(self) -> None:
        """Stop the grant (all scopes left); watchdogs return without declaring a loss."""
        self.ended = True
        self._notify()
        if registry.get(self.key) is self:
            del registry[self.key]

    def _notify(self) -> None:
        """Wake the watchdog (lost or ended): it returns."""
        if self._watch_scope is not None:
            self._watch_scope.cancel()

    # -- the tasks -----------------------------------------------------------------------------

    async def guard(self) -> None:
        """Watch the deadline and renew (when holding the renew lock) until lost or ended."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._renew_when_turn)
            await self._watch_deadline()
            tg.cancel_scope.cancel()

    async def _watch_deadline(self) -> None:
        # One scope for the whole watch, which _notify cancels, and a plain sleep until the
        # deadline last read (it wakes again if a renewal moved it). A scope with a timer and
        # an event to wait on, made anew at each wake-up, were about a dozen objects per wake-up
        # that outlived the garbage collector's young generations: a quarter of those a
        # renewal moved to the oldest at 1,000 leases (tools/benchmarks/README.md, "Promoted
        # per renewal").
        # It wakes on the renewal grid while the deadline is further (algo.watch_instant: a
        # loop timer shared with the holders due then), and at the deadline itself.
        # No checkpoint when the deadline has already passed: the check runs and it returns.
        settings = self._settings
        with anyio.CancelScope() as self._watch_scope:  # noqa: ASYNC912  cancelled by _notify
            while self.lost_cause is None and not self.ended:
                now = self._clock()
                remaining = self.deadline - now
                if remaining <= 0:
                    self.check_deadline()
                    return
                if self._sleep_until is not None:  # the loop's clock is the holder's
                    await self._sleep_until(algo.watch_instant(self.deadline, now, settings))
                else:
                    await anyio.sleep(remaining)

    async def _renew_when_turn(self) -> None:
        async with self._renew_lock:
            hub = shared_watch(self._backend)
            if hub is None:
                with urgent():  # this task's requests go before acquisitions (trio_lease._slots)
                    await self._renew_loop()
                return
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._follow_watch, hub)
                with urgent():
                    await self._renew_loop()
                tg.cancel_scope.cancel()

    # -- loss seen on the watch (docs/design.md §4.2: learnt sooner, never a new loss) --

    def note_handover(self, record: LeaseRecord) -> None:
        """Set :attr:`handover_requested` if ``record`` (read or confirmed) carries a request."""
        asked = record.handover_to
        if asked and asked != self.identity and not self.handover_requested.is_set():
            self.handover_to = asked
            logger.info("lease %r: %s asks for a handover", self.name, asked)
            self.handover_requested.set()

    def _foreign(self, state: LeaseRecord | None) -> bool:
        """True for a state to confirm with a read: not this grant's, or asking a handover."""
        if not algo.still_ours(state, self.identity, self.token):
            return True
        assert state is not None
        return state.handover_to not in ("", self.identity) and not self.handover_requested.is_set()

    async def _follow_watch(self, hub: SharedWatch) -> None:
        """Confirm, with a read, each foreign state the shared watch shows; lose if it holds.

        The watch is a hint: it may lag, replay events from before this grant or drop some, and
        a hostile server may invent them. So a foreign state only triggers a linearizable read,
        and only that read's answer (another holder or token, or no record) ends the grant.
        A watch that fails or falls silent changes nothing: the deadline still rules.
        """
        pause = min(self._settings.heartbeat_interval / 10, CONFIRM_PAUSE)

        async def receive(state: LeaseRecord | FeedFailure | None) -> None:
            if isinstance(state, FeedFailure) or not self.is_active():
                return
            with urgent(self._deadline_on_loop()):
                confirmed = await self._confirm_loss()
            if not confirmed:
                await anyio.sleep(pause)  # a replayed or invented event: no read storm

        await hub.follow(self.name, receive, interesting=self._foreign, lasting=True)

    async def _confirm_loss(self) -> bool:
        """Read the record; mark the grant lost if it is no longer ours. True when lost."""
        bound = algo.request_bound(self._clock(), self.deadline, self._settings)
        if bound <= 0:
            return False
        try:
            with anyio.move_on_after(bound):
                current = await self._backend.get(self.name)
                if current is not None and (
                    not isinstance(current, LeaseRecord) or current.unreadable
                ):
                    return False  # unknown is not a loss (the deadline rules)
                cause = self._loss_cause(current)
                if cause is None and current is not None and self.is_active():
                    self.note_handover(current)  # confirmed by the read, not the watch
                if cause is not None and self.is_active():
                    self.mark_lost(f"{cause} (seen on the watch)")
                    return True
        except Exception as exc:  # a failed read is not evidence
            logger.debug("lease %r: confirming a watch event failed: %s", self.name, exc)
        return False

    def _loss_cause(self, current: LeaseRecord | None) -> str | None:
        """Why ``current`` (a readable record, or None) shows the grant lost; None if ours."""
        if algo.still_ours(current, self.identity, self.token):
            return None
        if current is None:
            return "the lease record was deleted"
        if current.holder in ("", self.identity):
            return (
                f"the record was rewritten with fencing token {current.fencing_token} "
                f"(ours was {self.token}) and holder {current.holder or '(none)'!r}"
            )
        return f"taken over by {current.holder!r}"

    async def _renew_loop(self) -> None:
        settings = self._settings
        next_at = algo.next_renewal(self.last_send, settings)
        started = self._clock()
        # This task's renewals go before acquisitions, the nearest deadline first among those
        # waiting for a slot: a lease whose last attempt failed overtakes those with time to
        # spare (trio_lease._slots). Marked once; the deadline is set before each attempt.
        urgency = Urgency()
        with urgent(urgency):
            await self._renew_loop_marked(urgency, next_at, started)

    async def _renew_loop_marked(self, urgency: Urgency, next_at: float, started: float) -> None:
        while self.is_active():
            # One cancel scope bounds this holder's writes until one outlives its bound: its
            # deadline is set only while a write is in flight (the seam's write bound). A scope
            # entered per write cost about 10 µs of a renewal's 70 on asyncio (memory backend;
            # tools/benchmarks/README.md, "Design measurements").
            with anyio.CancelScope() as scope:  # noqa: ASYNC912  a deadline only while a write awaits
                bounds = current().write_bound(scope)
                while self.is_active():
                    delay = next_at - self._clock()
                    if delay > 0:
                        if self._sleep_until is not None:
                            await self._sleep_until(next_at)
                        else:
                            await anyio.sleep(delay)
                    if not self.is_active():  # lost or ended while we slept
                        return
                    started = self._clock()
                    urgency.deadline = self._deadline_on_loop()
                    # One attempt, its write awaited here: a coroutine per attempt was one more
                    # object held by each renewal waiting for a slot, and the dozens waiting at
                    # a tick of the grid set off the garbage collector's young collections
                    # (tools/benchmarks/README.md).
                    renewed = False
                    if not self._needs_read or await self._resolve():
                        send = self._clock()
                        new = self._renewal(bounds, send)
                        if new is not None:
                            try:
                                stored = await self._backend.update(new, self.record.version)
                            except Exception as exc:  # a conflict, or an unknown outcome
                                self._failed(exc)
                            else:
                                renewed = self._renewed(stored, new, send)
                                del stored
                            finally:
                                bounds.clear()
                            # Not held while the loop sleeps: what outlives a collection of
                            # the young generation is moved on, for a full collection to walk.
                            del new
                    next_at = self._next_attempt(renewed, started)
            if scope.cancelled_caught:  # the write outlived its bound: an unknown outcome
                self._unknown(None)
                next_at = self._next_attempt(False, started)

    def _next_attempt(self, renewed: bool, started: float) -> float:
        """When to renew next, after an attempt started at ``started`` (observers told)."""
        if renewed:
            if self.observers or everywhere():
                now = self._clock()
                self.tell("renewed", latency=now - started, valid_for=self.deadline - now)
            return algo.next_renewal(self.last_send, self._settings)
        if self.is_active() and (self.observers or everywhere()):
            self.tell(
                "renewal_failed",
                cause=self._last_error or "no renewal was confirmed",
                time_left=max(0.0, self.deadline - self._clock()),
            )
        # Retry soon: D >= R + 2T leaves room for at least two attempts.
        return started + max(self._settings.lease_operation_timeout / 4, 0.001)

    def _renewal(self, bounds: WriteBound, send: float) -> LeaseRecord | None:
        """The record a renewal attempt sent at ``send`` (the loop's clock) writes, with the
        write's bound set on ``bounds``; None when no time is left for a write (the attempt
        fails).

        The write runs under the scope of ``bounds``, whose deadline is the request's bound
        while it is in flight; one that outlives it cancels the scope (the caller counts an
        unknown outcome). The caller clears the bound once the write ends.
        """
        bound = algo.request_bound(send, self.deadline, self._settings)
        if bound <= 0:
            return None
        new = algo.renewal(self.record, self._wall_clock())
        bounds.set((send if self._loop_clock else anyio.current_time()) + bound)
        return new

    def _failed(self, exc: Exception) -> None:
        """A renewal write raised ``exc``: a conflict calls for a read; anything else is an
        unknown outcome."""
        if isinstance(exc, ConflictError):
            # The record moved on. Our own write with a lost reply, an edit of unrelated fields,
            # or a takeover: only a fresh read tells.
            self._needs_read = True
            self._last_error = "conflict"
        else:  # any backend failure is an unknown outcome
            self._unknown(exc)

    def _renewed(self, stored: LeaseRecord, new: LeaseRecord, send: float) -> bool:
        """Take the answer to the renewal ``new`` sent at ``send``; True when it confirms the
        write and the deadline moved."""
        if self.lost_cause is not None or self.ended:
            return False
        problem = algo.echo_problem(stored, new, self.record.version)
        if problem:
            self._needs_read = True
            self._last_error = f"the answer to a renewal did not confirm it ({problem})"
            logger.info("lease %r renewal outcome unknown: %s", self.name, self._last_error)
            return False
        self.record = stored
        self.note_handover(stored)
        self.last_send = send
        self.deadline = max(self.deadline, algo.holder_deadline(send, self._settings))
        self.body_scopes.moved()
        self.renewals += 1
        self._last_error = None
        # No _notify(): the deadline only moves later, and the watchdog re-reads it when its
        # timer fires, so waking it on every renewal would only cost a task switch and a new
        # cancel scope per renewal (tools/benchmarks/README.md, "Design measurements").
        return True

    def _unknown(self, exc: Exception | None) -> None:
        self._needs_read = True
        self._last_error = "timed out" if exc is None else f"{type(exc).__name__}: {exc}"
        logger.info("lease %r renewal outcome unknown: %s", self.name, self._last_error)

    async def _resolve(self) -> bool:
        """Re-read after an unknown outcome or a conflict; False if still unresolved or lost."""
        bound = algo.request_bound(self._clock(), self.deadline, self._settings)
        if bound <= 0:
            return False
        try:
            with anyio.move_on_after(bound) as scope:
                current = await self._backend.get(self.name)
        except Exception as exc:  # the SPI boundary: any failure leaves the renewal unconfirmed
            self._last_error = f"{type(exc).__name__}: {exc}"
            return False
        if scope.cancelled_caught:
            self._last_error = "timed out"
            return False
        if current is not None and (
            not isinstance(current, LeaseRecord) or current.unreadable
        ):
            # Unknown is neither ours nor someone else's: no renewal until it reads again.
            what = getattr(current, "unreadable", "") or type(current).__name__
            self._last_error = f"the record is unreadable ({what})"
            return False
        cause = self._loss_cause(current)
        if cause is not None:
            self.mark_lost(cause)
            return False
        assert current is not None
        self.record = current
        self.note_handover(current)
        self._needs_read = False
        return True


def loop_clock() -> Callable[[], float]:
    """:func:`anyio.current_time` of the running event loop, bound once: a holder reads it
    several times per renewal, and anyio looks the event loop up on every call."""
    return current().clock()


def infinite_or(value: float | None) -> float:
    """``value``, or infinity for None (for optional timeouts)."""
    return math.inf if value is None else value
