"""The waiting line: while ``trio-lease run`` waits, say on stderr what it is waiting for.

One of: who holds the lease and for how long (by the record's wall-clock ``acquired_at``; a
silent holder expires ``heartbeat_timeout`` after its last renewal), that its record is
unreadable (and whether it can ever be taken over), or that the backend has been failing, for
how long and why; each says how long this run has waited. A change is reported within
:data:`REPORT_CHECK`; an unchanged line is repeated every :data:`REPORT_EVERY`.
"""

from __future__ import annotations

import math
import sys
from datetime import UTC, datetime

import anyio

from .._lease import Lease
from .._settings import LeaseSettings

__all__ = ["REPORT_CHECK", "REPORT_EVERY", "report_waiting", "waiting_line"]

#: How often the waiting line is refreshed when nothing changed (seconds); a change (another
#: holder, the backend failing or answering again) is reported within REPORT_CHECK.
REPORT_EVERY = 30.0
REPORT_CHECK = 0.5


def _seconds(value: float) -> str:
    """A duration for people: 42 s, 3 min 5 s, 2 h 10 min."""
    value = max(0, round(value))
    if value < 60:
        return f"{value} s"
    if value < 3600:
        return f"{value // 60} min {value % 60} s"
    return f"{value // 3600} h {value % 3600 // 60} min"


def waiting_line(
    lease: Lease, settings: LeaseSettings, waited: float | None = None
) -> tuple[str, str] | None:
    """(what kind of wait, the line to print) for a waiting ``lease``; None: nothing known yet.

    ``waited``: how long this run has waited so far, shown in the line when given.
    """
    name = repr(lease.name) if waited is None else f"{lease.name!r} ({_seconds(waited)} so far)"
    error = lease.last_error
    since = lease.failing_since
    if error is not None and since is not None:
        failing = anyio.current_time() - since
        return (
            f"failing:{error}",
            f"trio-lease: waiting for {name}: the backend has been failing for "
            f"{failing:.0f} s: {error}",
        )
    holder = lease.holder()
    if holder is None:
        return None
    record = lease.last_record
    if record is not None and record.unreadable:
        never = record.fencing_token < 0
        return (
            f"unreadable:{record.version}",
            f"trio-lease: waiting for {name}: its record is unreadable "
            f"({record.unreadable}); "
            + (
                "it is never taken over (its fencing token is unreadable): fix or delete it"
                if never
                else f"it may be taken over once unchanged for {settings.heartbeat_timeout:g} s"
            ),
        )
    held = ""
    if record is not None and record.acquired_at is not None:  # the holder's wall clock
        held = f" for {_seconds((datetime.now(UTC) - record.acquired_at).total_seconds())}"
    return (
        f"held:{holder}",
        f"trio-lease: waiting for {name}, held by {holder!r}{held} (a silent holder "
        f"expires {settings.heartbeat_timeout:g} s after its last renewal)",
    )


async def report_waiting(lease: Lease, settings: LeaseSettings, scope: anyio.CancelScope) -> None:
    """Print the waiting line for ``lease`` until ``scope`` is cancelled (the lease is held)."""
    with scope:
        await _report_loop(lease, settings)


async def _report_loop(lease: Lease, settings: LeaseSettings) -> None:
    last_kind: str | None = None
    last_at = -math.inf
    started = anyio.current_time()
    while True:
        await anyio.sleep(REPORT_CHECK)
        line = waiting_line(lease, settings, anyio.current_time() - started)
        if line is None:
            continue
        kind, text = line
        now = anyio.current_time()
        if kind != last_kind or now - last_at >= REPORT_EVERY:
            print(text, file=sys.stderr)
            last_kind, last_at = kind, now
