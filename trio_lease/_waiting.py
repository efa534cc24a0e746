"""A lease's waiting contender: attempt, wait, attempt again until granted (``held()``'s wait).

Between attempts it waits until the holder's record may have expired, or a poll interval
(jittered, so contenders spread out), or a change the backend's watch reports, whichever comes
first. The watch opens only once there is something to wait for. The watch is a hint: a wake-up
it caused whose read shows the record unchanged (a replayed, lagging or invented event) makes the
next wake-up by the watch wait a short pause first, so a watch cannot drive reads back to back.
A backend that keeps failing
(:class:`BackendUnavailable`) is retried with backoff and reported at WARNING once it has failed
for a while (then at most every :data:`WARN_EVERY` seconds), and its recovery likewise; errors
retrying cannot fix end the wait at once. :attr:`Waiter.failing_since` and
:attr:`Waiter.last_error` (``Lease.failing_since``, ``Lease.last_error``) let a program report
the wait itself (the CLI's waiting line).

:class:`Waiter` is the part of a :class:`~trio_lease.Lease` that waits: it attempts through the
lease's :class:`~._writing.GrantWriter`, and keeps the state of the wait (the warnings) itself.
"""

from __future__ import annotations

import logging
import random

import anyio
from anyio.abc import TaskGroup

from ._abc import LeaseRecord
from ._backoff import backoff_delay
from ._exceptions import AcquireTimeout, BackendError, BackendUnavailable
from ._heartbeat import CONFIRM_PAUSE, Holding, infinite_or
from ._observer import everywhere, notify
from ._reading import RecordReader
from ._shared_watch import FeedFailure
from ._state import LeaseState
from ._writing import GrantWriter

__all__ = ["EXPIRY_JITTER", "WAITING_LOG", "WARN_AFTER", "WARN_EVERY", "Waiter", "may_end_the_wait"]

logger = logging.getLogger("trio_lease")

#: Most a contender waits past the holder's expiry on top of the expiry itself (seconds): enough
#: to spread contenders that observed the same record, small next to any heartbeat timeout.
EXPIRY_JITTER = 0.01
#: The pause after an attempt the backend failed (seconds): it doubles per failure in a row, up
#: to the wait interval.
FAILED_ATTEMPT_PAUSE = 0.2
#: Set (as an attribute of the log record) on the warnings a waiting contender logs about its
#: backend, so a program that reports the wait itself (the CLI's waiting line) can drop them.
WAITING_LOG = "trio_lease_waiting"
#: A waiting contender whose backend keeps failing says so at WARNING once it has failed for
#: this long (or twice in a row), then at most every WARN_EVERY seconds while it goes on.
WARN_AFTER = 1.0
WARN_EVERY = 30.0


