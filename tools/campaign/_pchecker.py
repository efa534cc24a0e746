"""The partitioned mode's checker: pure functions from a run's logs to its verdict.

Inputs are the member events (``start``/``end`` with ``key``, ``token`` and ``identity``;
``ready``; ``member`` with the identity the process joins the group as; ``stall`` when the
member's own event loop ran late; the harness's
``killed``/``gone``; each with its ``slot``), the fencing store's write log (one resource per
key) and the nemesis log, all on the system-wide monotonic clock.

Rules:

1. Per key, belief intervals (``start`` → ``end``; a SIGKILL ends every interval of the killed
   process) of different grants must not overlap, unless the stale one (the lower token) was
   paused beyond the safety margin during it, or from the newer grant's start when the stale
   body started later: the same rule, and the same explanations (an injected pause, or a stall
   the stale member observed itself, beyond the margin), as the lease mode's checker.
2. Per key, grant tokens strictly increase in the order the grants started, and no token is
   granted to two identities; per key, the store never accepts a write below one it accepted.
   A lower token whose body started after a higher one's is no violation when its runner was
   paused (or stalled) beyond the margin from the higher grant's start on (it was granted
   earlier; its first statement ran after it resumed).
3. No key is left unrun for longer than ``L + bound`` while a member is alive: between the
   first member's ``ready`` + ``L + bound`` (the start-up) and ``stop`` (when the harness began
   stopping the members), every stretch in which no member ran the key, counted only while at
   least one member process was alive and the store was not out for everyone, is at most
   ``L + bound``. A store-wide outage is an episode of one of ``outage_kinds``, from its start
   to L after its end (the leases it cost must expire before they are granted again): on
   SQLite a member SIGSTOPped inside a write transaction keeps the file's write lock, so every
   member's writes wait, and every member may lose its keys, until it resumes. A fault episode
   that hits the member the assignment gives the key to (:func:`assignee_faults`) cuts the
   key's stretch: the episode's time is not counted and the key's clock starts again at its
   end, since the member that must start the key cannot while it is killed, stopped or cut
   off, and the others may not until the group drops it. A fault on another member, or none,
   leaves the clock running.
4. A run must bite: at least one key moved, and at least one fault was injected.

A *move* is two consecutive grants of one key (by start) to different identities.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trio_lease._partitioned import assign

from ._checker import (
    Counts,
    Interval,
    _explained,
    count_stalls,
    judge_overlap,
    judge_writes,
    stall_episodes,
)

__all__ = [
    "GrantsReport", "PartitionedReport", "assignee_faults", "check_partitioned", "covered",
    "judge_grants", "key_intervals", "merge_spans", "subtract_spans",
]


@dataclasses.dataclass
class GrantsReport(Counts):
    """What the modes of many leases count besides: moves, and late starts a pause explains."""

    moves: int = 0
    #: grants whose body started after a newer grant's, explained by a pause of their runner
    late_starts_explained: int = 0


@dataclasses.dataclass
class PartitionedReport(GrantsReport):
    """The verdict of one partitioned run."""

    keys: int = 0
    longest_unrun: float = 0.0  # seconds, counted while a member was alive
    unrun_limit: float = 0.0  # L + bound
    unrun_restarted: int = 0  # unrun stretches cut by a fault on the key's assignee


def key_intervals(
    events: Iterable[Mapping[str, Any]], run_end: float
) -> dict[str, list[Interval]]:
    """Belief intervals per key from the member events (in time order)."""
    by_key: dict[str, list[Interval]] = {}
    current: dict[tuple[int, str], Interval] = {}
    pid_of: dict[int, object] = {}  # slot -> pid of its current process
    for event in events:
        slot, kind, t = int(event["slot"]), event["ev"], float(event["t"])
        if kind == "start":
            key = str(event["key"])
            interval = Interval(slot, str(event["identity"]), int(event["token"]), t, run_end)
            current[(slot, key)] = interval
            by_key.setdefault(key, []).append(interval)
        elif kind == "end":
            done = current.pop((slot, str(event["key"])), None)
            if done is not None:
                done.end = t
                done.outcome = "ended"
        elif kind == "ready":
            pid_of[slot] = event.get("pid")
        elif kind in ("killed", "gone"):  # the process died: its beliefs died with it
            pid = event.get("pid")
            if pid is not None and pid_of.get(slot) not in (None, pid):
                continue  # an earlier incarnation's exit, reported late
            for slot_key in [sk for sk in current if sk[0] == slot]:
                open_one = current.pop(slot_key)
                open_one.end = t
                open_one.outcome = "killed"
    return by_key


def _alive_spans(events: Sequence[Mapping[str, Any]], run_end: float) -> list[tuple[float, float]]:
    """When at least one member process was alive (``ready`` → ``killed``/``gone``), merged."""
    spans: list[tuple[float, float]] = []
    since: dict[int, float] = {}
    pid_of: dict[int, object] = {}
    for event in events:
        slot, kind, t = int(event["slot"]), event["ev"], float(event["t"])
        if kind == "ready":
            since.setdefault(slot, t)
            pid_of[slot] = event.get("pid")
        elif kind in ("killed", "gone") and slot in since:
            pid = event.get("pid")
            if pid is not None and pid_of.get(slot) not in (None, pid):
                continue
            spans.append((since.pop(slot), t))
    spans.extend((t, run_end) for t in since.values())
    return merge_spans(spans)


def _incarnations(events: Sequence[Mapping[str, Any]]) -> list[tuple[int, str, float, float]]:
    """Each member process that logged its identity (``member``), as (slot, identity, since,
    until): from that event to its kill or exit (infinity while it lives)."""
    spans: list[list[Any]] = []
    open_one: dict[int, list[Any]] = {}
    pid_of: dict[int, object] = {}
    for event in events:
        slot, kind, t = int(event["slot"]), event["ev"], float(event["t"])
        if kind == "ready":
            pid_of[slot] = event.get("pid")
        elif kind == "member":
            open_one[slot] = [slot, str(event["identity"]), t, float("inf")]
            spans.append(open_one[slot])
        elif kind in ("killed", "gone") and slot in open_one:
            pid = event.get("pid")
            if pid is not None and pid_of.get(slot) not in (None, pid):
                continue
            open_one.pop(slot)[3] = t
    return [(int(a), str(b), float(c), float(d)) for a, b, c, d in spans]


def assignee_faults(
    events: Sequence[Mapping[str, Any]],
    nemesis: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    heartbeat_timeout: float,
) -> dict[str, list[tuple[float, float]]]:
    """Per key, the fault episodes (``t0``, ``t1``) that hit the member the assignment gave
    the key to when the episode began, merged.

    The assignment is :func:`trio_lease.assign` over the members at ``t0``: every process
    that logged its identity and was alive then, or died less than L before (its record in
    the group stands until it expires). The member hit is the target slot's live process.
    """
    lives = _incarnations(events)
    memo: dict[frozenset[str], dict[str, list[str]]] = {}
    hits: dict[str, list[tuple[float, float]]] = {}
    for episode in nemesis:
        target = episode.get("target")
        if target is None:
            continue
        t0, t1 = float(episode["t0"]), float(episode["t1"])
        hit = [who for slot, who, since, until in lives
               if slot == int(target) and since <= t0 < until]
        if not hit:
            continue
        members = frozenset(who for _slot, who, since, until in lives
                            if since <= t0 < until + heartbeat_timeout)
        if members not in memo:
            memo[members] = assign(keys, sorted(members))
        for key in memo[members].get(hit[-1], []):
            hits.setdefault(key, []).append((t0, t1))
    return {key: merge_spans(spans) for key, spans in hits.items()}


def merge_spans(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def subtract_spans(
    spans: Sequence[tuple[float, float]], holes: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The (merged) spans without the (merged) holes."""
    result: list[tuple[float, float]] = []
    for start, end in spans:
        cursor = start
        for hole_start, hole_end in holes:
            if hole_end <= cursor or hole_start >= end:
                continue
            if hole_start > cursor:
                result.append((cursor, hole_start))
            cursor = max(cursor, hole_end)
        if cursor < end:
            result.append((cursor, end))
    return result


