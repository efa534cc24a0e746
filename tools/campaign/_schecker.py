"""The semaphore mode's checker: pure functions from a run's logs to its verdict.

Inputs are the worker events (``want`` when a worker starts waiting; ``start``/``end`` with
``sem_slot``, ``token`` and ``identity``; ``error``, ``lost``, ``exit``; ``ready``; ``stall``
when the worker's own event loop ran late; the harness's ``killed``/``gone``; each with the
worker's ``slot``), the fencing store's write log (one resource per semaphore slot,
``slot<i>``) and the nemesis log, all on the system-wide monotonic clock.

Rules:

1. Per semaphore slot, the partitioned checker's rules 1 and 2
   (:func:`~tools.campaign._pchecker.judge_grants`): belief intervals (``start`` → ``end``; a
   SIGKILL ends every interval of the killed process) of different grants must not overlap
   unless the stale one was paused (or stalled) beyond the safety margin, and the slot's tokens
   strictly increase with one identity each.
2. At most ``limit`` holders: every grant's slot is below the limit, and at no moment are more
   than ``limit`` belief intervals open. A stale interval whose overlap rule 1 explained counts
   only until the fresh grant's start: from then on it is the paused holder fencing is for.
3. The fencing store never accepts, for a slot, a token below one it accepted for that slot.
4. No waiter starves: each wait (``want`` → the same process's next ``start``; ended without a
   grant by its ``error``, its process's death or exit, or the harness stopping the workers)
   lasts at most ``L + bound`` of counted time. Not counted: the time the store was out for
   everyone (an episode of ``outage_kinds`` from its start to L after its end) and the time
   the waiter's own event loop stalled. A fault episode aimed at the waiter itself (killed,
   stopped, partitioned) restarts its clock at the episode's end: it could not ask meanwhile,
   and its reservation may have lapsed; once back it must ask again and be served in time.
5. A run must bite: at least one slot moved, one wait was granted, and a fault was injected.

A *move* is two consecutive grants of one slot (by start) to different identities.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ._checker import Interval, count_stalls, judge_writes, stall_episodes
from ._pchecker import (
    GrantsReport,
    covered,
    judge_grants,
    key_intervals,
    merge_spans,
    subtract_spans,
)

__all__ = ["SemaphoreReport", "Wait", "check_semaphore", "waits_from_events"]


@dataclasses.dataclass
class SemaphoreReport(GrantsReport):
    """The verdict of one semaphore run."""

    limit: int = 0
    most_at_once: int = 0  # the most belief intervals open at once (rule 2)
    waits: int = 0  # waits that ended in a grant
    longest_wait: float = 0.0  # seconds of counted time (rule 4)
    wait_limit: float = 0.0  # L + bound
    waits_restarted: int = 0  # waits whose clock a fault on the waiter restarted


@dataclasses.dataclass
class Wait:
    """One wait of worker ``slot``: from ``want`` at ``start`` to ``end``."""

    slot: int
    start: float
    end: float
    granted: bool


def waits_from_events(events: Sequence[Mapping[str, Any]], stop: float) -> list[Wait]:
    """The workers' waits (events in time order), each ended by its grant, its ``error``, its
    process's death or exit, or ``stop``; waits begun after ``stop`` are left out."""
    result: list[Wait] = []
    since: dict[int, float] = {}
    pid_of: dict[int, object] = {}
    for event in events:
        slot, kind, t = int(event["slot"]), event["ev"], float(event["t"])
        if kind == "ready":
            pid_of[slot] = event.get("pid")
        elif kind == "want":
            since[slot] = t
        elif kind == "start" and slot in since:
            result.append(Wait(slot, since.pop(slot), t, granted=True))
        elif kind in ("error", "lost", "exit") and slot in since:
            result.append(Wait(slot, since.pop(slot), t, granted=False))
        elif kind in ("killed", "gone") and slot in since:
            pid = event.get("pid")
            if pid is not None and pid_of.get(slot) not in (None, pid):
                continue  # an earlier incarnation's exit, reported late
            result.append(Wait(slot, since.pop(slot), t, granted=False))
    result.extend(Wait(slot, t0, stop, granted=False) for slot, t0 in since.items())
    return [
        dataclasses.replace(wait, end=min(wait.end, stop)) for wait in result if wait.start < stop
    ]


