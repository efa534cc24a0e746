"""The checker on hand-made histories: what must and must not count as a violation."""

from __future__ import annotations

from typing import Any

import pytest

from tests.campaign._histories import MARGIN, L, explained_by_one_stall, stall
from tools.campaign._checker import Report, check, intervals_from_events


def grant(slot: int, token: int, start: float, end: float | None, how: str = "released") -> list[
    dict[str, Any]
]:
    """Worker events of one grant: start, end (unless killed) and how the scope ended."""
    identity = f"w{slot}_x"
    events: list[dict[str, Any]] = [
        {"ev": "start", "t": start, "slot": slot, "token": token, "identity": identity,
         "hold": 0.0}
    ]
    if end is not None:
        events.append({"ev": "end", "t": end, "slot": slot, "token": token})
        events.append({"ev": how, "t": end + 0.001, "slot": slot, "token": token})
    return events


def write(t: float, token: int, ok: bool, writer: str = "w0") -> dict[str, Any]:
    return {"t": t, "r": "res", "token": token, "w": writer, "ok": ok}


def record(t: float, holder: str, token: int) -> dict[str, Any]:
    return {"t": t, "holder": holder, "token": token, "version": str(t)}


def pause(slot: int, t0: float, t1: float, kind: str = "pause-long", **extra: Any) -> dict[
    str, Any
]:
    return {"kind": kind, "target": slot, "t0": t0, "t1": t1, **extra}


def run_check(
    events: list[dict[str, Any]],
    writes: list[dict[str, Any]] | None = None,
    records: list[dict[str, Any]] | None = None,
    nemesis: list[dict[str, Any]] | None = None,
) -> Report:
    return check(
        events=sorted(events, key=lambda e: e["t"]),
        writes=writes or [],
        records=records or [],
        nemesis=nemesis or [],
        margin=MARGIN,
        heartbeat_timeout=L,
        run_end=100.0,
    )


def test_sequential_grants_are_clean() -> None:
    """Back-to-back grants with rising tokens and fenced writes: no violation, one handover."""
    report = run_check(
        grant(0, 1, 1.0, 2.0) + grant(1, 2, 2.1, 3.0),
        writes=[write(1.1, 1, True), write(2.2, 2, True, "w1")],
        records=[record(1.0, "a", 1), record(1.5, "a", 1), record(2.0, "", 1),
                 record(2.1, "b", 2)],
    )
    assert report.violations == []
    assert report.handovers == 1
    assert report.handovers_by_kind == {"graceful": 1}
    assert report.ok


def test_unexplained_overlap_is_a_violation() -> None:
    """Two grants believed at once with no injected pause is a violation."""
    report = run_check(grant(0, 1, 1.0, 3.0) + grant(1, 2, 2.5, 4.0))
    assert report.overlaps == 1
    assert len(report.violations) == 1
    assert "overlap of 500.0 ms" in report.violations[0]
    assert not report.ok


@pytest.mark.parametrize("kind", ["pause-long", "pause-in-write"])
def test_overlap_explained_by_a_long_pause_of_the_stale_holder(kind: str) -> None:
    """A SIGSTOP longer than the margin of the older holder explains the overlap."""
    report = run_check(
        grant(0, 1, 1.0, 5.0, "lost") + grant(1, 2, 3.5, 6.0),
        nemesis=[pause(0, 1.5, 4.9, kind=kind, seconds=3.4)],
    )
    assert report.overlaps == 1
    assert report.overlaps_explained == 1
    assert report.violations == []


@pytest.mark.parametrize("kind", ["pause-long", "pause-in-write"])
def test_pause_shorter_than_the_margin_explains_nothing(kind: str) -> None:
    """A pause within the safety margin must not lead to overlap: it is not an excuse."""
    report = run_check(
        grant(0, 1, 1.0, 3.0) + grant(1, 2, 2.5, 4.0),
        nemesis=[pause(0, 1.5, 1.5 + MARGIN / 2, kind=kind)],
    )
    assert len(report.violations) == 1


