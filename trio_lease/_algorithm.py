"""Pure lease decisions: records and local monotonic time in, decisions out. No I/O, no sleeping.

Everything that makes a lease safe is decided here, so it can be tested table-driven without an
event loop (tests/core/test_algorithm.py):

- A contender treats a held record as expired only after it has observed the *same version*
  unchanged for L (or the record's own ``lease_duration`` if larger) on its own monotonic clock,
  counted from when the read that first showed that version returned (docs/design.md §4.1). The
  record's wall-clock timestamps are never compared with anything.
- Every new grant gets ``fencing_token = previous + 1``; renewals keep it (§4.3).
- The holder's deadline is anchored at the *send* time of its last confirmed write (§4.2): the
  write committed no earlier than it was sent, and a contender counts L from no earlier than the
  commit, so the holder always stops first.
- A record naming our identity is ours only if its token is the one we were granted.
- A free record reserved for a handover (``handover_to`` names another contender) is treated
  like a held one: others wait until its version has stood for L; the one named takes it at once.
- An unreadable record (:attr:`LeaseRecord.unreadable`) is held by an unknown holder: never free,
  never ours. It may be taken over after the same version has stood for L, and never when its
  fencing token could not be read (the next token would not be known to be greater).
- A write counts as done only when the record the backend returns shows what we wrote
  (:func:`echo_problem`); anything else is an unknown outcome, resolved by reading again.
- A holder's next renewal is due R after its last send, rounded down to a multiple of R/32
  (:func:`next_renewal`): early is safe, and holders of one process share wake-ups.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime

from ._abc import LeaseRecord
from ._settings import LeaseSettings

__all__ = [
    "Busy",
    "Observation",
    "Write",
    "decide_acquire",
    "echo_problem",
    "expires_in",
    "holder_deadline",
    "observe",
    "release_record",
    "renewal",
    "request_bound",
    "still_ours",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Observation:
    """A record version and the local monotonic time the first read showing it returned."""

    version: str
    since: float


#: What :class:`Busy` and ``Lease.holder()`` report for a record that could not be read.
UNKNOWN_HOLDER = "(unknown: the record is unreadable)"


@dataclasses.dataclass(frozen=True, slots=True)
class Busy:
    """Another owner holds the lease; a takeover is possible in ``expires_in`` seconds at best.

    ``unreadable`` says what could not be read when the holder is unknown; ``expires_in`` is
    infinite when the record can never be taken over (its fencing token is unreadable).
    """

    holder: str
    expires_in: float
    unreadable: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Write:
    """Write ``record`` as a new grant; ``expected_version`` None means create."""

    record: LeaseRecord
    expected_version: str | None


def observe(
    previous: Observation | None, record: LeaseRecord | None, now: float
) -> Observation | None:
    """The observation after a read of ``record`` that returned at local time ``now``.

    The countdown restarts only when the version changes; re-reading the same version keeps the
    earlier start, so polling does not postpone expiry.
    """
    if record is None:
        return None
    if previous is not None and previous.version == record.version:
        return previous
    return Observation(record.version, now)


def expires_in(
    record: LeaseRecord, observation: Observation | None, now: float, settings: LeaseSettings
) -> float:
    """Seconds until a contender may take ``record`` over (0 when free or already expired)."""
    if record.is_free:
        return 0.0
    return _countdown(record, observation, now, settings)


def _countdown(
    record: LeaseRecord, observation: Observation | None, now: float, settings: LeaseSettings
) -> float:
    """Seconds until ``record``'s version has stood unchanged for L (or its own duration)."""
    if observation is None or observation.version != record.version:
        # Never seen this version before: the countdown starts now.
        observation = Observation(record.version, now)
    wait = max(settings.heartbeat_timeout, record.lease_duration)
    return max(0.0, observation.since + wait - now)


def _grant(
    name: str, identity: str, previous_token: int, settings: LeaseSettings, wall_now: datetime
) -> LeaseRecord:
    return LeaseRecord(
        name=name,
        holder=identity,
        lease_duration=settings.heartbeat_timeout,
        fencing_token=previous_token + 1,
        acquired_at=wall_now,
        renewed_at=wall_now,
    )


def decide_acquire(
    record: LeaseRecord | None,
    *,
    name: str,
    identity: str,
    observation: Observation | None,
    now: float,
    settings: LeaseSettings,
    wall_now: datetime,
    token_floor: int = 0,
) -> Busy | Write:
    """Decide what an acquire attempt does after reading ``record``.

    The caller has already checked that it holds no live grant of this lease in this process
    (reentrancy is resolved before reading). So a record naming our own identity is a leftover
    of ours (a write whose outcome we never learned, a crashed scope): take it as a new grant.

    ``token_floor`` is the highest fencing token the caller has seen on this lease: a new grant's
    token is above it even if the record read shows a lower one (a reply that dropped the token
    must not make a token repeat).
    """
    if record is None:
        return Write(_grant(name, identity, token_floor, settings, wall_now), None)
    busy = _busy(record, identity, observation, now, settings)
    if busy is not None:
        return busy
    previous = max(record.fencing_token, token_floor)
    return Write(_grant(name, identity, previous, settings, wall_now), record.version)


