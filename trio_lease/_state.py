"""What every part of a lease works from: :class:`LeaseState`, one per :class:`~trio_lease.Lease`.

A lease is one public object made of parts, each an object of its own module: reading the record
(:mod:`._reading`), writing it (:mod:`._writing`), waiting for a grant (:mod:`._waiting`),
holding it as a scope with its heartbeat (:mod:`._held`) and the Akka-style host (:mod:`._akka`).
:class:`~trio_lease.Lease` (:mod:`._lease`) makes one :class:`LeaseState` and hands it to each
part with the parts it calls. The state is what they share and nothing else: who the lease is
(name, owner, identity), where its record is stored and how fast (backend, settings), its clocks
and observers, and what it has seen of the record (the observation :mod:`._algorithm` counts a
contender's wait from, the last record, the token floor) and whether it is waiting. What only one
part needs (the waiting warnings, what ``acquire()`` holds) stays in that part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from datetime import datetime

from . import _algorithm as algo
from ._abc import LeaseBackend, LeaseRecord
from ._heartbeat import Holding, registry
from ._observer import LeaseInfo, LeaseObserver
from ._settings import LeaseSettings

__all__ = ["LeaseState"]


@dataclasses.dataclass(eq=False, slots=True)
class LeaseState:
    """The state a lease's parts share: its identity and configuration, and what it has seen."""

    #: The lease name (the record's key in the store).
    name: str
    #: The owner name; the identity written to the record adds the incarnation id.
    owner: str
    #: The holder identity this lease writes: ``owner`` plus the process's incarnation id.
    identity: str
    #: The store of the record.
    backend: LeaseBackend
    #: The lease's timing (validated, and accepted by the backend).
    settings: LeaseSettings
    #: Monotonic seconds (default ``anyio.current_time``).
    clock: Callable[[], float]
    #: UTC datetimes, written to records for humans only.
    wall_clock: Callable[[], datetime]
    #: Which lease observers are told about; the lease's own observers (:mod:`._observer`).
    info: LeaseInfo
    observers: tuple[LeaseObserver, ...]
    #: When the current wait for a grant started (None: not waiting).
    wait_started: float | None = None
    #: The observation of the record that a contender's wait is counted from.
    observation: algo.Observation | None = None
    #: The record as last read or written by this lease.
    last_record: LeaseRecord | None = None
    #: The highest fencing token seen on this lease (read or granted): new grants go above.
    token_floor: int = 0

    @property
    def key(self) -> tuple[Hashable, str, str]:
        """This lease's key in the process's registry of holdings (:mod:`._heartbeat`)."""
        return (self.backend.store_key, self.name, self.identity)

    def live_holding(self) -> Holding | None:
        """The grant this identity holds on this lease in this process, if still valid."""
        holding = registry.get(self.key)
        if holding is not None and holding.is_valid():
            return holding
        return None

    def observe(self, record: LeaseRecord | None) -> None:
        """Note a record read or written: the observation, the last record, the token floor."""
        self.observation = algo.observe(self.observation, record, self.clock())
        self.last_record = record
        if record is not None and not record.unreadable:
            self.token_floor = max(self.token_floor, record.fencing_token)
