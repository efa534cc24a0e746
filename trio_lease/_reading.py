"""Reading a lease's record: :class:`RecordReader`, the part of a lease every read goes through.

Every read of the record goes through :meth:`RecordReader.read`, every watch through
:meth:`RecordReader.watch_records` and every following of the process's shared watch through
:meth:`RecordReader.follow`: each call is bounded by the lease operation timeout, and
anything a backend returns or raises outside the SPI becomes a typed error here
(:func:`untyped`), so the other parts of a :class:`~trio_lease.Lease` only ever see records and
:class:`LeaseError`. What a read shows is noted in the lease's :class:`~._state.LeaseState`
(:meth:`~._state.LeaseState.observe`); ``holder()`` and ``watch_holder()`` report it, and
:meth:`RecordReader.takeover_in` counts a contender's wait from it.
"""

from __future__ import annotations

import logging

import anyio

from . import _algorithm as algo
from ._abc import LeaseRecord
from ._exceptions import BackendProtocolError, BackendUnavailable, LeaseError
from ._feed import checked_watch, closing, untyped
from ._holder_changes import holder_changes
from ._shared_watch import FeedFailure, Receive, shared_watch
from ._state import LeaseState
from ._streams import Changes

__all__ = ["RecordReader", "closing", "untyped"]

logger = logging.getLogger("trio_lease")


class RecordReader:
    """Reads and watches a lease's record, noting what it sees in the lease's state."""

    __slots__ = ("_state",)

    def __init__(self, state: LeaseState) -> None:
        self._state = state

    async def read(self) -> LeaseRecord | None:
        """Read the record (bounded by T), check it is one, and observe it."""
        try:
            with anyio.move_on_after(self._state.settings.lease_operation_timeout) as scope:
                record = await self._state.backend.get(self._state.name)
        except LeaseError:
            raise
        except Exception as exc:  # the SPI boundary: a backend's own bug, made typed and chained
            raise untyped(
                exc, self._state.backend, f"reading lease {self._state.name!r}"
            ) from exc
        if scope.cancelled_caught:
            raise BackendUnavailable(
                f"reading lease {self._state.name!r} took longer than the lease operation timeout "
                f"({self._state.settings.lease_operation_timeout:g} s)"
            )
        if record is not None and not isinstance(record, LeaseRecord):
            raise BackendProtocolError(
                f"{self._state.backend!r} returned {type(record).__name__} for lease "
                f"{self._state.name!r}, not a LeaseRecord or None"
            )
        self._state.observe(record)
        return record

    async def follow(self, receive: Receive | None = None) -> None:
        """Follow the record through the process's shared watch until cancelled.

        Its current state is read first (:meth:`read`), then each state the watch reports is
        observed, as a read's is, and handed to ``receive`` (if given); a feed failure is handed
        on as :class:`~._shared_watch.FeedFailure`, observing nothing. Returns at once for a
        backend without a watch (the callers poll). A waiting contender follows its record so;
        so does a feature that must count a dead holder's expiry from before it starts waiting.
        """
        hub = shared_watch(self._state.backend)
        if hub is None:
            return

        async def deliver(state: LeaseRecord | FeedFailure | None) -> None:
            if not isinstance(state, FeedFailure):
                self._state.observe(state)
            if receive is not None:
                await receive(state)

        await hub.follow(self._state.name, deliver, first=self.read)

    def takeover_in(self) -> float:
        """Seconds until a contender may take over the record as last seen, counted from when
        this lease first saw its version (0 when none was seen, it is free, or it has stood
        unchanged for L)."""
        record = self._state.last_record
        if record is None:
            return 0.0
        state = self._state
        return algo.expires_in(record, state.observation, state.clock(), state.settings)

    def unchanged_for(self) -> float:
        """Seconds since this lease first saw the record's current version (0 when none was
        seen): how long the holder has not renewed, as far as this lease knows."""
        state = self._state
        if state.last_record is None or state.observation is None:
            return 0.0
        return max(0.0, state.clock() - state.observation.since)

    def holder(self) -> str | None:
        """The holder identity as last read (None when free or never read).

        A record that could not be read is held by an unknown holder: this returns
        ``"(unknown: the record is unreadable)"``, never None.
        """
        record = self._state.last_record
        if record is None or record.is_free:
            return None
        if record.unreadable:
            return algo.UNKNOWN_HOLDER
        return record.holder

    def watch_holder(self) -> Changes[str | None]:
        """The holder identity (None when free) now and whenever it changes, as a stream.

        Uses the backend's watch when it has one, else polls every ``wait_interval``. A dead
        holder's record does not change, so this reports what the record says, not expiry.
        """
        return holder_changes(self, self._state)

    def watch_records(self) -> Changes[LeaseRecord | None]:
        """The backend's watch, each item checked, anything untyped it raises made typed."""
        return checked_watch(self._state.backend, self._state.name)
