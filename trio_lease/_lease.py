"""Lease and Grant: holding a lease as a scope, and the Akka-style API.

``held()`` acquires (waiting by watch or jittered polling), runs the heartbeat in a task group
next to the body, cancels the body if the lease is lost and raises a bare :class:`LeaseLost`,
keeps renewing while the body's own cleanup runs after an outer cancellation, and releases only
after the body has exited (shielded, bounded by T). See DESIGN §4 and §5.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import NoReturn, TypeVar

import anyio
from anyio.abc import TaskGroup

from . import _algorithm as algo
from ._abc import LeaseBackend, LeaseRecord
from ._exceptions import (
    AcquireTimeout,
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    LeaseBusy,
    LeaseConfigError,
    LeaseError,
    LeaseLost,
)
from ._heartbeat import Holding, infinite_or, registry
from ._settings import LeaseSettings
from ._slots import urgent

__all__ = ["Grant", "Lease", "incarnation"]

logger = logging.getLogger("trio_lease")

#: Most a contender waits past the holder's expiry on top of the expiry itself (seconds): enough
#: to spread contenders that observed the same record, small next to any heartbeat timeout.
EXPIRY_JITTER = 0.01
#: Conflicting writes one acquire attempt takes (pausing between them) before it gives up with
#: BackendUnavailable: a real race ends after one conflict (the next read shows the winner), so
#: more in a row means a store that answers "conflict" to every write while reads show the lease
#: takeable; the waiting loop then backs off like for any unavailable backend.
MAX_CONFLICTS = 4
#: First pause after a conflicting write (seconds); doubled on each further conflict, jittered.
CONFLICT_PAUSE = 0.005
#: Set (as an attribute of the log record) on the warnings a waiting contender logs about its
#: backend, so a program that reports the wait itself (the CLI's waiting line) can drop them.
WAITING_LOG = "trio_lease_waiting"
#: A waiting contender whose backend keeps failing says so at WARNING once it has failed for
#: this long (or twice in a row), then at most every WARN_EVERY seconds while it goes on.
WARN_AFTER = 1.0
WARN_EVERY = 30.0

_incarnation = uuid.uuid4().hex[:12]


def _new_incarnation() -> None:
    global _incarnation
    _incarnation = uuid.uuid4().hex[:12]


# A forked child is a new process: it must not inherit the parent's identity (DESIGN §4.7).
os.register_at_fork(after_in_child=_new_incarnation)


def incarnation() -> str:
    """This process's incarnation id, appended to owner names to form identities."""
    return _incarnation


LostCallback = Callable[[BaseException | None], object]
T = TypeVar("T")


class Grant:
    """A grant of a lease to this owner, as yielded by ``held()``.

    ``fencing_token`` strictly increases with every new grant of the lease; pass it to the
    resources you write so they can reject writes from a stale holder. ``deadline`` (on the
    lease's monotonic clock) moves forward with each confirmed renewal.
    """

    __slots__ = ("_clock", "_holding", "lease_name", "owner")

    def __init__(self, holding: Holding, owner: str, clock: Callable[[], float]) -> None:
        self._holding = holding
        self._clock = clock
        self.lease_name = holding.name
        self.owner = owner

    @property
    def fencing_token(self) -> int:
        return self._holding.token

    @property
    def identity(self) -> str:
        """The holder identity written in the record (owner plus incarnation id)."""
        return self._holding.identity

    @property
    def deadline(self) -> float:
        """When this holder stops believing it holds the lease, unless renewed (monotonic)."""
        return self._holding.deadline

    @property
    def lost(self) -> bool:
        """True once this grant was lost (taken over, deleted, or its deadline passed)."""
        return self._holding.lost_cause is not None or (
            not self._holding.ended and self._clock() >= self._holding.deadline
        )

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless this grant is still held (no I/O, no checkpoint).

        Call it right before an irreversible side effect that takes no fencing token. The body
        is cancelled on loss at its next checkpoint, but a body woken by I/O (or, on asyncio, by
        a timer) after the event loop stalled past the deadline runs until that checkpoint; this
        check closes that window. It does not close a pause between the check and the effect:
        only the fencing token does (docs/guarantees.md).
        """
        holding = self._holding
        holding.check_deadline()
        if holding.lost_cause is not None:
            raise LeaseLost(self.lease_name, holding.lost_cause)
        if holding.ended:
            raise LeaseLost(self.lease_name, "the grant was released")

    def remaining(self) -> float:
        """Seconds left before the deadline (0 once it has passed or the grant was lost)."""
        if not self._holding.is_valid():
            return 0.0
        return max(0.0, self._holding.deadline - self._clock())

    def __repr__(self) -> str:
        return (
            f"Grant(lease_name={self.lease_name!r}, owner={self.owner!r}, "
            f"fencing_token={self.fencing_token})"
        )


class _Wakeup:
    """Wakes a waiting contender early (a watch event), else after a timeout."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            await self._event.wait()
        self._event = anyio.Event()


