"""A lease held as a scope: ``held()`` and ``try_held()``, and the body they guard.

The body runs in a task group next to the grant's heartbeat (:meth:`Holding.guard`), in a
cancel scope carrying the grant's deadline. If the lease is lost, the body is cancelled and a
bare :class:`LeaseLost` comes out (never an ``ExceptionGroup``, docs/design.md §4.5); an outer
cancellation passes through unchanged while renewals go on until the body's own cleanup has
exited; only then is the hold dropped and the lease released (:mod:`._writing`). The body's own
error leaves bare, also after the caller's deadline passed, with a loss at the same time as its
``__context__`` (:class:`~._outcome.Outcome`).

:class:`HeldScopes` is the part of a :class:`~trio_lease.Lease` that holds it as a scope: it
waits through the lease's :class:`~._waiting.Waiter`, attempts and releases through its
:class:`~._writing.GrantWriter`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from . import _algorithm as algo
from ._exceptions import LeaseBusy, LeaseLost
from ._grant import Grant
from ._heartbeat import Holding
from ._outcome import Outcome
from ._state import LeaseState
from ._waiting import Waiter
from ._writing import GrantWriter

__all__ = ["HeldScopes"]


class HeldScopes:
    """Holds a lease for the duration of a scope: ``held()`` and ``try_held()``."""

    __slots__ = ("_state", "_waiter", "_writer")

    def __init__(self, state: LeaseState, writer: GrantWriter, waiter: Waiter) -> None:
        self._state = state
        self._writer = writer
        self._waiter = waiter

    @asynccontextmanager
    async def held(self, *, timeout: float | None = None) -> AsyncIterator[Grant]:
        """Wait until this owner holds the lease, run the body, then release.

        Raises :class:`AcquireTimeout` if ``timeout`` seconds pass first. If the lease is lost
        while the body runs, the body is cancelled and a bare :class:`LeaseLost` is raised here
        (also when the body finished without reaching a checkpoint after the loss: its work may
        have overlapped another holder's). An outer cancellation passes through unchanged, and
        renewals continue while the body's own cleanup runs.
        """
        holding = await self._waiter.acquire(timeout)
        async with self._hold(holding) as grant:
            yield grant

    @asynccontextmanager
    async def try_held(self) -> AsyncIterator[Grant]:
        """Like :meth:`held`, but raise :class:`LeaseBusy` at once if another owner holds it."""
        attempt = await self._writer.attempt()
        if isinstance(attempt, algo.Busy):
            raise LeaseBusy(self._state.name, attempt.holder, attempt.expires_in)
        async with self._hold(attempt) as grant:
            yield grant

    @asynccontextmanager
    async def _hold(self, holding: Holding) -> AsyncIterator[Grant]:
        # The body's scope is cancelled at the grant's deadline (pushed forward by each
        # confirmed renewal; trio_lease._bodies), so when the event loop resumes after stalling
        # past it, the body is cancelled together with the timers that expired in the stall, not
        # one step later by the watchdog.
        body = holding.body_scopes.open()
        heartbeat_scope = anyio.CancelScope(shield=True)
        outcome = Outcome()

        async def heartbeat() -> None:
            # Shielded: an outer cancellation reaches the body first; renewals go on until the
            # body (and its cleanup) has exited and cancels this scope explicitly.
            with heartbeat_scope:
                await holding.guard()
                if holding.lost_cause is not None:
                    body.cancel()

        # What leaves: the body's own error bare, a loss as its context (docs/design.md §4.5).
        with outcome.settled():
            loss: LeaseLost | None = None
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(heartbeat)
                    try:
                        with outcome.body(), body:
                            yield Grant(holding, self._state.owner, self._state.clock)
                    finally:
                        holding.body_scopes.close(body)
                        # A body that ran past the deadline (cancelled by it, or finished
                        # without a checkpoint) may have overlapped another holder: that is a
                        # loss. (Only its deadline cancels the body while the grant is active.)
                        holding.check_deadline(passed=body.cancel_called)
                        heartbeat_scope.cancel()
            finally:
                await self._writer.drop_hold(holding, raise_unknown=False)  # noqa: ASYNC102  drop_hold shields and bounds the release
                if holding.lost_cause is not None:
                    if outcome.body_error is not None and _is_own_loss(outcome.body_error, holding):
                        outcome.body_error = None  # Grant.check()'s own LeaseLost: raised anew
                    loss = LeaseLost(self._state.name, holding.lost_cause)
                    outcome.note(loss)
            if loss is not None:
                raise loss


def _is_own_loss(error: BaseException, holding: Holding) -> bool:
    """True for the LeaseLost that Grant.check() raised for this very grant (also in a group)."""
    if isinstance(error, BaseExceptionGroup):
        return all(_is_own_loss(inner, holding) for inner in error.exceptions)
    return (
        isinstance(error, LeaseLost)
        and error.lease_name == holding.name
        and error.cause == holding.lost_cause
    )
