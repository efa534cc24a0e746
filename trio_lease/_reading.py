"""A lease's base layer: its construction and what it knows of the record.

:class:`LeaseReading` holds what every other part of a :class:`~trio_lease.Lease` works from:
the name, owner, identity, backend and settings, the clocks, and the latest observation of the
record (:mod:`._algorithm` counts a contender's wait from it). Every read of the record goes
through :meth:`LeaseReading._read` and every watch through
:meth:`LeaseReading._watch_records`: each call is bounded by the lease operation timeout, and
anything a backend returns or raises outside the SPI becomes a typed error here
(:func:`untyped`), so the layers above only ever see records and :class:`LeaseError`.

``Lease`` is one public class built from one layer per module (this one, then
:mod:`._writing`, :mod:`._waiting`, :mod:`._held`, :mod:`._akka`; :mod:`._lease` joins them).
Layers rather than separate objects: every layer reads and updates the same state (the
observation, the token floor, the waiting state) and the public API is one object, so
composition would mean forwarding each attribute; a layer only calls the ones below it, so no
module imports one above it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from datetime import UTC, datetime

import anyio

from . import _algorithm as algo
from ._abc import LeaseBackend, LeaseRecord
from ._exceptions import BackendProtocolError, BackendUnavailable, LeaseConfigError, LeaseError
from ._feed import checked_watch, closing, untyped
from ._heartbeat import Holding, registry
from ._holder_changes import holder_changes
from ._identity import incarnation
from ._observer import LeaseInfo, LeaseObserver, observers_of
from ._settings import LeaseSettings
from ._streams import Changes

__all__ = ["LeaseReading", "closing", "untyped"]

logger = logging.getLogger("trio_lease")


def _is_text(value: str) -> bool:
    """Whether ``value`` is Unicode text (encodable as UTF-8: no lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class LeaseReading:
    """The base layer of :class:`~trio_lease.Lease`: construction, reading and watching."""

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
        if not isinstance(name, str) or not name:
            raise LeaseConfigError(f"a lease name must be a non-empty string, got {name!r}")
        if not isinstance(owner, str) or not owner:
            raise LeaseConfigError(f"an owner must be a non-empty string, got {owner!r}")
        for what, text in (("lease name", name), ("owner", owner)):
            if not _is_text(text):  # no store could keep it: every one writes UTF-8
                raise LeaseConfigError(
                    f"the {what} {text!r} holds a lone UTF-16 surrogate (\\ud800-\\udfff), "
                    "which is not Unicode text: no store can keep it; fix the name"
                )
        if not isinstance(backend, LeaseBackend):
            raise LeaseConfigError(
                f"backend must be a trio_lease.abc.LeaseBackend, got {type(backend).__name__}"
            )
        #: The lease name (the record's key in the store).
        self.name: str = name
        #: The owner name; the identity written to the record adds the incarnation id.
        self.owner: str = owner
        #: The store of the record.
        self.backend: LeaseBackend = backend
        #: The lease's timing (validated, and accepted by the backend).
        self.settings: LeaseSettings = settings if settings is not None else LeaseSettings()
        backend.validate_settings(self.settings)
        #: The holder identity this lease writes: ``owner`` plus the process's incarnation id.
        self.identity: str = f"{owner}_{incarnation()}"
        self._clock: Callable[[], float] = clock if clock is not None else anyio.current_time
        self._wall_clock: Callable[[], datetime] = (
            wall_clock if wall_clock is not None else _utc_now
        )
        #: Which lease observers are told about; the lease's own observers (:mod:`._observer`).
        self._info: LeaseInfo = LeaseInfo(name, owner, self.identity)
        self._observers: tuple[LeaseObserver, ...] = observers_of(observers)
        #: When the current wait for a grant started (None: not waiting).
        self._wait_started: float | None = None
        self._observation: algo.Observation | None = None
        self._last_record: LeaseRecord | None = None
        #: The highest fencing token seen on this lease (read or granted): new grants go above.
        self._token_floor: int = 0

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
            raise untyped(exc, self.backend, f"reading lease {self.name!r}") from exc
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

    @property
    def last_record(self) -> LeaseRecord | None:
        """The record as last read by this lease (None: never read, or no record stored).

        For status displays: its wall-clock fields are the writer's, informational only, and
        ``unreadable`` says what could not be read. Decisions never use it without a fresh read.
        """
        return self._last_record

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

    def watch_holder(self) -> Changes[str | None]:
        """The holder identity (None when free) now and whenever it changes.

        ``async with lease.watch_holder() as holders: async for holder in holders: ...``.
        Uses the backend's watch when it has one, else polls every ``wait_interval``. A dead
        holder's record does not change, so this reports what the record says, not expiry.
        """
        return holder_changes(self)

    def _watch_records(self) -> Changes[LeaseRecord | None]:
        """The backend's watch, each item checked, anything untyped it raises made typed."""
        return checked_watch(self.backend, self.name)


def _utc_now() -> datetime:
    return datetime.now(UTC)
