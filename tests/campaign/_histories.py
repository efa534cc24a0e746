"""Hand-made histories for the campaign's checkers: the events a worker and the nemesis log,
and a checker run on them with the constants these histories are written for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

#: The safety margin, L and the bound the histories are written against (seconds).
MARGIN = 0.66
L = 2.0
BOUND = 3.0

Event = dict[str, Any]
R = TypeVar("R")


def ready(slot: int, t: float, pid: int | None = None) -> Event:
    """A worker process is up (its pid 1000 + slot unless given)."""
    return {
        "ev": "ready",
        "t": t,
        "slot": slot,
        "identity": f"w{slot}",
        "pid": 1000 + slot if pid is None else pid,
    }


def pause(slot: int, t0: float, t1: float, kind: str = "pause-long") -> Event:
    """The nemesis stopped worker ``slot`` from t0 to t1."""
    return {"kind": kind, "target": slot, "t0": t0, "t1": t1, "seconds": t1 - t0}


def stall(slot: int, t0: float, t1: float) -> Event:
    """A worker's own report that its event loop ran nothing from t0 to t1."""
    return {"ev": "stall", "t": t1, "slot": slot, "t0": t0, "t1": t1}


def checker(check: Callable[..., R], **mode: Any) -> Callable[..., R]:
    """``check`` (a mode's checker, given its ``mode`` arguments) as the tests call it: events
    in time order, the constants above, a run that stops at 19 s and ends at 20 s, and by
    default one pause of worker 0 after the end (no fault explains anything)."""

    def run_check(
        events: list[Event],
        writes: list[Event] | None = None,
        nemesis: list[Event] | None = None,
        outage_kinds: frozenset[str] = frozenset(),
    ) -> R:
        return check(
            events=sorted(events, key=lambda e: e["t"]),
            writes=writes or [],
            nemesis=nemesis if nemesis is not None else [pause(0, 30.0, 31.0)],
            margin=MARGIN,
            heartbeat_timeout=L,
            bound=BOUND,
            stop=19.0,
            run_end=20.0,
            outage_kinds=outage_kinds,
            **mode,
        )

    return run_check


def explained_by_one_stall(report: Any, longest: float) -> None:
    """``report`` (any mode's) has one overlap, explained by one stall of ``longest`` s, and
    no violation."""
    assert (report.overlaps, report.overlaps_explained) == (1, 1)
    assert report.overlaps_explained_by_stall == 1
    assert report.stalls == 1
    assert report.longest_stall == pytest.approx(longest)
    assert report.violations == []