class Lease:
    """A named distributed lease, held by ``owner`` through ``backend``.

    The identity written to the record is ``owner`` plus a per-process incarnation id, so a
    restarted process never silently inherits a live lease. Leases are reentrant per identity:
    in one process, every :class:`Lease` of the same store, name and owner shares one grant.

    ``clock`` (monotonic seconds, default ``anyio.current_time``) and ``wall_clock`` (UTC
    datetimes, written to records for humans only) can be injected for tests.
    """

    def __init__(
        self,
        name: str,
        owner: str,
        backend: LeaseBackend,
        settings: LeaseSettings | None = None,
        *,
        clock: Callable[[], float] | None = None,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise LeaseConfigError(f"a lease name must be a non-empty string, got {name!r}")
        if not isinstance(owner, str) or not owner:
            raise LeaseConfigError(f"an owner must be a non-empty string, got {owner!r}")
        if not isinstance(backend, LeaseBackend):
            raise LeaseConfigError(
                f"backend must be a trio_lease.abc.LeaseBackend, got {type(backend).__name__}"
            )
        self.name = name
        self.owner = owner
        self.backend = backend
        self.settings = settings if settings is not None else LeaseSettings()
        backend.validate_settings(self.settings)
        self.identity = f"{owner}_{incarnation()}"
        self._clock = clock if clock is not None else anyio.current_time
        self._wall_clock = wall_clock if wall_clock is not None else _utc_now
        self._observation: algo.Observation | None = None
        self._last_record: LeaseRecord | None = None
        #: The highest fencing token seen on this lease (read or granted): new grants go above.
        self._token_floor = 0
        self._host: TaskGroup | None = None
        self._host_stack: AsyncExitStack | None = None
        self._akka: _AkkaHold | None = None
        self._failing_since: float | None = None
        self._last_error: BackendError | None = None
        self._warned_at: float | None = None
        self._warned_unreadable: str | None = None

    def __repr__(self) -> str:
        return f"Lease(name={self.name!r}, owner={self.owner!r}, backend={self.backend!r})"

    @property
    def _key(self) -> tuple[Hashable, str, str]:
        return (self.backend.store_key, self.name, self.identity)

    def _live_holding(self) -> Holding | None:
        holding = registry.get(self._key)
        if holding is not None and holding.is_valid():
            return holding
        return None

    # -- reading -------------------------------------------------------------------------------

    def _observe(self, record: LeaseRecord | None) -> None:
        self._observation = algo.observe(self._observation, record, self._clock())
        self._last_record = record
        if record is not None and not record.unreadable:
            self._token_floor = max(self._token_floor, record.fencing_token)

    async def _read(self) -> LeaseRecord | None:
        try:
            with anyio.move_on_after(self.settings.lease_operation_timeout) as scope:
                record = await self.backend.get(self.name)
        except LeaseError:
            raise
        except Exception as exc:
            raise _untyped(exc, self.backend, f"reading lease {self.name!r}") from exc
        if scope.cancelled_caught:
            raise BackendUnavailable(
                f"reading lease {self.name!r} took longer than the lease operation timeout "
                f"({self.settings.lease_operation_timeout:g} s)"
            )
        if record is not None and not isinstance(record, LeaseRecord):
            raise BackendProtocolError(
                f"{self.backend!r} returned {type(record).__name__} for lease {self.name!r}, "
                "not a LeaseRecord or None"
            )
        self._observe(record)
        return record

    def holder(self) -> str | None:
        """The holder identity as last read (None when free or never read).

        A record that could not be read is held by an unknown holder: this returns
        ``"(unknown: the record is unreadable)"``, never None.
        """
        record = self._last_record
        if record is None or record.is_free:
            return None
        if record.unreadable:
            return algo.UNKNOWN_HOLDER
        return record.holder

    @property
    def failing_since(self) -> float | None:
        """While waiting: when (on the lease's clock) the backend started failing, else None."""
        return self._failing_since

    @property
    def last_error(self) -> BackendError | None:
        """While waiting and the backend fails: the error of the last attempt, else None."""
        return self._last_error if self._failing_since is not None else None

    async def watch_holder(self) -> AsyncIterator[str | None]:
        """Yield the holder identity (None when free) now and whenever it changes.

        Uses the backend's watch when it has one, else polls every ``wait_interval``. A dead
        holder's record does not change, so this reports what the record says, not expiry.
        """
        last: object = object()
        if self.backend.supports_watch:
            async with _closing(self._watch_records()) as stream:
                async for record in stream:
                    self._observe(record)
                    if self.holder() != last:
                        last = self.holder()
                        yield self.holder()
        else:
            while True:
                try:
                    await self._read()
                except BackendUnavailable as exc:
                    logger.info("lease %r: reading the holder failed: %s", self.name, exc)
                else:
                    if self.holder() != last:
                        last = self.holder()
                        yield self.holder()
                await anyio.sleep(self.settings.wait_interval)

    # -- acquiring -----------------------------------------------------------------------------

    async def _attempt(self) -> Holding | algo.Busy:
        """One acquire attempt (re-reading on conflicts). Adds a hold on success.

        A conflicting write is followed by a short jittered pause (doubling each time) and a
        fresh read; after :data:`MAX_CONFLICTS` in a row it raises :class:`BackendUnavailable`.
        """
        conflicts = 0
        while True:
            holding = self._live_holding()
            if holding is not None:  # reentrant: share the live grant
                holding.holds += 1
                return holding
            record = await self._read()
            decision = algo.decide_acquire(
                record,
                name=self.name,
                identity=self.identity,
                observation=self._observation,
                now=self._clock(),
                settings=self.settings,
                wall_now=self._wall_clock(),
                token_floor=self._token_floor,
            )
            if isinstance(decision, algo.Busy):
                return decision
            holding = await self._write_grant(decision)
            if holding is not None:
                self._token_floor = max(self._token_floor, holding.token)
                holding.holds += 1
                return holding
            conflicts += 1
            if conflicts >= MAX_CONFLICTS:
                raise BackendUnavailable(
                    f"lease {self.name!r}: {conflicts} writes in a row conflicted although each "
                    "read before them showed the lease could be taken; the store may be "
                    "misbehaving"
                )
            await anyio.sleep(CONFLICT_PAUSE * 2 ** (conflicts - 1) * random.uniform(0.5, 1.5))

    async def _write_grant(self, decision: algo.Write) -> Holding | None:
        """Write a new grant; None if we lost the race. Cleans up if the outcome is unknown."""
        send = self._clock()
        try:
            with anyio.move_on_after(self.settings.lease_operation_timeout) as scope:
                if decision.expected_version is None:
                    stored = await self.backend.create(decision.record)
                else:
                    stored = await self.backend.update(decision.record, decision.expected_version)
            if scope.cancelled_caught:
                raise BackendUnavailable(
                    f"writing lease {self.name!r} took longer than the lease operation timeout"
                )
        except ConflictError:
            return None
        except BaseException as exc:
            # Unknown outcome (error, timeout, or our caller was cancelled): the write may have
            # landed. Learn the truth; adopt it, or, if we are being cancelled, release it.
            cancelled = not isinstance(exc, Exception)
            current = await self._resolve_unknown_grant(decision.record, release=cancelled)
            if current is None or cancelled:
                if isinstance(exc, Exception) and not isinstance(exc, LeaseError):
                    raise _untyped(exc, self.backend, f"writing lease {self.name!r}") from exc
                raise
            stored = current
        else:
            problem = algo.echo_problem(stored, decision.record, decision.expected_version)
            if problem:
                # The answer does not show our write: an unknown outcome, like a lost reply.
                current = await self._resolve_unknown_grant(decision.record, release=False)
                if current is None:
                    raise BackendProtocolError(
                        f"writing lease {self.name!r}: {problem}, and a fresh read does not show "
                        "our grant; the outcome is unknown"
                    )
                stored = current
        self._observe(stored)
        holding = Holding(
            key=self._key,
            backend=self.backend,
            settings=self.settings,
            record=stored,
            send_time=send,
            clock=self._clock,
            wall_clock=self._wall_clock,
        )
        registry[self._key] = holding
        return holding

    async def _resolve_unknown_grant(
        self, intended: LeaseRecord, *, release: bool
    ) -> LeaseRecord | None:
        """After a grant write with unknown outcome: the stored record if it landed, else None.

        With ``release``, a landed grant is released at once (cancellation-safe acquire).
        Shielded and bounded by T.
        """
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(self.settings.lease_operation_timeout),
        ):
            try:
                current = await self.backend.get(self.name)
                if not algo.still_ours(current, self.identity, intended.fencing_token):
                    return None
                assert current is not None
                if release:
                    await self.backend.update(
                        algo.release_record(current, self._wall_clock()), current.version
                    )
                return current
            except Exception as exc:
                logger.warning(
                    "lease %r: could not resolve an acquire whose outcome is unknown (%s); "
                    "if it landed, the lease expires after the heartbeat timeout",
                    self.name,
                    exc,
                )
        return None

    async def _acquire_waiting(self, timeout: float | None) -> Holding:
        box: list[Holding] = []
        try:
            await self._wait_for_grant(timeout, box)
        except BaseException:
            # Cancelled after the grant was written but before the caller got it: release it
            # before the cancellation propagates (shielded and bounded inside _drop_hold).
            if box:
                await self._drop_hold(box[0], raise_unknown=False)
            raise
        if not box:
            last = self.last_error
            detail = f"holder: {self.holder() or 'none'}"
            record = self._last_record
            if record is not None and record.unreadable:
                detail += f"; the record is unreadable: {record.unreadable}"
            if last is not None and self._failing_since is not None:
                failing = self._clock() - self._failing_since
                detail += f"; the backend has been failing for {failing:.1f} s, last error: {last}"
            raise AcquireTimeout(
                f"lease {self.name!r} was not acquired within {timeout:g} s ({detail})",
                last_error=last,
            )
        return box[0]

    async def _wait_for_grant(self, timeout: float | None, box: list[Holding]) -> None:
        self._failing_since = None
        self._last_error = None
        self._warned_at = None
        error: list[Exception] = []
        with anyio.move_on_after(infinite_or(timeout)):
            async with anyio.create_task_group() as tg:
                try:
                    await self._wait_loop(tg, box)
                except Exception as exc:  # raised bare below, never in an ExceptionGroup
                    error.append(exc)
                tg.cancel_scope.cancel()
        if error:
            raise error[0]

    async def _wait_loop(self, tg: TaskGroup, box: list[Holding]) -> None:
        """Attempt, then wait (watch or jittered poll), until granted; errors retrying cannot
        fix (anything but :class:`BackendUnavailable`) propagate."""
        wakeup = _Wakeup()
        watching = False
        failures = 0
        while True:
            until_expiry = False
            expires_in: float | None = None
            started = self._clock()
            try:
                attempt = await self._attempt()
            except BackendUnavailable as exc:
                failures += 1
                self._note_failure(exc, started, failures)
                delay = min(self.settings.wait_interval, 0.1 * 2**failures)
            else:
                failures = 0
                self._note_recovery()
                if isinstance(attempt, Holding):
                    box.append(attempt)
                    return
                expires_in = attempt.expires_in
                delay = min(expires_in, self.settings.wait_interval)
                until_expiry = expires_in <= self.settings.wait_interval
                if attempt.unreadable:
                    self._warn_unreadable(attempt.unreadable)
            if self.backend.supports_watch and not watching:
                # Watch only once there is something to wait for: an acquisition that
                # succeeds at once opens no stream (on Kubernetes a watch holds one
                # pooled connection, so 100 concurrent acquisitions starved the pool).
                watching = True
                tg.start_soon(self._wake_on_changes, wakeup)
            # Jitter spreads contenders out; waiting past expiry is safe, before is not.
            # The wait that ends at the holder's expiry gets at most EXPIRY_JITTER of it,
            # so a crash failover lands close to L (up to 20 % of the poll period late
            # before: p99 +0.46 s at R = 1.5 s, benchmarks/README.md).
            jitter = delay * random.uniform(0.0, 0.2)
            if until_expiry:
                jitter = min(jitter, EXPIRY_JITTER)
            elif expires_in is not None:
                # A polling wait must not overshoot the expiry either: it would
                # delay a crash failover by up to 20 % of the poll period.
                jitter = min(jitter, max(expires_in - delay, 0.0) + EXPIRY_JITTER)
            await wakeup.wait(delay + jitter + 1e-3)

    def _note_failure(self, exc: BackendUnavailable, started: float, failures: int) -> None:
        """Remember a failed attempt; say so at WARNING once it lasts (then every WARN_EVERY)."""
        now = self._clock()
        if self._failing_since is None:
            self._failing_since = started
        self._last_error = exc
        failing = now - self._failing_since
        due = self._warned_at is None or now - self._warned_at >= WARN_EVERY
        if due and (failing >= WARN_AFTER or failures >= 2):
            self._warned_at = now
            logger.warning(
                "lease %r: cannot use the backend (failing for %.1f s): %s; still trying",
                self.name,
                failing,
                exc,
                extra={WAITING_LOG: True},
            )
        else:
            logger.info("lease %r: acquire failed (%s); retrying", self.name, exc)

    def _note_recovery(self) -> None:
        if self._failing_since is not None and self._warned_at is not None:
            logger.warning(
                "lease %r: the backend answers again after %.1f s",
                self.name,
                self._clock() - self._failing_since,
            )
        self._failing_since = None
        self._last_error = None
        self._warned_at = None

    def _warn_unreadable(self, problem: str) -> None:
        record = self._last_record
        version = record.version if record is not None else None
        if self._warned_unreadable != version:
            self._warned_unreadable = version
            logger.warning(
                "lease %r: the stored record is unreadable (%s); it counts as held by an unknown "
                "holder%s",
                self.name,
                problem,
                " and is never taken over (its fencing token is unreadable): fix or delete it"
                if record is not None and record.fencing_token < 0
                else " until it has stood unchanged for the heartbeat timeout",
            )

    async def _watch_records(self) -> AsyncIterator[LeaseRecord | None]:
        """The backend's watch, each item checked, anything untyped it raises made typed."""
        async with _closing(self.backend.watch(self.name)) as stream:
            while True:
                try:
                    record = await stream.__anext__()
                except StopAsyncIteration:
                    return
                except LeaseError:
                    raise
                except Exception as exc:
                    raise _untyped(exc, self.backend, f"watching lease {self.name!r}") from exc
                if record is not None and not isinstance(record, LeaseRecord):
                    raise BackendProtocolError(
                        f"watching lease {self.name!r}: {self.backend!r} yielded "
                        f"{type(record).__name__}, not a LeaseRecord or None"
                    )
                yield record

    async def _wake_on_changes(self, wakeup: _Wakeup) -> None:
        """Wake the waiting contender on every record change the backend reports."""
        while True:
            try:
                # The watch starts after our last read: if its first state already differs from
                # what we read (released in between), wake at once instead of a poll later.
                known = self._last_record.version if self._last_record is not None else None
                async with _closing(self._watch_records()) as stream:
                    async for record in stream:
                        self._observe(record)
                        version = record.version if record is not None else None
                        if version != known:
                            wakeup.set()
                        known = version
            except BackendUnavailable as exc:
                logger.info("lease %r: watch failed (%s); polling meanwhile", self.name, exc)
            except Exception as exc:
                # Not transient (credentials, TLS, a missing CRD): wake the waiting loop, whose
                # next attempt meets the error too and ends the wait with it.
                logger.info("lease %r: watch failed (%s)", self.name, exc)
                wakeup.set()
            await anyio.sleep(self.settings.wait_interval)

    # -- holding as a scope ---------------------------------------------------------------------

    @asynccontextmanager
    async def held(self, *, timeout: float | None = None) -> AsyncIterator[Grant]:
        """Wait until this owner holds the lease, run the body, then release.

        Raises :class:`AcquireTimeout` if ``timeout`` seconds pass first. If the lease is lost
        while the body runs, the body is cancelled and a bare :class:`LeaseLost` is raised here
        (also when the body finished without reaching a checkpoint after the loss: its work may
        have overlapped another holder's). An outer cancellation passes through unchanged, and
        renewals continue while the body's own cleanup runs.
        """
        holding = await self._acquire_waiting(timeout)
        async with self._hold(holding) as grant:
            yield grant

    @asynccontextmanager
    async def try_held(self) -> AsyncIterator[Grant]:
        """Like :meth:`held`, but raise :class:`LeaseBusy` at once if another owner holds it."""
        attempt = await self._attempt()
        if isinstance(attempt, algo.Busy):
            raise LeaseBusy(self.name, attempt.holder, attempt.expires_in)
        async with self._hold(attempt) as grant:
            yield grant

    @asynccontextmanager
    async def _hold(self, holding: Holding) -> AsyncIterator[Grant]:
        # The body's scope carries the grant's deadline (pushed forward by each confirmed
        # renewal), so when the event loop resumes after stalling past it, the body is cancelled
        # together with the timers that expired in the stall, not one step later by the watchdog.
        body = anyio.CancelScope(deadline=holding.loop_deadline())
        heartbeat_scope = anyio.CancelScope(shield=True)
        body_error: BaseException | None = None

        async def heartbeat() -> None:
            # Shielded: an outer cancellation reaches the body first; renewals go on until the
            # body (and its cleanup) has exited and cancels this scope explicitly.
            with heartbeat_scope:
                await holding.guard()
                if holding.lost_cause is not None:
                    body.cancel()

        holding.body_scopes.append(body)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(heartbeat)
                try:
                    with body:
                        yield Grant(holding, self.owner, self._clock)
                except (anyio.get_cancelled_exc_class(), GeneratorExit):
                    raise  # cancellation must pass through the scopes it belongs to
                except BaseException as exc:  # re-raised bare below, never in an ExceptionGroup
                    body_error = exc  # (KeyboardInterrupt and SystemExit too)
                finally:
                    holding.body_scopes.remove(body)
                    # A body that ran past the deadline (cancelled by it, or finished without a
                    # checkpoint) may have overlapped another holder: that is a loss.
                    # (Only its deadline cancels the body while the grant is active.)
                    holding.check_deadline(passed=body.cancel_called)
                    heartbeat_scope.cancel()
        finally:
            await self._drop_hold(holding, raise_unknown=False)
        if body_error is not None and not isinstance(body_error, Exception):
            raise body_error  # KeyboardInterrupt, SystemExit: never turned into LeaseLost
        if holding.lost_cause is not None:
            if body_error is not None and not _is_own_loss(body_error, holding):
                raise LeaseLost(self.name, holding.lost_cause) from body_error
            raise LeaseLost(self.name, holding.lost_cause)
        if body_error is not None:
            raise body_error

    async def _drop_hold(self, holding: Holding, *, raise_unknown: bool) -> bool:
        """Remove one hold; the last one ends the grant and releases it (shielded, bounded)."""
        holding.holds -= 1
        if holding.holds > 0:
            return True
        was_lost = holding.lost_cause is not None
        holding.end()
        if was_lost:
            return False
        return await self._release(holding, raise_unknown=raise_unknown)

    async def _release(self, holding: Holding, *, raise_unknown: bool) -> bool:
        """Write an empty holder if a fresh read still shows our grant (DESIGN §4.4)."""
        error: BaseException | None = None
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(self.settings.lease_operation_timeout) as scope,
            urgent(),  # a release hands the lease over: it goes before acquisitions
        ):
            try:
                current = await self.backend.get(self.name)
                self._observe(current)
                if not algo.still_ours(current, holding.identity, holding.token):
                    return False
                assert current is not None
                written = algo.release_record(current, self._wall_clock())
                released = await self.backend.update(written, current.version)
                problem = algo.echo_problem(released, written, current.version)
                if problem:
                    raise BackendProtocolError(f"the answer to the release: {problem}")
                self._observe(released)
                return True
            except ConflictError:
                return False
            except Exception as exc:
                error = exc
        message = (
            f"releasing lease {self.name!r} "
            + ("timed out" if scope.cancelled_caught else f"failed: {error}")
            + "; it expires after the heartbeat timeout"
        )
        logger.warning("%s", message)
        if raise_unknown:
            raise BackendUnavailable(message) from error
        return False

    # -- the Akka-style API ---------------------------------------------------------------------

    async def __aenter__(self) -> Lease:
        """Open the task group that hosts the heartbeat of :meth:`acquire`."""
        if self._host is not None:
            raise LeaseError(f"lease {self.name!r} is already entered")
        self._host_stack, self._host = await open_host()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._host_stack = self._host_stack, None

        async def end_hold() -> None:
            if self._akka is not None:
                await self._end_akka(raise_unknown=False)

        try:
            return await close_host(stack, end_hold, exc_type, exc, tb)
        finally:
            self._host = None

    def attach_host(self, host: TaskGroup | None) -> None:
        """Host :meth:`acquire`'s heartbeat in ``host`` (used by :class:`LeaseProvider`)."""
        self._host = host

    async def acquire(self, on_lost: LostCallback | None = None) -> bool:
        """Try once to acquire: True if held, False if another owner holds it.

        Raises :class:`BackendUnavailable` when the backend cannot be reached (after cleaning up
        a write that may have landed). The heartbeat runs in the task group opened by
        ``async with lease:`` (or ``async with provider:``). ``on_lost(cause)`` is called once
        if this grant is later lost. Acquiring again while held returns True (reentrant).
        """
        if self._host is None:
            raise LeaseError(
                f"acquire() needs a task group to host the heartbeat: call it inside "
                f"`async with lease:` (or `async with provider:`) for lease {self.name!r}"
            )
        if self._akka is not None and self._akka.holding.is_valid():
            return True
        attempt = await self._attempt()
        if isinstance(attempt, algo.Busy):
            return False
        hold = _AkkaHold(attempt, on_lost)
        self._akka = hold
        self._host.start_soon(self._run_akka_hold, hold)
        return True

    async def _run_akka_hold(self, hold: _AkkaHold) -> None:
        with hold.scope:
            await hold.holding.guard()
        if hold.holding.lost_cause is not None and not hold.dropped:
            hold.dropped = True
            await self._drop_hold(hold.holding, raise_unknown=False)
            if self._akka is hold:
                self._akka = None
            if hold.on_lost is not None:
                try:
                    outcome = hold.on_lost(LeaseLost(self.name, hold.holding.lost_cause))
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception:
                    logger.exception("lease %r: the on_lost callback raised", self.name)

    async def release(self) -> bool:
        """Release what :meth:`acquire` took: True if released, False if we did not hold it.

        Raises :class:`BackendUnavailable` if the outcome is unknown. If ``held()`` scopes of the
        same owner are still open, they keep the lease (reentrancy) and this returns True.
        """
        if self._akka is None:
            return False
        return await self._end_akka(raise_unknown=True)

    async def _end_akka(self, *, raise_unknown: bool) -> bool:
        hold, self._akka = self._akka, None
        assert hold is not None
        hold.scope.cancel()
        if hold.dropped:
            return False
        hold.dropped = True
        return await self._drop_hold(hold.holding, raise_unknown=raise_unknown)

    def check_lease(self) -> bool:
        """True only while this owner holds a grant whose deadline has not passed (no I/O)."""
        return self._live_holding() is not None