def covered(spans: Sequence[tuple[float, float]], t0: float, t1: float) -> float:
    """How much of [t0, t1] the (merged) spans cover."""
    return sum(max(0.0, min(end, t1) - max(start, t0)) for start, end in spans)


def judge_grants(
    report: GrantsReport,
    what: str,
    intervals: Sequence[Interval],
    nemesis: Sequence[Mapping[str, Any]],
    stalls: Sequence[Mapping[str, Any]],
    margin: float,
) -> list[tuple[Interval, Interval]]:
    """Rules 1 and 2 for one resource granted by one lease (a key, a semaphore slot): its belief
    intervals (sorted by start) must not overlap unexplained, its tokens must increase with one
    identity each. Counts into ``report`` (``overlaps``, ``overlaps_explained``,
    ``overlaps_explained_by_stall``, ``late_starts_explained``, ``moves``, ``violations``);
    returns the explained overlaps as (stale, fresh)."""
    explaining = [*nemesis, *stalls]
    excused: list[tuple[Interval, Interval]] = []
    # 1. Overlapping beliefs of one resource.
    for i, first in enumerate(intervals):
        for second in intervals[i + 1 :]:
            if second.start >= first.end:
                break
            report.overlaps += 1
            stale, fresh, verdict = judge_overlap(first, second, nemesis, margin, stalls)
            if verdict in ("explained", "stalled"):
                report.overlaps_explained += 1
                report.overlaps_explained_by_stall += verdict == "stalled"
                excused.append((stale, fresh))
                continue
            overlap = min(first.end, second.end) - second.start
            report.violations.append(
                f"{what}: overlap of {overlap * 1000:.1f} ms: w{stale.slot} (token "
                f"{stale.token}, {stale.start:.3f}-{stale.end:.3f}) and w{fresh.slot} "
                f"(token {fresh.token}, from {fresh.start:.3f}); no pause or stall explains it"
            )
    # 2. Tokens strictly increase per resource, one identity per token.
    owner_of: dict[int, str] = {}
    for previous, following in itertools.pairwise(intervals):
        if following.token < previous.token and _explained(
            following, explaining, margin, since=previous.start
        ):
            # Granted before ``previous``; its runner was stopped when ``previous`` began,
            # so its body's first statement ran after it resumed (rule 1 judges the overlap).
            report.late_starts_explained += 1
        elif following.token <= previous.token:
            report.violations.append(
                f"{what}: grant to {following.identity} at {following.start:.3f} has "
                f"token {following.token}, not above {previous.token} of "
                f"{previous.identity}'s earlier grant"
            )
        if following.identity != previous.identity:
            report.moves += 1
    for interval in intervals:
        other = owner_of.setdefault(interval.token, interval.identity)
        if other != interval.identity:
            report.violations.append(
                f"{what}: token {interval.token} granted to two identities: {other} and "
                f"{interval.identity}"
            )
    return excused


