"""The checker: pure functions from a run's logs to its verdict (no I/O, no clocks).

Inputs, all stamped on the system-wide monotonic clock:

- worker events (``start``/``end``/``lost``/``released``, ``stall`` when the worker's own event
  loop ran late, and the harness's ``killed``/``gone`` when a process died; each with its
  ``slot``);
- the fencing store's write log, in the order the store applied the writes;
- the lease record history seen by the harness's watch (commit order);
- the nemesis log: one episode per fault (``kind``, ``target`` slot or None, ``t0``, ``t1``).

Rules (reliability.md §3.2):

1. Belief intervals (``start`` → ``end``; a SIGKILL ends one at the kill) of different grants
   must not overlap, unless the stale one (the lower token) was paused by a SIGSTOP longer than
   the safety margin, or ran on a clock skewed beyond the tolerated rate, during the interval
   (or from the newer grant's start, when the stale body started after it: a process stopped
   just after its grant runs its body's first statement after it resumes): those are the
   faults no lease can survive, which fencing exists for. A ``stall`` the stale worker observed
   itself (its event loop ran nothing for longer than the margin: the machine gave it no CPU)
   explains an overlap exactly like an injected pause of that length; a shorter one does not.
2. The store must never accept a write whose token is below one it accepted earlier.
3. Grant tokens strictly increase: every new grant in the record history has a token above
   all earlier ones, and no token is granted to two identities.
4. A run must bite: at least one handover, and when long pauses were injected between a
   holder's decision to write and its write (``pause-in-write``, not truncated by the end of the
   run, not missed), at least one stale write must have reached the store. A long pause
   elsewhere need not produce one: the library cancels the body when the holder resumes.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

__all__ = [
    "EXPLAINING_KINDS", "Counts", "Interval", "Report", "Verdict", "WriteTally", "check",
    "intervals_from_events", "judge_overlap", "judge_writes", "stall_episodes",
]

#: Faults that may legitimately make two holders believe at once (reliability.md §4.3).
EXPLAINING_KINDS = frozenset({"pause-long", "pause-in-write", "pause-waiter", "skew-beyond"})
#: Faults that cannot make a holder lose its lease (so they do not excuse a loss).
HARMLESS_KINDS = frozenset({"skew-within"})
#: How long after a long pause a stale write still counts as the pause's (seconds): a worker
#: stopped inside its blocking step (pause-in-write, 1 s) finishes that step after SIGCONT.
AFTER_PAUSE = 2.0
#: Long pauses of the holder (SIGSTOP beyond L).
PAUSE_KINDS = frozenset({"pause-long", "pause-in-write", "pause-waiter"})
#: A stretch in which a worker's own event loop ran nothing (self-observed, see
#: :func:`stall_episodes`): it explains like a pause, when it too is beyond the margin.
STALL = "stall"
#: Episodes that explain an overlap only when longer than the safety margin.
MARGIN_KINDS = PAUSE_KINDS | {STALL}


@dataclasses.dataclass
class Interval:
    """One belief interval: ``slot``'s process believed it held grant ``token``."""

    slot: int
    identity: str
    token: int
    start: float
    end: float
    outcome: str = "open"  # released, lost, killed, error or open (the run ended first)


class Verdict:
    """What every campaign report answers: clean, and serialisable for ``report.json``."""

    violations: list[str]
    bite_failures: list[str]

    @property
    def ok(self) -> bool:
        """No violation, and the faults bit."""
        return not self.violations and not self.bite_failures

    def to_dict(self) -> dict[str, Any]:
        fields: dict[str, Any] = dataclasses.asdict(cast(Any, self))  # subclasses are dataclasses
        return {**fields, "ok": self.ok}