class _AkkaHold:
    __slots__ = ("dropped", "holding", "on_lost", "scope")

    def __init__(self, holding: Holding, on_lost: LostCallback | None) -> None:
        self.holding = holding
        self.on_lost = on_lost
        self.scope = anyio.CancelScope()
        self.dropped = False


async def open_host() -> tuple[AsyncExitStack, TaskGroup]:
    """Open a task group by hand, to host heartbeats between ``__aenter__`` and ``__aexit__``."""
    stack = AsyncExitStack()
    return stack, await stack.enter_async_context(anyio.create_task_group())


async def close_host(
    stack: AsyncExitStack | None,
    cleanup: Callable[[], Awaitable[None]],
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> bool | None:
    """Run ``cleanup`` (ending the hosted holds), then exit the task group from open_host."""
    try:
        await cleanup()
    except BaseException:
        if stack is not None:
            await stack.aclose()
        raise
    if stack is None:
        return None
    try:
        return await stack.__aexit__(exc_type, exc, tb)
    except BaseExceptionGroup as group:
        # The task group wraps the body's own exception (anyio does, on both loops): one error
        # comes out bare, the body's own unchanged (DESIGN §4.5).
        single = sole_error(group)
        if single is None:
            raise
        reraise(single)


def reraise(exc: BaseException) -> NoReturn:
    """Raise ``exc`` (taken out of a group) with its own ``__cause__``/``__context__`` kept."""
    chain = exc.__cause__, exc.__context__, exc.__suppress_context__
    try:
        raise exc
    finally:
        exc.__cause__, exc.__context__, exc.__suppress_context__ = chain


def sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception inside ``group`` (nested groups included), or None if there are more."""
    found: BaseException | None = None
    for inner in group.exceptions:
        leaf = sole_error(inner) if isinstance(inner, BaseExceptionGroup) else inner
        if leaf is None or found is not None:
            return None
        found = leaf
    return found


def _untyped(exc: Exception, backend: LeaseBackend, what: str) -> BackendProtocolError:
    """The typed error for an exception outside the LeaseError tree escaping a backend call.

    Backends check their replies where they enter (trio_lease._wire); this is the last line of
    defence for a backend that does not (a third-party one, or a reply nobody foresaw). The
    exception's text is not quoted: it may carry what the server sent.
    """
    return BackendProtocolError(
        f"{what}: {backend!r} raised {type(exc).__name__} (a reply it could not read, or a bug "
        "in the backend); the outcome is unknown"
    )


def _is_own_loss(error: Exception, holding: Holding) -> bool:
    """True for the LeaseLost that Grant.check() raised for this very grant (also in a group)."""
    if isinstance(error, ExceptionGroup):
        return all(_is_own_loss(inner, holding) for inner in error.exceptions)
    return (
        isinstance(error, LeaseLost)
        and error.lease_name == holding.name
        and error.cause == holding.lost_cause
    )


@asynccontextmanager
async def _closing(stream: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """Close a backend's watch stream (an async generator) as soon as we stop reading it."""
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await aclose()


def _utc_now() -> datetime:
    return datetime.now(UTC)
