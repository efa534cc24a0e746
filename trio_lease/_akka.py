"""The Akka-style API of a lease: ``acquire()``, ``release()``, ``check_lease()``, with a host.

``acquire()`` tries once and, when granted, leaves the grant's heartbeat running in a host task
group (:mod:`._host`) opened by ``async with lease.host():`` or by the :class:`LeaseProvider` that
handed the lease out (:meth:`AkkaHost.attach`). ``on_lost(cause)`` is called once if the grant is
later lost. ``release()`` (or leaving the host) drops the hold; :meth:`AkkaHost.end_hosted` is how a
closing host (``async with lease.host():`` or a :class:`LeaseProvider`) ends it.

:class:`AkkaHost` is the part of a :class:`~trio_lease.Lease` that does this; it attempts and
releases through the lease's :class:`~._writing.GrantWriter`. It sits beside :mod:`._held`: the
two ways of holding share grants (reentrancy, docs/design.md §4.6) through the process's registry
of holdings (:mod:`._heartbeat`), not through code or state.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack

import anyio
from anyio.abc import TaskGroup

from . import _algorithm as algo
from ._exceptions import LeaseError, LeaseLost
from ._heartbeat import Holding
from ._host import close_host, open_host
from ._outcome import ExcInfo
from ._state import LeaseState
from ._writing import GrantWriter

__all__ = ["AkkaHost", "LostCallback"]

logger = logging.getLogger("trio_lease")

LostCallback = Callable[[BaseException | None], object]


class AkkaHost:
    """The Akka-style API of a lease: what :meth:`acquire` holds, and the task group hosting it."""

    __slots__ = ("_hold", "_host", "_host_stack", "_state", "_writer")

    def __init__(self, state: LeaseState, writer: GrantWriter) -> None:
        self._state = state
        self._writer = writer
        # The host and what acquire() holds.
        self._host: TaskGroup | None = None
        self._host_stack: AsyncExitStack | None = None
        self._hold: _AkkaHold | None = None

    async def enter(self) -> None:
        """Open the task group that hosts the heartbeat of :meth:`acquire`."""
        if self._host is not None:
            raise LeaseError(
                f"the host of lease {self._state.name!r} is already open "
                "(`async with lease.host():` is entered once at a time)"
            )
        self._host_stack, self._host = await open_host()

    async def exit(self, *exc_info: *ExcInfo) -> bool | None:
        """End what :meth:`acquire` holds, then close the host task group (one error out bare)."""
        stack, self._host_stack = self._host_stack, None

        async def end_hold() -> None:
            await self.end_hosted()

        try:
            return await close_host(stack, end_hold, *exc_info)  # noqa: ASYNC102  its release is shielded and bounded (drop_hold)
        finally:
            self._host = None

    def attach(self, host: TaskGroup | None) -> None:
        """Host :meth:`acquire`'s heartbeat in ``host`` (used by :class:`LeaseProvider`)."""
        self._host = host

    async def acquire(self, on_lost: LostCallback | None = None) -> bool:
        """Try once to acquire: True if held, False if another owner holds it.

        Raises :class:`BackendUnavailable` when the backend cannot be reached (after cleaning up
        a write that may have landed). The heartbeat runs in the task group opened by
        ``async with lease.host():`` (or ``async with provider:``). ``on_lost(cause)`` is called
        once if this grant is later lost. Acquiring again while held returns True (reentrant).
        """
        if self._host is None:
            raise LeaseError(
                f"acquire() needs a task group to host the heartbeat: call it inside "
                f"`async with lease.host():` (or `async with provider:`) for lease "
                f"{self._state.name!r}"
            )
        if self._hold is not None and self._hold.holding.is_valid():
            return True
        attempt = await self._writer.attempt()
        if isinstance(attempt, algo.Busy):
            return False
        hold = _AkkaHold(attempt, on_lost)
        self._hold = hold
        self._host.start_soon(self._run_akka_hold, hold)
        return True

    async def _run_akka_hold(self, hold: _AkkaHold) -> None:
        with hold.scope:
            await hold.holding.guard()
        if hold.holding.lost_cause is not None and not hold.dropped:
            hold.dropped = True
            await self._writer.drop_hold(hold.holding, raise_unknown=False)
            if self._hold is hold:
                self._hold = None
            if hold.on_lost is not None:
                try:
                    outcome = hold.on_lost(LeaseLost(self._state.name, hold.holding.lost_cause))
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception:  # the user's callback: its error is logged, the host goes on
                    logger.exception("lease %r: the on_lost callback raised", self._state.name)

    async def release(self) -> bool:
        """Release what :meth:`acquire` took: True if released, False if we did not hold it.

        Raises :class:`BackendUnavailable` if the outcome is unknown. If ``held()`` scopes of the
        same owner are still open, they keep the lease (reentrancy) and this returns True.
        """
        if self._hold is None:
            return False
        return await self.end_hold(raise_unknown=True)

    async def end_hold(self, *, raise_unknown: bool) -> bool:
        """Stop the heartbeat of what :meth:`acquire` holds and drop the hold (release it)."""
        hold, self._hold = self._hold, None
        assert hold is not None
        hold.scope.cancel()
        if hold.dropped:
            return False
        hold.dropped = True
        return await self._writer.drop_hold(hold.holding, raise_unknown=raise_unknown)

    def check_lease(self) -> bool:
        """True only while this owner holds a grant whose deadline has not passed (no I/O)."""
        return self._state.live_holding() is not None

    async def end_hosted(self) -> None:
        """End what :meth:`acquire` holds (if anything), never raising for an unknown outcome:
        its host task group is closing (``async with lease.host():`` or a provider)."""
        if self._hold is not None:
            await self.end_hold(raise_unknown=False)


class _AkkaHold:
    __slots__ = ("dropped", "holding", "on_lost", "scope")

    def __init__(self, holding: Holding, on_lost: LostCallback | None) -> None:
        self.holding: Holding = holding
        self.on_lost: LostCallback | None = on_lost
        self.scope: anyio.CancelScope = anyio.CancelScope()
        self.dropped: bool = False