@dataclasses.dataclass
class Counts(Verdict):
    """What every mode's report counts."""

    grants: int = 0
    faults_by_kind: dict[str, int] = dataclasses.field(default_factory=dict)
    overlaps: int = 0
    overlaps_explained: int = 0
    #: of those, explained only by the stale worker's self-observed stall (no injected fault)
    overlaps_explained_by_stall: int = 0
    stalls: int = 0  # stalls the workers logged (event loop late by more than 0.1 s)
    longest_stall: float = 0.0  # seconds
    writes_accepted: int = 0
    stale_rejected: int = 0
    stale_accepted: int = 0
    losses: int = 0
    errors: int = 0
    violations: list[str] = dataclasses.field(default_factory=list)
    bite_failures: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Report(Counts):
    """The verdict of one run."""

    handovers: int = 0
    handovers_by_kind: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Long pauses by "kind/loop" of the paused worker, and the stale writes that worker sent
    #: from the pause until AFTER_PAUSE seconds after it (the library should stop them after a
    #: pause-long; after a pause-in-write they are the point).
    pauses_by_loop: dict[str, int] = dataclasses.field(default_factory=dict)
    stale_after_pause: dict[str, int] = dataclasses.field(default_factory=dict)
    false_losses: int = 0


def _overlaps(t0: float, t1: float, u0: float, u1: float) -> bool:
    return t0 < u1 and u0 < t1


def intervals_from_events(events: Iterable[Mapping[str, Any]], run_end: float) -> list[Interval]:
    """Belief intervals from the worker events (in per-slot order)."""
    intervals: list[Interval] = []
    current: dict[int, Interval] = {}
    pid_of: dict[str, object] = {}  # identity -> pid, from the "ready" events
    for event in events:
        slot, kind, t = int(event["slot"]), event["ev"], float(event["t"])
        if kind == "start":
            interval = Interval(slot, str(event["identity"]), int(event["token"]), t, run_end)
            current[slot] = interval
            intervals.append(interval)
        elif kind == "end" and slot in current:
            current.pop(slot).end = t
        elif kind == "ready":
            pid_of[str(event["identity"])] = event.get("pid")
        elif kind in ("killed", "gone"):  # the process died: its belief died with it
            pid = event.get("pid")
            if slot in current and (pid is None or pid_of.get(current[slot].identity) == pid):
                open_one = current.pop(slot)
                open_one.end = t
                open_one.outcome = "killed"
        elif kind in ("released", "lost", "error"):
            done = _find(intervals, slot)
            if done is not None and done.outcome == "open" and slot not in current:
                done.outcome = kind
    return intervals


def _find(intervals: Sequence[Interval], slot: int) -> Interval | None:
    for interval in reversed(intervals):
        if interval.slot == slot:
            return interval
    return None