def _busy(
    record: LeaseRecord,
    identity: str,
    observation: Observation | None,
    now: float,
    settings: LeaseSettings,
) -> Busy | None:
    """Whom ``record`` keeps ``identity`` waiting for and how long; None: it may take it."""
    if record.unreadable:
        remaining = expires_in(record, observation, now, settings)
        if record.fencing_token < 0:
            remaining = math.inf  # no token to continue from: fencing forbids a takeover
        return Busy(UNKNOWN_HOLDER, remaining, record.unreadable) if remaining > 0 else None
    if record.is_free and record.handover_to not in ("", identity):
        # Released for a handover to someone else: theirs until the record stood for L.
        remaining = _countdown(record, observation, now, settings)
        return Busy(f"{record.handover_to} (handover)", remaining) if remaining > 0 else None
    if record.is_free or record.holder == identity:
        return None
    remaining = expires_in(record, observation, now, settings)
    return Busy(record.holder, remaining) if remaining > 0 else None


def renewal(current: LeaseRecord, wall_now: datetime) -> LeaseRecord:
    """The record a renewal writes: same holder and token, a fresh ``renewed_at``."""
    # Every field by position (dataclasses.replace reads the fields anew each call, twice the
    # cost, once per renewal); tests/core/test_algorithm.py checks that none is missed.
    return LeaseRecord(
        current.name,
        current.holder,
        current.lease_duration,
        current.fencing_token,
        current.acquired_at,
        wall_now,
        current.version,
        current.unreadable,
        current.handover_to,
    )


def release_record(current: LeaseRecord, wall_now: datetime) -> LeaseRecord:
    """The record a release writes: no holder, the token kept so fencing continues from it."""
    return dataclasses.replace(current, holder="", lease_duration=1.0, renewed_at=wall_now)


def still_ours(record: LeaseRecord | None, identity: str, token: int) -> bool:
    """Whether ``record`` still shows the grant ``token`` held by ``identity``."""
    return (
        record is not None
        and not record.unreadable
        and record.holder == identity
        and record.fencing_token == token
    )


def echo_problem(stored: object, written: LeaseRecord, expected_version: str | None) -> str:
    """What is wrong with the record a backend returned for a write of ``written`` ("" if none).

    A write is confirmed only by an echo that shows it: the same name, holder and fencing token,
    at least the lease duration we wrote (a backend may round it up, never down), and a new
    version. A server that answers with someone else's record, an empty one or the old version
    has not shown that our write landed: the outcome is unknown and a fresh read decides.
    """
    if not isinstance(stored, LeaseRecord):
        return f"the backend returned {type(stored).__name__}, not a LeaseRecord"
    if stored.unreadable:
        return f"the returned record is unreadable ({stored.unreadable})"
    differences = []
    if stored.name != written.name:
        differences.append("name")
    if stored.holder != written.holder:
        differences.append("holder")
    if stored.fencing_token != written.fencing_token:
        differences.append("fencing token")
    if not stored.lease_duration >= written.lease_duration - 1e-9:
        differences.append("lease duration")
    if not stored.version or stored.version == expected_version:
        differences.append("version (a write must produce a new one)")
    if differences:
        return "the returned record differs from what was written in " + ", ".join(differences)
    return ""


def holder_deadline(send_time: float, settings: LeaseSettings) -> float:
    """When the holder stops believing: D after *sending* its last confirmed write."""
    return send_time + settings.deadline


def request_bound(now: float, deadline: float, settings: LeaseSettings) -> float:
    """How long a holder's request may take: min(T, time left to its deadline)."""
    return min(settings.lease_operation_timeout, deadline - now)


#: Renewals fall due on a grid of R divided by this (:func:`next_renewal`).
RENEWAL_TICKS = 32


def next_renewal(last_send: float, settings: LeaseSettings) -> float:
    """When the next renewal is due: ``last_send + R`` rounded down to a multiple of R/32.

    At most R/32 earlier than ``last_send + R`` and never later (but for the float rounding
    below, a millionth of a tick), so never less safe: the deadline counts from the send.
    Every holder of a process with the same R renews on the same grid, so one wake-up of the
    event loop starts many renewals instead of one each; a process that sleeps between
    renewals pays for every wake-up, more the longer it slept (tools/benchmarks/README.md,
    "Design measurements": at R = 3 s and 1,000 leases, a quarter to a third less CPU per
    renewal). After a renewal sent on the grid, ``last_send + R`` is on it too, so a holder
    still renews every R. A value within a millionth of a tick of a multiple counts as on it:
    float division must not turn R into R − R/32.
    """
    return _grid_at_or_before(last_send + settings.heartbeat_interval, settings)


def _grid_at_or_before(at: float, settings: LeaseSettings) -> float:
    """The last instant of the renewal grid (multiples of R/32) at or before ``at``, but for
    the float rounding of a value within a millionth of a tick of one (taken as on it)."""
    tick = settings.heartbeat_interval / RENEWAL_TICKS
    ticks = at / tick
    nearest = round(ticks)
    return nearest * tick if abs(ticks - nearest) < 1e-6 else math.floor(ticks) * tick


def watch_instant(deadline: float, now: float, settings: LeaseSettings) -> float:
    """When a holder's watchdog wakes next, at ``now``: the latest instant of the renewal grid
    (:func:`next_renewal`'s) at or before ``deadline`` if it is still ahead, else ``deadline``.

    The watchdog only has to act at the deadline; while renewals move the deadline on, each
    wake-up just reads it again. Waking on the grid shares one loop timer with the holders
    (and other watchdogs) due then, instead of a timer of its own for every wake-up, about
    one per lease duration per held lease, whose objects outlive the garbage collector's
    middle generation; near the deadline it sleeps until the deadline itself, so a loss is
    declared exactly when it was before.
    """
    instant = _grid_at_or_before(deadline, settings)
    return instant if now < instant <= deadline else deadline
