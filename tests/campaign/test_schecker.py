"""The semaphore mode's checker on hand-made histories: slots, the limit, tokens, waits."""

from __future__ import annotations

from typing import Any

import pytest

from tests.campaign._histories import checker, pause, ready
from tools.campaign._schecker import check_semaphore, waits_from_events

LIMIT = 2
run_check = checker(check_semaphore, limit=LIMIT)


def want(worker: int, t: float) -> dict[str, Any]:
    return {"ev": "want", "t": t, "slot": worker}


def hold(
    worker: int, seat: int, token: int, start: float, end: float | None, wanted: float | None = None
) -> list[dict[str, Any]]:
    """A worker's round: ``want`` (at ``wanted``, default just before), ``start`` and, unless
    its process died first, ``end``."""
    events: list[dict[str, Any]] = [
        want(worker, start - 0.05 if wanted is None else wanted),
        {"ev": "start", "t": start, "slot": worker, "sem_slot": seat, "token": token,
         "identity": f"w{worker}_x", "hold": 0.0},
    ]
    if end is not None:
        events.append({"ev": "end", "t": end, "slot": worker, "sem_slot": seat, "token": token})
    return events


def write(t: float, seat: int, token: int, ok: bool, writer: str = "w0") -> dict[str, Any]:
    return {"t": t, "r": f"slot{seat}", "token": token, "w": writer, "ok": ok}


def clean_history() -> list[dict[str, Any]]:
    """Three workers at limit 2 taking turns on slots 0 and 1."""
    return [
        ready(0, 0.0), ready(1, 0.0), ready(2, 0.0),
        *hold(0, 0, 1, 1.0, 4.0), *hold(1, 1, 1, 1.0, 5.0),
        *hold(2, 0, 2, 4.1, 8.0, wanted=1.0), *hold(0, 1, 2, 5.1, 9.0, wanted=4.1),
        *hold(1, 0, 3, 8.1, 12.0, wanted=5.1), *hold(2, 1, 3, 9.1, 11.0, wanted=8.1),
    ]


def test_clean_history_passes() -> None:
    """Slots taken in turn with rising tokens and accepted writes: no violation."""
    report = run_check(
        clean_history(), writes=[write(1.1, 0, 1, True), write(4.2, 0, 2, True, "w2")]
    )
    assert report.violations == []
    assert report.grants == 6
    assert report.moves == 4
    assert report.most_at_once == 2
    assert report.waits == 6
    assert report.longest_wait == pytest.approx(3.1)
    assert report.ok


def test_more_holders_than_the_limit_on_distinct_slots_is_a_violation() -> None:
    """A third holder at limit 2, on a slot of its own (slot 2, a contender with a higher
    limit), is reported twice: a slot outside the limit, and three holders at once."""
    events = [*clean_history(), *hold(3, 2, 1, 2.0, 3.0)]
    report = run_check(events)
    assert report.overlaps == 0
    assert report.most_at_once == 3
    assert any("slot 2" in v and "outside 0..1" in v for v in report.violations)
    assert any(v.startswith("3 holders at 2.000, more than the limit 2") for v in report.violations)
    assert not report.ok


def test_two_holders_of_one_slot_are_a_violation() -> None:
    """Two workers believing one slot at once, with no pause to explain it, is reported."""
    events = [ready(0, 0.0), ready(1, 0.0), *hold(0, 0, 1, 1.0, 10.0), *hold(1, 0, 2, 9.5, 18.0)]
    report = run_check(events)
    assert report.overlaps == 1
    assert report.violations == ["slot0: overlap of 500.0 ms: w0 (token 1, 1.000-10.000) and w1 "
                                 "(token 2, from 9.500); no pause or stall explains it"]


def test_a_paused_holder_counts_toward_the_limit_only_until_its_slot_is_taken() -> None:
    """A holder stopped past L (explained) still believes, but from the next grant of its slot
    on it is not counted: two other holders on two slots are within the limit."""
    events = [ready(0, 0.0), ready(1, 0.0), ready(2, 0.0),
              *hold(0, 0, 1, 1.0, 9.0), *hold(1, 0, 2, 5.0, 18.0), *hold(2, 1, 1, 6.0, 18.0)]
    report = run_check(events, nemesis=[pause(0, 2.0, 8.9)])
    assert report.overlaps == 1 and report.overlaps_explained == 1
    assert report.most_at_once == 2
    assert report.violations == []
    # Without the pause the same history breaks both rules.
    broken = run_check(events)
    assert any("overlap" in v for v in broken.violations)
    assert any("3 holders" in v for v in broken.violations)


def test_a_token_that_does_not_increase_on_a_slot_is_a_violation() -> None:
    """A slot's next grant with a token not above the last one is reported; tokens of other
    slots are judged apart."""
    events = [ready(0, 0.0), ready(1, 0.0), *hold(0, 0, 5, 1.0, 4.0), *hold(1, 0, 5, 4.5, 8.0),
              *hold(0, 1, 1, 5.0, 6.0)]
    report = run_check(events)
    assert report.violations == [
        "slot0: grant to w1_x at 4.500 has token 5, not above 5 of w0_x's earlier grant",
        "slot0: token 5 granted to two identities: w0_x and w1_x",
    ]


