"""Grant: what ``held()`` yields to the body, a read-only view of one grant held by this owner.

It reads the process-local :class:`~trio_lease._heartbeat.Holding` (shared by reentrant scopes)
and never does I/O: the fencing token to pass to guarded resources, the deadline, and
:meth:`Grant.check` for a last look right before an irreversible side effect.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from ._exceptions import LeaseLost
from ._heartbeat import Holding

__all__ = ["Grant"]


class Grant:
    """A grant of a lease to this owner, as yielded by ``held()``.

    ``fencing_token`` strictly increases with every new grant of the lease; pass it to the
    resources you write so they can reject writes from a stale holder. ``deadline`` (on the
    lease's monotonic clock) moves forward with each confirmed renewal.
    """

    __slots__ = ("_clock", "_holding", "lease_name", "owner")

    def __init__(self, holding: Holding, owner: str, clock: Callable[[], float]) -> None:
        self._holding: Holding = holding
        self._clock: Callable[[], float] = clock
        #: The name of the lease granted.
        self.lease_name: str = holding.name
        #: The owner the grant was made to (the identity adds the incarnation id).
        self.owner: str = owner

    @property
    def fencing_token(self) -> int:
        """Strictly increases with every new grant of the lease; kept across renewals."""
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
    def handover_requested(self) -> anyio.Event:
        """Set when another contender asked for the lease (``Lease.request_handover()``).

        Finish the work in hand and leave the scope: the release then reserves the lease for
        the requester (``run_singleton`` does this with its graceful stop).
        """
        return self._holding.handover_requested

    @property
    def handover_to(self) -> str:
        """The identity that asked for a handover ("" until someone does)."""
        return self._holding.handover_to

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