def check_partitioned(
    *,
    events: Sequence[Mapping[str, Any]],
    writes: Sequence[Mapping[str, Any]],
    nemesis: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    margin: float,
    heartbeat_timeout: float,
    bound: float,
    stop: float,
    run_end: float,
    outage_kinds: frozenset[str] = frozenset(),
) -> PartitionedReport:
    """Judge one partitioned run (see the module docstring for the rules)."""
    report = PartitionedReport(keys=len(keys), unrun_limit=heartbeat_timeout + bound)
    report.faults_by_kind = dict(Counter(str(e["kind"]) for e in nemesis))
    by_key = key_intervals(events, run_end)
    stalls = stall_episodes(events)
    count_stalls(report, stalls)
    report.grants = sum(len(v) for v in by_key.values())
    outages = merge_spans(
        (float(e["t0"]), float(e["t1"]) + heartbeat_timeout)
        for e in nemesis if e["kind"] in outage_kinds
    )
    alive = subtract_spans(_alive_spans(events, run_end), outages)
    readies = [float(e["t"]) for e in events if e["ev"] == "ready"]
    window_start = (min(readies) if readies else run_end) + report.unrun_limit
    cut = assignee_faults(events, nemesis, keys, heartbeat_timeout)

    for key in sorted(set(keys) | set(by_key)):
        intervals = sorted(by_key.get(key, []), key=lambda i: i.start)
        judge_grants(report, f"key {key}", intervals, nemesis, stalls, margin)
        # 3. Unrun stretches while a member is alive.
        running = merge_spans((i.start, i.end) for i in intervals)
        cursor = window_start
        gaps: list[tuple[float, float]] = []
        for start, end in running:
            if start > cursor:
                gaps.append((cursor, min(start, stop)))
            cursor = max(cursor, end)
        if cursor < stop:
            gaps.append((cursor, stop))
        for t0, t1 in gaps:
            # A fault on the key's assignee restarts the key's clock when it ends.
            pieces = subtract_spans([(t0, t1)], cut.get(key, []))
            if pieces != [(t0, t1)]:
                report.unrun_restarted += 1
            for p0, p1 in pieces:
                unrun = covered(alive, p0, p1)
                report.longest_unrun = max(report.longest_unrun, unrun)
                if unrun > report.unrun_limit:
                    report.violations.append(
                        f"key {key}: unrun for {unrun:.2f} s ({p0:.3f}-{p1:.3f}) while a "
                        f"member was alive and the store up, more than L + bound = "
                        f"{report.unrun_limit:.2f} s"
                    )

    # The store: accepted tokens never go down, per key, in apply order.
    tally = judge_writes(writes, prefix="key {r}: ")
    report.writes_accepted = tally.accepted
    report.stale_rejected, report.stale_accepted = tally.stale_rejected, tally.stale_accepted
    report.violations.extend(tally.violations)

    report.losses = sum(1 for e in events if e["ev"] == "lost")
    report.errors = sum(1 for e in events if e["ev"] == "error")
    if report.moves == 0:
        report.bite_failures.append("no key moved")
    if not nemesis:
        report.bite_failures.append("no fault was injected")
    return report