def test_pause_of_the_newer_holder_explains_nothing() -> None:
    """Only a fault of the stale (lower-token) holder can explain an overlap."""
    report = run_check(
        grant(0, 1, 1.0, 3.0) + grant(1, 2, 2.5, 4.0),
        nemesis=[pause(1, 2.6, 3.9)],
    )
    assert len(report.violations) == 1


def test_clock_skew_beyond_tolerance_explains_an_overlap() -> None:
    """A holder whose clock ran beyond the tolerated rate may overlap (by design)."""
    report = run_check(
        grant(0, 1, 1.0, 3.0, "lost") + grant(1, 2, 2.5, 4.0),
        nemesis=[pause(0, 1.2, 4.0, kind="skew-beyond")],
    )
    assert report.overlaps_explained == 1
    assert report.violations == []


def test_a_kill_ends_the_belief() -> None:
    """A SIGKILLed holder's interval ends at the kill, not at the end of the run."""
    events = [*grant(0, 1, 1.0, None), {"ev": "killed", "t": 2.0, "slot": 0}]
    report = run_check(events + grant(1, 2, 4.0, 5.0), nemesis=[pause(0, 2.0, 2.0, "kill")])
    assert report.violations == []
    assert report.handovers_by_kind == {"crash": 1}
    intervals = intervals_from_events(sorted(events, key=lambda e: e["t"]), run_end=100.0)
    assert (intervals[0].end, intervals[0].outcome) == (2.0, "killed")


def test_stale_write_accepted_is_a_violation() -> None:
    """The store accepting a token below an accepted one is a violation."""
    report = run_check(
        grant(0, 1, 1.0, 2.0) + grant(1, 2, 2.1, 3.0),
        writes=[write(1.1, 1, True), write(2.2, 2, True, "w1"), write(2.5, 1, True)],
    )
    assert report.stale_accepted == 1
    assert any("stale write accepted: token 1" in v for v in report.violations)


def test_stale_write_rejected_is_counted_not_a_violation() -> None:
    """A stale token the store rejected is fencing at work."""
    report = run_check(
        grant(0, 1, 1.0, 2.0) + grant(1, 2, 2.1, 3.0),
        writes=[write(1.1, 1, True), write(2.2, 2, True, "w1"), write(2.5, 1, False)],
    )
    assert report.stale_rejected == 1
    assert report.violations == []


def test_equal_tokens_are_accepted_repeatedly() -> None:
    """Several writes with the same (current) token are fine."""
    report = run_check(
        grant(0, 1, 1.0, 2.0) + grant(1, 2, 2.1, 3.0),
        writes=[write(1.1, 1, True), write(1.2, 1, True), write(2.2, 2, True, "w1")],
    )
    assert report.violations == []
    assert report.writes_accepted == 3


def test_new_grant_must_raise_the_token() -> None:
    """A new holder in the record history with a token not above the last is a violation."""
    report = run_check(
        grant(0, 1, 1.0, 2.0) + grant(1, 2, 2.1, 3.0),
        records=[record(1.0, "a", 1), record(2.0, "", 1), record(2.1, "b", 1)],
    )
    assert any("new grant to b" in v for v in report.violations)


def test_record_token_must_not_go_back() -> None:
    """A record whose token is below an earlier one is a violation."""
    report = run_check(
        grant(0, 1, 1.0, 2.0) + grant(1, 2, 2.1, 3.0),
        records=[record(1.0, "a", 3), record(2.0, "a", 2)],
    )
    assert any("went back from 3 to 2" in v for v in report.violations)