class Waiter:
    """Waits until an attempt of a lease is granted; keeps the state of the wait."""

    __slots__ = (
        "_failing_since",
        "_last_error",
        "_reader",
        "_state",
        "_warned_at",
        "_warned_unreadable",
        "_writer",
    )

    def __init__(self, state: LeaseState, reader: RecordReader, writer: GrantWriter) -> None:
        self._state = state
        self._reader = reader
        self._writer = writer
        # The waiting state, reset by each wait.
        self._failing_since: float | None = None
        self._last_error: BackendError | None = None
        self._warned_at: float | None = None
        self._warned_unreadable: str | None = None

    @property
    def failing_since(self) -> float | None:
        """While waiting: when (on the lease's clock) the backend started failing, else None."""
        return self._failing_since

    @property
    def last_error(self) -> BackendError | None:
        """While waiting and the backend fails: the error of the last attempt, else None."""
        return self._last_error if self._failing_since is not None else None

    async def acquire(self, wait_for: float | None) -> Holding:
        """Attempt until granted (the new hold) or ``wait_for`` s pass (:class:`AcquireTimeout`)."""
        box: list[Holding] = []
        try:
            await self._wait_for_grant(wait_for, box)
        except BaseException:
            # Cancelled after the grant was written but before the caller got it: release it
            # before the cancellation propagates (shielded and bounded inside _drop_hold).
            if box:
                await self._writer.drop_hold(box[0], raise_unknown=False)  # noqa: ASYNC102  drop_hold shields and bounds the release
            raise
        if not box:
            last = self.last_error
            detail = f"holder: {self._reader.holder() or 'none'}"
            record = self._state.last_record
            if record is not None and record.unreadable:
                detail += f"; the record is unreadable: {record.unreadable}"
            if last is not None and self._failing_since is not None:
                failing = self._state.clock() - self._failing_since
                detail += f"; the backend has been failing for {failing:.1f} s, last error: {last}"
            raise AcquireTimeout(
                f"lease {self._state.name!r} was not acquired within {wait_for:g} s ({detail})",
                last_error=last,
            )
        return box[0]

    async def _wait_for_grant(self, wait_for: float | None, box: list[Holding]) -> None:
        self._failing_since = None
        self._last_error = None
        self._warned_at = None
        self._state.wait_started = self._state.clock()
        error: list[Exception] = []
        try:
            with anyio.move_on_after(infinite_or(wait_for)):  # noqa: ASYNC912  a deadline; the awaits in it checkpoint
                async with anyio.create_task_group() as tg:
                    try:
                        await self._wait_loop(tg, box)
                    except Exception as exc:  # raised bare below, never in an ExceptionGroup
                        error.append(exc)
                    tg.cancel_scope.cancel()
        finally:
            self._state.wait_started = None
        if error:
            raise error[0]

    async def _wait_loop(self, tg: TaskGroup, box: list[Holding]) -> None:
        """Attempt, then wait (watch or jittered poll), until granted; errors retrying cannot
        fix (anything but :class:`BackendUnavailable`) propagate."""
        wakeup = _Wakeup()
        watching = False
        failures = 0
        woken = False  # the last wait was ended by the watch
        read_version: str | None = None  # the version the last attempt read
        # After a wake-up by the watch that the read did not bear out, the next one waits this
        # long first (as a holder pauses after a watch event its read showed to be no loss).
        pause = min(self._state.settings.wait_interval / 10, CONFIRM_PAUSE)
        while True:
            until_expiry = False
            expires_in: float | None = None
            started = self._state.clock()
            try:
                attempt = await self._writer.attempt()
            except BackendUnavailable as exc:
                failures += 1
                self._note_failure(exc, started, failures)
                wait_interval = self._state.settings.wait_interval
                delay = backoff_delay(failures, FAILED_ATTEMPT_PAUSE, wait_interval)
                unfounded = woken
            else:
                failures = 0
                self._note_recovery()
                if isinstance(attempt, Holding):
                    box.append(attempt)
                    return
                expires_in = attempt.expires_in
                read = self._state.last_record  # what this attempt read (._reading._read)
                before, read_version = read_version, None if read is None else read.version
                unfounded = woken and read_version == before
                if self._state.observers or everywhere():
                    notify(
                        self._state.observers,
                        "waiting",
                        self._state.info,
                        holder=attempt.holder,
                        expires_in=expires_in,
                    )
                delay = min(expires_in, self._state.settings.wait_interval)
                until_expiry = expires_in <= self._state.settings.wait_interval
                if attempt.unreadable:
                    self._warn_unreadable(attempt.unreadable)
            if self._state.backend.supports_watch and not watching:
                # Watch only once there is something to wait for: an acquisition that
                # succeeds at once opens no stream (on Kubernetes a watch holds one
                # pooled connection, so 100 concurrent acquisitions starved the pool).
                watching = True
                tg.start_soon(self._wake_on_changes, wakeup)
            # Jitter spreads contenders out; waiting past expiry is safe, before is not.
            # The wait that ends at the holder's expiry gets at most EXPIRY_JITTER of it,
            # so a crash failover lands close to L (the full jitter there put it up to 20 % of
            # the poll period late: tools/benchmarks/README.md, "Design measurements").
            jitter = delay * random.uniform(0.0, 0.2)
            if until_expiry:
                jitter = min(jitter, EXPIRY_JITTER)
            elif expires_in is not None:
                # A polling wait must not overshoot the expiry either: it would
                # delay a crash failover by up to 20 % of the poll period.
                jitter = min(jitter, max(expires_in - delay, 0.0) + EXPIRY_JITTER)
            woken = await wakeup.wait(delay + jitter + 1e-3, quiet=pause if unfounded else 0.0)

    def _note_failure(self, exc: BackendUnavailable, started: float, failures: int) -> None:
        """Remember a failed attempt; say so at WARNING once it lasts (then every WARN_EVERY)."""
        now = self._state.clock()
        if self._failing_since is None:
            self._failing_since = started
        self._last_error = exc
        failing = now - self._failing_since
        due = self._warned_at is None or now - self._warned_at >= WARN_EVERY
        if due and (failing >= WARN_AFTER or failures >= 2):
            self._warned_at = now
            logger.warning(
                "lease %r: cannot use the backend (failing for %.1f s): %s; still trying",
                self._state.name,
                failing,
                exc,
                extra={WAITING_LOG: True},
            )
        else:
            logger.info("lease %r: acquire failed (%s); retrying", self._state.name, exc)

    def _note_recovery(self) -> None:
        if self._failing_since is not None and self._warned_at is not None:
            logger.warning(
                "lease %r: the backend answers again after %.1f s",
                self._state.name,
                self._state.clock() - self._failing_since,
            )
        self._failing_since = None
        self._last_error = None
        self._warned_at = None

    def _warn_unreadable(self, problem: str) -> None:
        record = self._state.last_record
        version = record.version if record is not None else None
        if self._warned_unreadable != version:
            self._warned_unreadable = version
            logger.warning(
                "lease %r: the stored record is unreadable (%s); it counts as held by an unknown "
                "holder%s",
                self._state.name,
                problem,
                " and is never taken over (its fencing token is unreadable): fix or delete it"
                if record is not None and record.fencing_token < 0
                else " until it has stood unchanged for the heartbeat timeout",
            )

    async def _wake_on_changes(self, wakeup: _Wakeup) -> None:
        """Wake the waiting contender on every record change the shared watch reports."""
        # The subscription reads the record once subscribed: if that already differs from
        # what our last attempt read (released in between), wake at once, not a poll later.
        # A renewal by the same holder only restarts the countdown (the reader observes it):
        # waking for it would cost a read per renewal per waiter, and the wait ends no sooner.
        known = [self._state.last_record]

        async def receive(state: LeaseRecord | FeedFailure | None) -> None:  # noqa: ASYNC124  the shared watch's Receive is async
            if isinstance(state, FeedFailure):
                # Not transient (credentials, TLS, a missing CRD): the next attempt meets the
                # error too and ends the wait with it.
                wakeup.set()
                return
            if may_end_the_wait(known[0], state):
                wakeup.set()
            known[0] = state

        await self._reader.follow(receive)


def may_end_the_wait(before: LeaseRecord | None, after: LeaseRecord | None) -> bool:
    """Whether a change from ``before`` to ``after`` can let a waiting contender in now.

    Not a renewal: the same readable holder with the same token and handover request, at a
    new version (its countdown restarts, which only the observation needs to know).
    """
    if before is None or after is None:
        return before is not after
    if before.version == after.version:
        return False
    return (
        after.is_free
        or bool(after.unreadable or before.unreadable)
        or after.holder != before.holder
        or after.fencing_token != before.fencing_token
        or after.handover_to != before.handover_to
    )


class _Wakeup:
    """Wakes a waiting contender early (a watch event), else after a timeout."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, budget: float, *, quiet: float = 0.0) -> bool:
        """Wait up to ``budget`` seconds; True if a watch event ended the wait.

        ``quiet``: seconds at the start during which an event does not end the wait (it is
        kept, and ends it right after).
        """
        if quiet > 0:
            await anyio.sleep(min(quiet, budget))
        with anyio.move_on_after(budget - quiet):
            await self._event.wait()
        woken = self._event.is_set()
        self._event = anyio.Event()
        return woken
