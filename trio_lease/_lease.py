"""Lease: one public class, made of parts that each do one thing with the state they are given.

=================  ==========================================================================
:mod:`._state`     :class:`LeaseState`: who the lease is, its store, clocks, what it has seen
:mod:`._reading`   :class:`RecordReader`: every read and watch of the record, ``holder()``
:mod:`._writing`   :class:`GrantWriter`: one acquire attempt, release, handover requests
:mod:`._waiting`   :class:`Waiter`: waiting for the grant (watch or jittered polls), warnings
:mod:`._held`      :class:`HeldScopes`: ``held()`` / ``try_held()``, the body beside its heartbeat
:mod:`._akka`      :class:`AkkaHost`: ``acquire()`` / ``release()`` / ``check_lease()``, the host
=================  ==========================================================================

:class:`Lease` checks its arguments, makes one :class:`LeaseState` and each part, handing every
part the state and the parts it calls (a part never reaches the lease itself), and forwards its
public methods to them. The two ways of holding, :class:`HeldScopes` and :class:`AkkaHost`, share
grants (reentrancy, docs/design.md §4.6) through the process's registry of holdings
(:mod:`._heartbeat`), not through code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Generic, NoReturn, Self, TypeVar

import anyio
from anyio.abc import TaskGroup

from ._abc import LeaseBackend, LeaseRecord
from ._akka import AkkaHost, LostCallback
from ._checks import check_name, check_text
from ._exceptions import BackendError, LeaseConfigError
from ._grant import Grant
from ._held import HeldScopes
from ._identity import incarnation
from ._observer import LeaseInfo, LeaseObserver, observers_of
from ._outcome import ExcInfo
from ._reading import RecordReader
from ._settings import LeaseSettings, check_seconds
from ._state import LeaseState
from ._streams import Changes
from ._waiting import Waiter
from ._writing import GrantWriter

__all__ = ["NOT_A_SCOPE", "Lease", "end_hosted_hold"]

#: What ``async with lease:`` raises: the two forms that mean something.
NOT_A_SCOPE = (
    "`async with lease:` does not hold lease {name!r} (it would run the body without it): "
    "use `async with lease.held() as grant:` to run a body while the lease is held, or "
    "`async with lease.host():` to host the heartbeat of `await lease.acquire()` (Akka-style)"
)


class Lease:
    """A named distributed lease, held by ``owner`` through ``backend``.

    The identity written to the record is ``owner`` plus a per-process incarnation id, so a
    restarted process never silently inherits a live lease. Leases are reentrant per identity:
    in one process, every :class:`Lease` of the same store, name and owner shares one grant.

    ``clock`` (monotonic seconds, default ``anyio.current_time``) and ``wall_clock`` (UTC
    datetimes, written to records for humans only) can be injected for tests.

    Hold it as a scope with :meth:`held` (or :meth:`try_held`), or Akka-style with
    :meth:`acquire`, :meth:`release` and :meth:`check_lease` inside ``async with lease.host():``.
    ``async with lease:`` raises :class:`TypeError` at once: it would read as "hold the lease"
    (as ``async with lock:`` does) and run its body without it.
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
        observers: Iterable[LeaseObserver] = (),
    ) -> None:
        check_name(name, "lease name")  # a feature's RecordName may hold the separator
        check_text(owner, "owner")
        if not isinstance(backend, LeaseBackend):
            raise LeaseConfigError(
                f"backend must be a trio_lease.abc.LeaseBackend, got {type(backend).__name__}"
            )
        settings = settings if settings is not None else LeaseSettings()
        backend.validate_settings(settings)
        identity = f"{owner}_{incarnation()}"
        state = LeaseState(
            name=name,
            owner=owner,
            identity=identity,
            backend=backend,
            settings=settings,
            clock=clock if clock is not None else anyio.current_time,
            wall_clock=wall_clock if wall_clock is not None else _utc_now,
            info=LeaseInfo(name, owner, identity),
            observers=observers_of(observers),
        )
        self._state = state
        self._reader = RecordReader(state)
        self._writer = GrantWriter(state, self._reader)
        self._waiter = Waiter(state, self._reader, self._writer)
        self._scopes = HeldScopes(state, self._writer, self._waiter)
        self._akka = AkkaHost(state, self._writer)

    @property
    def name(self) -> str:
        """The lease name (the record's key in the store)."""
        return self._state.name

    @property
    def owner(self) -> str:
        """The owner name; the identity written to the record adds the incarnation id."""
        return self._state.owner

    @property
    def backend(self) -> LeaseBackend:
        """The store of the record."""
        return self._state.backend

    @property
    def settings(self) -> LeaseSettings:
        """The lease's timing (validated, and accepted by the backend)."""
        return self._state.settings

    @property
    def identity(self) -> str:
        """The holder identity this lease writes: ``owner`` plus the process's incarnation id."""
        return self._state.identity

    def __repr__(self) -> str:
        return f"Lease(name={self.name!r}, owner={self.owner!r}, backend={self.backend!r})"

    # Holding it as a scope (._held).

    def held(self, *, timeout: float | None = None) -> AbstractAsyncContextManager[Grant]:
        """Wait until this owner holds the lease, run the body, then release.

        Raises :class:`AcquireTimeout` if ``timeout`` seconds pass first. If the lease is lost
        while the body runs, the body is cancelled and a bare :class:`LeaseLost` is raised here
        (also when the body finished without reaching a checkpoint after the loss: its work may
        have overlapped another holder's). An outer cancellation passes through unchanged, and
        renewals continue while the body's own cleanup runs. ``timeout`` is None (wait as long as
        it takes) or seconds >= 0; anything else raises :class:`LeaseConfigError` here.
        """
        checked = check_seconds(timeout, "lease.held(timeout=...)", none="wait without bound")
        return self._scopes.held(timeout=checked)

    def try_held(self) -> AbstractAsyncContextManager[Grant]:
        """Like :meth:`held`, but raise :class:`LeaseBusy` at once if another owner holds it."""
        return self._scopes.try_held()

    # Waiting for it (._waiting).

    @property
    def failing_since(self) -> float | None:
        """While waiting: when (on the lease's clock) the backend started failing, else None."""
        return self._waiter.failing_since

    @property
    def last_error(self) -> BackendError | None:
        """While waiting and the backend fails: the error of the last attempt, else None."""
        return self._waiter.last_error

    # The Akka-style API (._akka).

    def host(self) -> AbstractAsyncContextManager[Self]:
        """The task group that hosts the heartbeat of :meth:`acquire`:
        ``async with lease.host(): await lease.acquire()``.

        Entering it does not acquire anything; leaving it releases what :meth:`acquire` holds,
        then closes the task group (one error comes out bare). To run a body only while the
        lease is held, use :meth:`held`.
        """
        return _Host[Self](self)

    if not TYPE_CHECKING:  # hidden from type checkers: they report ``async with lease:`` too

        async def __aenter__(self) -> NoReturn:
            raise TypeError(NOT_A_SCOPE.format(name=self._state.name))

        async def __aexit__(self, *exc_info: object) -> None:  # pragma: no cover - never entered
            return None

    def attach_host(self, host: TaskGroup | None) -> None:
        """Host :meth:`acquire`'s heartbeat in ``host`` (used by :class:`LeaseProvider`)."""
        self._akka.attach(host)

    async def acquire(self, on_lost: LostCallback | None = None) -> bool:
        """Try once to acquire: True if held, False if another owner holds it.

        Raises :class:`BackendUnavailable` when the backend cannot be reached (after cleaning up a
        write that may have landed). The heartbeat runs in the task group opened by ``async with
        lease.host():`` (or ``async with provider:``). ``on_lost(cause)`` is called once if this
        grant is later lost. Acquiring again while held returns True (reentrant).
        """
        return await self._akka.acquire(on_lost)

    async def release(self) -> bool:
        """Release what :meth:`acquire` took: True if released, False if we did not hold it.

        Raises :class:`BackendUnavailable` if the outcome is unknown. If ``held()`` scopes of the
        same owner are still open, they keep the lease (reentrancy) and this returns True.
        """
        return await self._akka.release()

    def check_lease(self) -> bool:
        """True only while this owner holds a grant whose deadline has not passed (no I/O)."""
        return self._akka.check_lease()

    # The record (._reading, ._writing).

    @property
    def last_record(self) -> LeaseRecord | None:
        """The record as last read by this lease (None: never read, or no record stored).

        For status displays: its wall-clock fields are the writer's, informational only, and
        ``unreadable`` says what could not be read. Decisions never use it without a fresh read.
        """
        return self._state.last_record

    def holder(self) -> str | None:
        """The holder identity as last read (None when free or never read).

        A record that could not be read is held by an unknown holder: this returns
        ``"(unknown: the record is unreadable)"``, never None.
        """
        return self._reader.holder()

    def watch_holder(self) -> Changes[str | None]:
        """The holder identity (None when free) now and whenever it changes.

        ``async with lease.watch_holder() as holders: async for holder in holders: ...``: the
        watch runs in a task the block owns, never around the loop's body.

        Uses the backend's watch when it has one, else polls every ``wait_interval``. A dead
        holder's record does not change, so this reports what the record says, not expiry.
        """
        return self._reader.watch_holder()

    async def request_handover(self, *, replace: bool = True) -> bool:
        """Ask the current holder to hand the lease over to this owner; then wait with ``held()``.

        Writes this lease's identity into the record (compare-and-swap, holder and token
        unchanged). The holder notices at its next renewal, sooner where it watches: its
        ``grant.handover_requested`` is set, ``run_singleton`` stops ``fn`` gracefully, and the
        release reserves the lease for this identity: other contenders wait until the released
        record has stood for L, this one takes it at once. Fencing tokens still increase.

        Returns True when the request is in the record (written now or before), False when there
        is nothing to hand over (the lease is free, or this owner holds it): acquire it instead.
        With ``replace=False`` another contender's request already in the record is kept and
        this returns False (a waiter in line keeps its place); by default it is replaced.
        Raises :class:`LeaseConfigError` if the backend does not store handover requests, and
        :class:`BackendUnavailable` if the record is unreadable or the writes keep conflicting.
        """
        return await self._writer.request_handover(replace=replace)

    async def withdraw_handover(self) -> bool:
        """Take back this owner's handover request, if the record still has it.

        For a contender that asked and gives up waiting: the released lease would otherwise stay
        reserved for it, closed to every other contender, for L. True when the request was
        there and is now gone. Raises :class:`BackendUnavailable` if the store fails or the
        writes keep conflicting (the request then lapses L after the release).
        """
        return await self._writer.withdraw_handover()

    async def read(self) -> LeaseRecord | None:
        """Read the record now (bounded by the lease operation timeout); also :attr:`last_record`.

        For status displays and for features built on leases that look at several records (a
        semaphore's slots, a group's members). Raises :class:`BackendUnavailable` on a failure.
        """
        return await self._reader.read()


_L = TypeVar("_L", bound=Lease)


class _Host(Generic[_L]):
    """``lease.host()``: the task group hosting :meth:`Lease.acquire`'s heartbeat."""

    __slots__ = ("_lease",)

    def __init__(self, lease: _L) -> None:
        self._lease = lease

    async def __aenter__(self) -> _L:
        await self._lease._akka.enter()
        return self._lease

    async def __aexit__(self, *exc_info: *ExcInfo) -> bool | None:
        """End what :meth:`Lease.acquire` holds (releasing it), then close the task group."""
        return await self._lease._akka.exit(*exc_info)  # noqa: ASYNC102  its release is shielded and bounded (drop_hold)


async def end_hosted_hold(lease: Lease) -> None:
    """End what ``lease.acquire()`` holds (if anything), never raising for an unknown outcome:
    the task group hosting it is closing (a :class:`LeaseProvider`'s)."""
    await lease._akka.end_hosted()


def _utc_now() -> datetime:
    return datetime.now(UTC)
