"""The Akka-style API of a lease: ``acquire()``, ``release()``, ``check_lease()``, with a host.

``acquire()`` tries once and, when granted, leaves the grant's heartbeat running in a host
task group (:mod:`._host`) opened by ``async with lease:`` or by the :class:`LeaseProvider` that
handed the lease out (:meth:`AkkaLease.attach_host`). ``on_lost(cause)`` is called once if the
grant is later lost. ``release()`` (or leaving the host) drops the hold; :func:`end_hosted_hold`
is how a closing :class:`LeaseProvider` ends the holds of the leases it hosts.

This layer of :class:`~trio_lease.Lease` sits on :mod:`._writing` (see :mod:`._reading` for
why layers) and beside :mod:`._held`: the two ways of holding share grants (reentrancy) but not
code.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Self

import anyio
from anyio.abc import TaskGroup

from . import _algorithm as algo
from ._exceptions import LeaseError, LeaseLost
from ._heartbeat import Holding
from ._host import close_host, open_host
from ._writing import LeaseWriting

__all__ = ["AkkaLease", "LostCallback", "end_hosted_hold"]

logger = logging.getLogger("trio_lease")

LostCallback = Callable[[BaseException | None], object]


class AkkaLease(LeaseWriting):
    """The layer of :class:`~trio_lease.Lease` with the Akka-style API and its host."""

    # The host and what acquire() holds (class-level defaults: no layer needs __init__).
    _host: TaskGroup | None = None
    _host_stack: AsyncExitStack | None = None
    _akka: _AkkaHold | None = None

    async def __aenter__(self) -> Self:
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
            await end_hosted_hold(self)

        try:
            return await close_host(stack, end_hold, exc_type, exc, tb)  # noqa: ASYNC102  close_host shields and bounds the release
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


async def end_hosted_hold(lease: AkkaLease) -> None:
    """End what :meth:`AkkaLease.acquire` holds on ``lease`` (if anything), never raising for an
    unknown outcome: its host task group is closing (``async with lease:`` or a provider)."""
    if lease._akka is not None:
        await lease._end_akka(raise_unknown=False)


class _AkkaHold:
    __slots__ = ("dropped", "holding", "on_lost", "scope")

    def __init__(self, holding: Holding, on_lost: LostCallback | None) -> None:
        self.holding: Holding = holding
        self.on_lost: LostCallback | None = on_lost
        self.scope: anyio.CancelScope = anyio.CancelScope()
        self.dropped: bool = False