def test_renewals_and_reacquire_by_the_same_identity_are_fine() -> None:
    """Renewals keep the token; a re-grant to the same identity after release raises it."""
    report = run_check(
        grant(0, 1, 1.0, 2.0) + grant(1, 2, 2.1, 3.0),
        records=[record(1.0, "a", 1), record(1.4, "a", 1), record(2.0, "", 1),
                 record(2.1, "a", 2)],
    )
    assert report.violations == []


def test_one_token_granted_twice_is_a_violation() -> None:
    """Two identities holding the same token is a violation even without overlap."""
    report = run_check(grant(0, 5, 1.0, 2.0) + grant(1, 5, 3.0, 4.0))
    assert any("token 5 granted to two identities" in v for v in report.violations)


def test_a_run_without_handovers_did_not_bite() -> None:
    """No handover means the faults proved nothing."""
    report = run_check(grant(0, 1, 1.0, 2.0))
    assert report.violations == []
    assert report.bite_failures == ["no handover happened"]
    assert not report.ok


def test_pauses_inside_writes_without_stale_writes_did_not_bite() -> None:
    """Long pauses between a decision to write and the write must make a stale write arrive."""
    events = grant(0, 1, 1.0, 5.0, "lost") + grant(1, 2, 3.5, 6.0)
    nemesis = [pause(0, 1.5, 4.9, kind="pause-in-write")]
    report = run_check(events, writes=[write(1.1, 1, True)], nemesis=nemesis)
    assert report.bite_failures == [
        "pauses inside writes were injected but no stale write was attempted"
    ]
    bitten = run_check(
        events, writes=[write(1.1, 1, True), write(3.6, 2, True), write(4.95, 1, False)],
        nemesis=nemesis,
    )
    assert bitten.ok


def test_long_pauses_elsewhere_need_no_stale_write() -> None:
    """A long pause anywhere else bites through the handover; the library may stop the write."""
    events = grant(0, 1, 1.0, 5.0, "lost") + grant(1, 2, 3.5, 6.0)
    report = run_check(events, writes=[write(1.1, 1, True)], nemesis=[pause(0, 1.5, 4.9)])
    assert report.ok


def test_missed_pauses_inside_writes_are_not_required_to_bite() -> None:
    """A pause that came after the holder's blocking step had ended proves nothing."""
    events = grant(0, 1, 1.0, 5.0, "lost") + grant(1, 2, 3.5, 6.0)
    nemesis = [pause(0, 1.5, 4.9, kind="pause-in-write", missed=True)]
    assert run_check(events, writes=[write(1.1, 1, True)], nemesis=nemesis).ok


def test_truncated_long_pauses_are_not_required_to_bite() -> None:
    """A long pause cut short by the end of the run is not held against the run."""
    report = run_check(
        grant(0, 1, 1.0, 2.0) + grant(1, 2, 2.1, 3.0),
        nemesis=[pause(1, 2.5, 3.0, truncated=True)],
    )
    assert report.bite_failures == []


def test_losses_without_a_fault_are_false_losses() -> None:
    """A LeaseLost with no fault on that worker (or everyone) nearby is a false loss."""
    events = grant(0, 1, 1.0, 2.0, "lost") + grant(1, 2, 10.0, 11.0, "lost")
    report = run_check(events, nemesis=[pause(1, 9.5, 10.8, kind="proxy-blackhole")])
    assert report.losses == 2
    assert report.false_losses == 1


def test_global_faults_explain_losses_but_in_tolerance_skew_does_not() -> None:
    """A global fault (target None) explains a loss; a within-tolerance skew does not."""
    events = grant(0, 1, 1.0, 2.0, "lost")
    explained = run_check(events, nemesis=[{"kind": "emu-pause", "target": None, "t0": 0.5,
                                            "t1": 1.9}])
    assert explained.false_losses == 0
    unexplained = run_check(events, nemesis=[{"kind": "skew-within", "target": None,
                                              "t0": 0.5, "t1": 0.5}])
    assert unexplained.false_losses == 1