def _most_at_once(
    intervals: Sequence[Interval], excused: Sequence[tuple[Interval, Interval]], limit: int
) -> tuple[int, list[tuple[float, list[Interval]]]]:
    """The most intervals open at once, and each moment (a start) at which more than
    ``limit`` were open, with those intervals; a stale interval of an explained overlap counts
    only until its fresh grant's start."""
    until: dict[int, float] = {}
    for stale, fresh in excused:
        until[id(stale)] = min(fresh.start, until.get(id(stale), fresh.start))
    ends = [min(i.end, until.get(id(i), i.end)) for i in intervals]
    points = sorted(
        [(i.start, 1, index) for index, i in enumerate(intervals)]
        + [(end, 0, index) for index, end in enumerate(ends)]
    )
    open_now: set[int] = set()
    most, over = 0, []
    for t, starts, index in points:  # ends before starts at one moment
        if not starts:
            open_now.discard(index)
            continue
        if ends[index] <= t:
            continue  # excused before it began
        open_now.add(index)
        most = max(most, len(open_now))
        if len(open_now) > limit:
            over.append((t, [intervals[j] for j in sorted(open_now)]))
    return most, over


def check_semaphore(
    *,
    events: Sequence[Mapping[str, Any]],
    writes: Sequence[Mapping[str, Any]],
    nemesis: Sequence[Mapping[str, Any]],
    limit: int,
    margin: float,
    heartbeat_timeout: float,
    bound: float,
    stop: float,
    run_end: float,
    outage_kinds: frozenset[str] = frozenset(),
) -> SemaphoreReport:
    """Judge one semaphore run (see the module docstring for the rules)."""
    report = SemaphoreReport(limit=limit, wait_limit=heartbeat_timeout + bound)
    report.faults_by_kind = dict(Counter(str(e["kind"]) for e in nemesis))
    stalls = stall_episodes(events)
    count_stalls(report, stalls)
    keyed = [
        {**e, "key": f"slot{e['sem_slot']}"} if e["ev"] in ("start", "end") else e
        for e in events
    ]
    by_slot = key_intervals(keyed, run_end)
    report.grants = sum(len(v) for v in by_slot.values())

    # 1. One holder per slot, tokens increasing per slot.
    excused: list[tuple[Interval, Interval]] = []
    for name in sorted(by_slot):
        intervals = sorted(by_slot[name], key=lambda i: i.start)
        excused += judge_grants(report, name, intervals, nemesis, stalls, margin)

    # 2. At most ``limit`` holders.
    for event in events:
        if event["ev"] == "start" and not 0 <= int(event["sem_slot"]) < limit:
            report.violations.append(
                f"w{event['slot']} was granted slot {event['sem_slot']} at {event['t']:.3f}, "
                f"outside 0..{limit - 1}"
            )
    everyone = [i for intervals in by_slot.values() for i in intervals]
    report.most_at_once, over = _most_at_once(everyone, excused, limit)
    for t, holders in over:
        who = ", ".join(f"w{i.slot} (token {i.token}, from {i.start:.3f})" for i in holders)
        report.violations.append(
            f"{len(holders)} holders at {t:.3f}, more than the limit {limit}: {who}"
        )

    # 3. The store: accepted tokens never go down, per slot, in apply order.
    tally = judge_writes(writes, prefix="{r}: ")
    report.writes_accepted = tally.accepted
    report.stale_rejected, report.stale_accepted = tally.stale_rejected, tally.stale_accepted
    report.violations.extend(tally.violations)

    # 4. No waiter starves.
    outages = merge_spans(
        (float(e["t0"]), float(e["t1"]) + heartbeat_timeout)
        for e in nemesis if e["kind"] in outage_kinds
    )
    for wait in waits_from_events(events, stop):
        on_waiter = merge_spans(
            (float(e["t0"]), float(e["t1"])) for e in nemesis if e.get("target") == wait.slot
        )
        stalled = merge_spans(
            (float(e["t0"]), float(e["t1"])) for e in stalls if e["target"] == wait.slot
        )
        pieces = subtract_spans([(wait.start, wait.end)], on_waiter)
        if pieces != [(wait.start, wait.end)]:
            report.waits_restarted += 1
        report.waits += wait.granted
        idle = merge_spans([*outages, *stalled])
        for p0, p1 in pieces:
            counted = (p1 - p0) - covered(idle, p0, p1)
            report.longest_wait = max(report.longest_wait, counted)
            if counted > report.wait_limit:
                outcome = "granted" if wait.granted else "still waiting"
                report.violations.append(
                    f"w{wait.slot} waited {counted:.2f} s ({p0:.3f}-{p1:.3f}, {outcome}) with "
                    f"the store up and no fault on it, more than L + bound = "
                    f"{report.wait_limit:.2f} s"
                )

    report.losses = sum(1 for e in events if e["ev"] == "lost")
    report.errors = sum(1 for e in events if e["ev"] == "error")
    if report.moves == 0:
        report.bite_failures.append("no slot moved")
    if report.waits == 0:
        report.bite_failures.append("no wait was granted")
    if not nemesis:
        report.bite_failures.append("no fault was injected")
    return report