def test_a_stale_write_accepted_for_a_slot_is_a_violation() -> None:
    """The store accepting a slot's token below one it accepted for that slot is reported."""
    report = run_check(
        clean_history(), writes=[write(4.2, 0, 2, True, "w2"), write(4.3, 0, 1, True)]
    )
    assert report.stale_accepted == 1
    assert any(v.startswith("slot0: stale write accepted: token 1") for v in report.violations)


def test_a_waiter_never_granted_within_the_bound_is_a_violation() -> None:
    """A worker that asks at 2 s and is not granted by the stop (17 s > L + bound) starves."""
    events = [*clean_history(), ready(3, 0.0), want(3, 2.0)]
    report = run_check(events)
    assert report.longest_wait == 17.0
    assert report.violations == [
        "w3 waited 17.00 s (2.000-19.000, still waiting) with the store up and no fault on it, "
        "more than L + bound = 5.00 s"
    ]


def test_a_long_wait_that_ends_in_a_grant_is_a_violation_too() -> None:
    """A grant that comes after more than L + bound of waiting is reported as granted late."""
    events = [*clean_history(), ready(3, 0.0), *hold(3, 1, 9, 18.5, None, wanted=10.0)]
    report = run_check(events)
    assert any(v.startswith("w3 waited 8.50 s (10.000-18.500, granted)") for v in report.violations)


def test_a_fault_on_the_waiter_restarts_its_clock() -> None:
    """A waiter stopped past L mid-wait counts only from its resume; still starved if it is
    not granted within L + bound of it."""
    events = [*clean_history(), ready(3, 0.0), *hold(3, 1, 9, 14.0, None, wanted=2.0)]
    report = run_check(events, nemesis=[pause(3, 6.0, 10.0, "pause-waiter")])
    assert report.waits_restarted == 1
    assert report.longest_wait == 4.0
    assert report.violations == []
    late = [*clean_history(), ready(3, 0.0), *hold(3, 1, 9, 16.0, None, wanted=2.0)]
    report = run_check(late, nemesis=[pause(3, 6.0, 10.0, "pause-waiter")])
    assert any(v.startswith("w3 waited 6.00 s (10.000-16.000, granted)") for v in report.violations)


def test_a_fault_on_another_worker_leaves_the_waiters_clock_running() -> None:
    """A holder's pause does not excuse another worker's long wait."""
    events = [*clean_history(), ready(3, 0.0), *hold(3, 1, 9, 16.0, None, wanted=2.0)]
    report = run_check(events, nemesis=[pause(0, 6.0, 10.0)])
    assert report.waits_restarted == 0
    assert any(v.startswith("w3 waited 14.00 s") for v in report.violations)


def test_a_store_outage_and_the_waiters_own_stall_do_not_count() -> None:
    """Waiting time while the store is out for everyone (until L after), or while the
    waiter's own event loop stood still, is not held against the semaphore."""
    events = [*clean_history(), ready(3, 0.0), *hold(3, 1, 9, 12.0, None, wanted=2.0),
              {"ev": "stall", "t": 10.0, "slot": 3, "t0": 8.0, "t1": 10.0, "cpu": 0.0}]
    outage = [pause(0, 3.0, 4.0)]
    report = run_check(events, nemesis=outage, outage_kinds=frozenset({"pause-long"}))
    assert report.longest_wait == 10.0 - 3.0 - 2.0
    assert report.violations == []
    assert not run_check(events, nemesis=outage).ok  # the same pause, not an outage here


def test_waits_end_at_a_grant_an_error_or_the_waiters_death() -> None:
    """A wait ends at the process's next start, error or death; one begun after stop is
    left out, and an earlier incarnation's late exit ends nothing."""
    events = [
        ready(0, 0.0), want(0, 1.0), {"ev": "error", "t": 2.0, "slot": 0},
        want(0, 3.0), {"ev": "gone", "t": 4.0, "slot": 0, "pid": 999},
        {"ev": "killed", "t": 5.0, "slot": 0},
        ready(0, 6.0, pid=2000), want(0, 7.0), {"ev": "start", "t": 8.0, "slot": 0},
        want(0, 9.5),
    ]
    waits = waits_from_events(events, stop=9.0)
    assert [(w.start, w.end, w.granted) for w in waits] == [
        (1.0, 2.0, False), (3.0, 5.0, False), (7.0, 8.0, True),
    ]


def test_run_without_moves_grants_or_faults_does_not_bite() -> None:
    """A run where no slot moved and no fault was injected fails its bite check."""
    report = run_check([ready(0, 0.0), *hold(0, 0, 1, 1.0, 18.0)], nemesis=[])
    assert "no slot moved" in report.bite_failures
    assert "no fault was injected" in report.bite_failures
    assert not report.ok
