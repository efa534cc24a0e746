"""Observers: what a lease does, told to metrics, traces, events and health checks.

The core calls a :class:`LeaseObserver` at each step of a lease's life, from one place per step
(docs/design.md §5; docs/operations.md):

==================  ==========================================  ==============================
call                when                                        with
==================  ==========================================  ==============================
``waiting``         an attempt found the lease held by another  holder, ``expires_in``
``acquired``        a new grant was written (not a reentry)     token, ``waited``, ``valid_for``
``renewed``         a renewal was confirmed                     latency, ``valid_for``
``renewal_failed``  a renewal attempt confirmed nothing         cause, ``time_left``
``lost``            the grant was lost                          cause
``released``        the last hold ended without a loss          ``held``, whether it was written
``key_failed``      a key's ``fn`` of run_partitioned raised    key, error, ``failures`` in a
                    (told with the key's lease)                 row, ``retry_in`` (None: the
                                                                member ends)
==================  ==========================================  ==============================

Durations are seconds on the lease's monotonic clock; ``valid_for`` and ``time_left`` count to
the holder's deadline. Observers run inline in the lease's task and must not block or await:
keep them to counters, gauges, queues and timestamps (an observer that needs I/O, such as
Kubernetes Events, queues the event and sends it from a task of its own). An observer that
raises is logged and skipped; it never changes what the lease does.

Register one for every lease of the process with :func:`add_observer`, or for one lease with
``Lease(..., observers=[...])``. Without observers, each step costs one truth test.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

__all__ = [
    "LeaseInfo",
    "LeaseObserver",
    "add_observer",
    "notify",
    "observers_of",
    "remove_observer",
]

logger = logging.getLogger("trio_lease")

#: Observers of every lease in the process (:func:`add_observer`).
_everywhere: list[LeaseObserver] = []


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseInfo:
    """Which lease an observer is told about."""

    #: The lease name.
    name: str
    #: The owner name given to the :class:`~trio_lease.Lease`.
    owner: str
    #: The holder identity it writes (owner plus incarnation id).
    identity: str


class LeaseObserver:
    """Hooks the core calls; each is a no-op here: override the ones you need."""

    def waiting(self, lease: LeaseInfo, *, holder: str, expires_in: float) -> None:
        """An attempt found the lease held by ``holder`` (``?`` if unreadable); it may expire
        in ``expires_in`` seconds if the holder stops renewing."""

    def acquired(
        self, lease: LeaseInfo, *, fencing_token: int, waited: float, valid_for: float
    ) -> None:
        """A new grant with ``fencing_token``, after waiting ``waited`` seconds for it; it is
        valid ``valid_for`` seconds unless renewed."""

    def renewed(
        self, lease: LeaseInfo, *, fencing_token: int, latency: float, valid_for: float
    ) -> None:
        """A renewal was confirmed after ``latency`` seconds; the grant is valid ``valid_for``."""

    def renewal_failed(
        self, lease: LeaseInfo, *, fencing_token: int, cause: str, time_left: float
    ) -> None:
        """A renewal attempt confirmed nothing (``cause``); ``time_left`` to the deadline."""

    def lost(self, lease: LeaseInfo, *, fencing_token: int, cause: str) -> None:
        """The grant was lost (taken over, deleted, or its deadline passed)."""

    def released(self, lease: LeaseInfo, *, fencing_token: int, held: float, written: bool) -> None:
        """The grant ended without a loss after ``held`` seconds; ``written``: the release
        was written (else it expires after the heartbeat timeout)."""

    def key_failed(
        self,
        lease: LeaseInfo,
        *,
        key: str,
        error: Exception,
        failures: int,
        retry_in: float | None,
    ) -> None:
        """``fn`` of :func:`~trio_lease.run_partitioned` raised ``error`` for ``key`` (whose
        lease is ``lease``), its ``failures``-th error in a row; the key runs again in
        ``retry_in`` seconds on this member, or (None, ``stop_on_error``) the member ends."""


def add_observer(observer: LeaseObserver) -> None:
    """Tell ``observer`` about every lease of this process (from their next step on)."""
    if not isinstance(observer, LeaseObserver):
        raise TypeError(f"an observer must be a trio_lease.LeaseObserver, got {observer!r}")
    if observer not in _everywhere:
        _everywhere.append(observer)


def remove_observer(observer: LeaseObserver) -> None:
    """Stop telling ``observer`` (added by :func:`add_observer`); no error if it was not."""
    if observer in _everywhere:
        _everywhere.remove(observer)


def observers_of(own: Iterable[LeaseObserver]) -> tuple[LeaseObserver, ...]:
    """Check a lease's own observers (the ``observers`` argument)."""
    checked = tuple(own)
    for observer in checked:
        if not isinstance(observer, LeaseObserver):
            raise TypeError(f"an observer must be a trio_lease.LeaseObserver, got {observer!r}")
    return checked


def notify(own: tuple[LeaseObserver, ...], step: str, lease: LeaseInfo, **details: object) -> None:
    """Call ``step`` on the lease's own observers and on every process-wide one.

    Callers test ``own or everywhere()`` first, so a lease nobody observes pays nothing more.
    """
    for observer in (*own, *_everywhere):
        try:
            getattr(observer, step)(lease, **details)
        except Exception:  # an observer is the user's code: its bug is logged, the lease goes on
            logger.exception("lease %r: observer %r failed in %s", lease.name, observer, step)


def everywhere() -> bool:
    """True when a process-wide observer is registered."""
    return bool(_everywhere)