def test_a_dead_process_ends_only_its_own_belief() -> None:
    """A late "gone" of a dead process does not end its successor's belief in the same slot."""
    events = [
        {"ev": "ready", "t": 0.5, "slot": 0, "identity": "w0_x", "pid": 10},
        *grant(0, 1, 1.0, None),
        {"ev": "killed", "t": 2.0, "slot": 0},
        {"ev": "ready", "t": 2.5, "slot": 0, "identity": "w0_y", "pid": 11},
        {"ev": "start", "t": 3.0, "slot": 0, "token": 2, "identity": "w0_y", "hold": 0.0},
        {"ev": "gone", "t": 3.1, "slot": 0, "pid": 10},
        {"ev": "gone", "t": 4.0, "slot": 0, "pid": 11},
    ]
    intervals = intervals_from_events(events, run_end=100.0)
    assert [(i.token, i.end) for i in intervals] == [(1, 2.0), (2, 4.0)]


def test_stale_writes_after_pauses_are_counted_by_kind_and_loop() -> None:
    """Each long pause is counted under its kind and the paused worker's loop, with the stale
    writes that worker sent from the pause until 1 s after it."""
    ready = [
        {"ev": "ready", "t": 0.1, "slot": 0, "identity": "w0_x", "pid": 1, "loop": "trio"},
        {"ev": "ready", "t": 0.1, "slot": 1, "identity": "w1_x", "pid": 2, "loop": "asyncio"},
    ]
    events = ready + grant(0, 1, 1.0, 5.0, "lost") + grant(1, 2, 3.5, 6.0)
    writes = [
        write(1.1, 1, True),
        write(3.6, 2, True, writer="w1"),
        write(4.95, 1, False),  # w0's stale write right after its pause
        write(9.0, 1, False),  # too late to be counted against the pause
    ]
    report = run_check(
        events, writes=writes, nemesis=[pause(0, 1.5, 4.9, kind="pause-in-write"),
                                        pause(1, 7.0, 7.5)],
    )
    assert report.pauses_by_loop == {"pause-in-write/trio": 1, "pause-long/asyncio": 1}
    assert report.stale_after_pause == {"pause-in-write/trio": 1, "pause-long/asyncio": 0}
    assert report.stale_rejected == 2


def test_overlap_explained_by_a_stall_of_the_stale_holder_beyond_the_margin() -> None:
    """A stall the older holder observed itself, beyond the margin, explains the overlap as an
    injected pause would, and is counted as the stall's."""
    report = run_check(grant(0, 1, 1.0, 3.0) + grant(1, 2, 2.5, 4.0) + [stall(0, 1.5, 2.9)])
    explained_by_one_stall(report, 1.4)


def test_stall_shorter_than_the_margin_explains_nothing() -> None:
    """A worker's stall within the margin is one the lease survives: the overlap is reported."""
    report = run_check(
        grant(0, 1, 1.0, 3.0) + grant(1, 2, 2.5, 4.0) + [stall(0, 2.0, 2.0 + MARGIN - 0.01)]
    )
    assert report.overlaps_explained == report.overlaps_explained_by_stall == 0
    assert len(report.violations) == 1
    assert "no pause, stall or skew explains it" in report.violations[0]


def test_stall_of_the_newer_holder_explains_nothing() -> None:
    """Only the stale holder's own stall excuses it; the newer holder's is no excuse."""
    report = run_check(grant(0, 1, 1.0, 3.0) + grant(1, 2, 2.5, 4.0) + [stall(1, 1.5, 2.9)])
    assert len(report.violations) == 1


def test_stalls_are_not_injected_faults() -> None:
    """A logged stall counts as a stall, not as a fault the nemesis injected."""
    report = run_check(grant(0, 1, 1.0, 2.0) + grant(1, 2, 2.1, 3.0) + [stall(0, 1.2, 1.3)])
    assert report.faults_by_kind == {}
    assert report.stalls == 1