def stall_episodes(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The workers' ``stall`` events as episodes shaped like the nemesis log's (kind
    :data:`STALL`, the worker's slot as target, ``t0``, ``t1``)."""
    return [
        {"kind": STALL, "target": int(e["slot"]), "t0": float(e["t0"]), "t1": float(e["t1"])}
        for e in events if e["ev"] == STALL
    ]


def _explained(
    stale: Interval,
    nemesis: Sequence[Mapping[str, Any]],
    margin: float,
    since: float | None = None,
) -> bool:
    """Whether ``stale``'s process was paused (or stalled) beyond the margin, or skewed beyond ρ,
    during its belief, or from ``since`` on when that is earlier: a process stopped when a newer
    grant began runs its body's first statements with its lapsed grant after it resumes."""
    start = stale.start if since is None else min(since, stale.start)
    for episode in nemesis:
        if (episode["kind"] not in EXPLAINING_KINDS | {STALL}
                or episode.get("target") != stale.slot):
            continue
        t0, t1 = float(episode["t0"]), float(episode["t1"])
        if episode["kind"] in MARGIN_KINDS and t1 - t0 <= margin:
            continue
        if _overlaps(t0, t1, start, stale.end):
            return True
    return False


def judge_overlap(
    first: Interval,
    second: Interval,
    nemesis: Sequence[Mapping[str, Any]],
    margin: float,
    stalls: Sequence[Mapping[str, Any]] = (),
) -> tuple[Interval, Interval, str]:
    """Two overlapping belief intervals as (stale, fresh, verdict): ``"explained"`` when the
    stale one (the lower token) was paused or skewed beyond what a lease survives during it (or
    from the fresh one's start, when the stale body began after the fresh one), ``"stalled"``
    when no injected fault does but the stale worker's own stall (:func:`stall_episodes`)
    beyond the margin does, ``"one token"`` when both believe the same token,
    ``"unexplained"`` otherwise."""
    stale, fresh = (first, second) if first.token <= second.token else (second, first)
    if stale.token == fresh.token:
        return stale, fresh, "one token"
    if _explained(stale, nemesis, margin, since=fresh.start):
        return stale, fresh, "explained"
    if _explained(stale, stalls, margin, since=fresh.start):
        return stale, fresh, "stalled"
    return stale, fresh, "unexplained"


def count_stalls(report: Any, stalls: Sequence[Mapping[str, Any]]) -> None:
    """Fill a report's ``stalls`` and ``longest_stall``."""
    report.stalls = len(stalls)
    report.longest_stall = max((float(s["t1"]) - float(s["t0"]) for s in stalls), default=0.0)


@dataclasses.dataclass
class WriteTally:
    """What the fencing store's write log shows (rule 2)."""

    accepted: int = 0
    stale_rejected: int = 0
    stale_accepted: int = 0
    violations: list[str] = dataclasses.field(default_factory=list)


def judge_writes(writes: Iterable[Mapping[str, Any]], prefix: str = "") -> WriteTally:
    """Per resource, in apply order: an accepted token below one accepted earlier, or a
    rejected token that is not below, is a violation (each text starts with ``prefix``, where
    ``{r}`` stands for the resource)."""
    tally = WriteTally()
    highest: dict[str, int] = {}
    for write in writes:
        resource, token = str(write["r"]), int(write["token"])
        top = highest.get(resource, -1)
        if write["ok"]:
            tally.accepted += 1
            if token < top:
                tally.stale_accepted += 1
                tally.violations.append(
                    f"{prefix.format(r=resource)}stale write accepted: token {token} by "
                    f"{write['w']} at {float(write['t']):.3f} after token {top} was accepted"
                )
            highest[resource] = max(top, token)
        elif token < top:
            tally.stale_rejected += 1
        else:
            tally.violations.append(
                f"{prefix.format(r=resource)}the store rejected token {token} although the "
                f"highest accepted was {top}"
            )
    return tally


def check(
    *,
    events: Sequence[Mapping[str, Any]],
    writes: Sequence[Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]],
    nemesis: Sequence[Mapping[str, Any]],
    margin: float,
    heartbeat_timeout: float,
    run_end: float,
) -> Report:
    """Judge one run (see the module docstring for the rules)."""
    report = Report()
    intervals = intervals_from_events(events, run_end)
    report.grants = len(intervals)
    report.faults_by_kind = dict(Counter(str(e["kind"]) for e in nemesis))
    stalls = stall_episodes(events)
    count_stalls(report, stalls)

    # 1. Overlapping beliefs.
    ordered = sorted(intervals, key=lambda i: i.start)
    for i, first in enumerate(ordered):
        for second in ordered[i + 1 :]:
            if second.start >= first.end:
                break
            if first.identity == second.identity and first.token == second.token:
                continue
            report.overlaps += 1
            stale, fresh, verdict = judge_overlap(first, second, nemesis, margin, stalls)
            if verdict in ("explained", "stalled"):
                report.overlaps_explained += 1
                report.overlaps_explained_by_stall += verdict == "stalled"
            elif verdict == "one token":
                report.violations.append(
                    f"token {stale.token} believed by two identities at once: "
                    f"{stale.identity} and {fresh.identity}"
                )
            else:
                overlap = min(first.end, second.end) - second.start
                report.violations.append(
                    f"overlap of {overlap * 1000:.1f} ms: w{stale.slot} (token {stale.token}, "
                    f"{stale.start:.3f}-{stale.end:.3f}) still believed "
                    f"{(stale.end - fresh.start) * 1000:.1f} ms into w{fresh.slot}'s grant "
                    f"(token {fresh.token}, from {fresh.start:.3f}); no pause, stall or skew "
                    "explains it"
                )

    # 2. Fencing: accepted tokens never go down, per resource, in apply order.
    tally = judge_writes(writes)
    report.writes_accepted = tally.accepted
    report.stale_rejected, report.stale_accepted = tally.stale_rejected, tally.stale_accepted
    report.violations.extend(tally.violations)

    _count_stale_after_pauses(report, events, writes, nemesis)

    # 3. Grant tokens strictly increase, and each belongs to one identity.
    owner_of: dict[int, str] = {}
    for interval in intervals:
        other = owner_of.setdefault(interval.token, interval.identity)
        if other != interval.identity:
            report.violations.append(
                f"token {interval.token} granted to two identities: {other} and "
                f"{interval.identity}"
            )
    top_token = -1
    last_grant: tuple[str, int] | None = None
    for record in records:
        holder, token = str(record["holder"]), int(record["token"])
        if token < top_token:
            report.violations.append(
                f"the record's token went back from {top_token} to {token} at {record['t']:.3f}"
            )
        if holder and (holder, token) != last_grant:
            if last_grant is not None and token <= top_token:
                report.violations.append(
                    f"new grant to {holder} at {record['t']:.3f} has token {token}, not above "
                    f"{top_token}"
                )
            last_grant = (holder, token)
        top_token = max(top_token, token)

    # Handovers: consecutive grants (by token) held by different identities.
    by_token = sorted(intervals, key=lambda i: i.token)
    kinds: Counter[str] = Counter()
    for previous, following in itertools.pairwise(by_token):
        if previous.identity != following.identity:
            kinds[
                {"released": "graceful", "killed": "crash", "lost": "after-loss"}.get(
                    previous.outcome, "other"
                )
            ] += 1
    report.handovers = sum(kinds.values())
    report.handovers_by_kind = dict(kinds)

    # Losses that no injected fault explains.
    for event in events:
        if event["ev"] == "error":
            report.errors += 1
        if event["ev"] != "lost":
            continue
        report.losses += 1
        slot, t = int(event["slot"]), float(event["t"])
        window = (t - heartbeat_timeout - 1.0, t + 0.1)
        if not any(
            episode["kind"] not in HARMLESS_KINDS
            and episode.get("target") in (None, slot)
            and _overlaps(float(episode["t0"]), float(episode["t1"]), *window)
            for episode in nemesis
        ):
            report.false_losses += 1

    # 4. The faults must have bitten.
    if report.handovers == 0:
        report.bite_failures.append("no handover happened")
    # A pause anywhere need not produce a stale write (the library cancels the body when it
    # resumes); a pause between the decision to write and the write must.
    in_write = [
        e for e in nemesis
        if e["kind"] == "pause-in-write" and not e.get("truncated") and not e.get("missed")
    ]
    if in_write and not report.stale_rejected + report.stale_accepted:
        report.bite_failures.append(
            "pauses inside writes were injected but no stale write was attempted"
        )
    return report


def _count_stale_after_pauses(
    report: Report,
    events: Sequence[Mapping[str, Any]],
    writes: Sequence[Mapping[str, Any]],
    nemesis: Sequence[Mapping[str, Any]],
) -> None:
    """Fill ``pauses_by_loop`` and ``stale_after_pause`` (see :class:`Report`)."""
    readies = [e for e in events if e["ev"] == "ready"]
    highest: dict[str, int] = {}
    stale: list[tuple[float, str]] = []  # (time, writer) of every stale write, in apply order
    for write in writes:
        resource, token = str(write["r"]), int(write["token"])
        if token < highest.get(resource, -1):
            stale.append((float(write["t"]), str(write["w"])))
        if write["ok"]:
            highest[resource] = max(highest.get(resource, -1), token)
    for episode in nemesis:
        if episode["kind"] not in PAUSE_KINDS or episode.get("truncated"):
            continue
        slot, t0, t1 = episode["target"], float(episode["t0"]), float(episode["t1"])
        loops = [str(e.get("loop", "?")) for e in readies if e["slot"] == slot and e["t"] < t0]
        key = f"{episode['kind']}/{loops[-1] if loops else '?'}"
        report.pauses_by_loop[key] = report.pauses_by_loop.get(key, 0) + 1
        count = sum(
            1 for t, writer in stale if writer == f"w{slot}" and t0 <= t <= t1 + AFTER_PAUSE
        )
        report.stale_after_pause[key] = report.stale_after_pause.get(key, 0) + count
