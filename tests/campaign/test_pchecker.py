"""The partitioned mode's checker on hand-made histories: per-key overlaps, tokens, unrun keys."""

from __future__ import annotations

from typing import Any

from tests.campaign._histories import (
    MARGIN,
    L,
    checker,
    explained_by_one_stall,
    pause,
    ready,
    stall,
)
from tools.campaign._pchecker import (
    assignee_faults,
    check_partitioned,
    key_intervals,
)
from trio_lease._partitioned import assign

KEYS = ["k0", "k1"]
run_check = checker(check_partitioned, keys=KEYS)


def run_key(
    slot: int, key: str, token: int, start: float, end: float | None, identity: str = ""
) -> list[dict[str, Any]]:
    """Member events of one run of a key: start, and end unless the process died first."""
    who = identity or f"w{slot}_x"
    events: list[dict[str, Any]] = [
        {"ev": "start", "t": start, "slot": slot, "key": key, "token": token, "identity": who,
         "hold": 0.0}
    ]
    if end is not None:
        events.append({"ev": "end", "t": end, "slot": slot, "key": key, "token": token})
    return events


def killed(slot: int, t: float) -> dict[str, Any]:
    return {"ev": "killed", "t": t, "slot": slot}


def gone(slot: int, t: float, pid: int) -> dict[str, Any]:
    return {"ev": "gone", "t": t, "slot": slot, "pid": pid, "returncode": -9}


def write(t: float, key: str, token: int, ok: bool, writer: str = "w0") -> dict[str, Any]:
    return {"t": t, "r": key, "token": token, "w": writer, "ok": ok}


def member(slot: int, t: float, identity: str) -> dict[str, Any]:
    return {"ev": "member", "t": t, "slot": slot, "identity": identity}


def blackhole(slot: int, t0: float, t1: float) -> dict[str, Any]:
    return {"kind": "proxy-blackhole", "target": slot, "t0": t0, "t1": t1}


def clean_history() -> list[dict[str, Any]]:
    """Two members from t=0; k0 moves from w0 to w1 at 10 s, k1 stays on w1."""
    return [
        ready(0, 0.0), ready(1, 0.0),
        *run_key(0, "k0", 1, 1.0, 10.0),
        *run_key(1, "k0", 2, 10.1, 19.5),
        *run_key(1, "k1", 1, 1.2, 19.5),
    ]


def test_clean_history_passes() -> None:
    """Handed-over keys with rising tokens and accepted writes: no violation, one move."""
    report = run_check(
        clean_history(),
        writes=[write(1.1, "k0", 1, True), write(10.2, "k0", 2, True, "w1"),
                write(1.3, "k1", 1, True, "w1")],
    )
    assert report.violations == []
    assert report.moves == 1
    assert report.grants == 3
    assert report.writes_accepted == 3
    assert report.longest_unrun < 0.2
    assert report.ok


def test_overlapping_grants_of_one_key_are_a_violation() -> None:
    """Two members running one key at once, with no pause to explain it, is reported."""
    events = [ready(0, 0.0), ready(1, 0.0), *run_key(0, "k0", 1, 1.0, 10.0),
              *run_key(1, "k0", 2, 9.5, 19.5), *run_key(1, "k1", 1, 1.2, 19.5)]
    report = run_check(events)
    assert report.overlaps == 1
    assert len(report.violations) == 1
    assert report.violations[0].startswith("key k0: overlap of 500.0 ms")
    assert not report.ok


def test_overlap_explained_by_a_long_pause_of_the_older_runner() -> None:
    """A SIGSTOP beyond the margin of the lower-token runner explains the overlap."""
    events = [ready(0, 0.0), ready(1, 0.0), *run_key(0, "k0", 1, 1.0, 10.0),
              *run_key(1, "k0", 2, 9.5, 19.5), *run_key(1, "k1", 1, 1.2, 19.5)]
    report = run_check(events, nemesis=[pause(0, 6.0, 9.9)])
    assert report.overlaps == 1
    assert report.overlaps_explained == 1
    assert report.violations == []


def late_start_history() -> list[dict[str, Any]]:
    """w1 runs k0 with token 2 from 8 s; w0's body for the lower token 1 starts only at 9.9 s
    (after w1's) and ends at its first checkpoint, 0.1 s later."""
    return [ready(0, 0.0), ready(1, 0.0), *run_key(1, "k0", 2, 8.0, 19.5),
            *run_key(0, "k0", 1, 9.9, 10.0), *run_key(1, "k1", 1, 1.2, 19.5)]


def test_late_start_after_a_pause_spanning_the_newer_grant_is_explained() -> None:
    """A lower-token body that starts after a higher one's, its runner SIGSTOPped from before
    the higher grant until just before the start, is the pause's overlap, not a violation."""
    report = run_check(late_start_history(), nemesis=[pause(0, 6.0, 9.8)])
    assert (report.overlaps, report.overlaps_explained) == (1, 1)
    assert report.late_starts_explained == 1
    assert report.violations == []


def test_late_start_without_a_pause_at_the_newer_grant_is_a_violation() -> None:
    """The same late start is reported (overlap and token order) when the runner's pause ended
    before the higher grant began, or when there was none."""
    for nemesis in ([pause(0, 4.0, 7.5)], [pause(1, 6.0, 9.8)]):
        report = run_check(late_start_history(), nemesis=nemesis)
        assert report.late_starts_explained == 0
        assert report.violations == [
            "key k0: overlap of 100.0 ms: w0 (token 1, 9.900-10.000) and w1 (token 2, from "
            "8.000); no pause or stall explains it",
            "key k0: grant to w0_x at 9.900 has token 1, not above 2 of w1_x's earlier grant",
        ]

def test_runs_of_different_keys_may_overlap() -> None:
    """Two members at once on two different keys is the point, not a violation."""
    report = run_check(clean_history())
    assert report.overlaps == 0


def test_kill_ends_every_run_of_the_killed_member() -> None:
    """A SIGKILL ends all the keys its process ran, so a takeover after it does not overlap."""
    events = [ready(0, 0.0, pid=50), ready(1, 0.0), *run_key(0, "k0", 1, 1.0, None),
              *run_key(0, "k1", 1, 1.0, None), killed(0, 5.0),
              *run_key(1, "k0", 2, 7.5, 19.5), *run_key(1, "k1", 2, 7.6, 19.5)]
    by_key = key_intervals(sorted(events, key=lambda e: e["t"]), 20.0)
    assert [(i.end, i.outcome) for i in by_key["k0"]] == [(5.0, "killed"), (19.5, "ended")]
    report = run_check(events)
    assert report.violations == []
    assert report.moves == 2


def test_late_exit_of_an_earlier_process_ends_nothing() -> None:
    """The "gone" of a process that was replaced does not end the new process's runs."""
    events = [ready(0, 0.0, pid=50), ready(1, 0.0), ready(0, 4.0, pid=51),
              *run_key(0, "k0", 1, 5.0, None), gone(0, 6.0, pid=50),
              *run_key(1, "k0", 2, 7.0, 19.5), *run_key(1, "k1", 1, 1.0, 19.5)]
    report = run_check(events)
    assert report.overlaps == 1
    assert any(v.startswith("key k0: overlap of") for v in report.violations)


def test_token_that_does_not_increase_is_a_violation() -> None:
    """A later grant of a key with a token not above the earlier one is reported."""
    events = [ready(0, 0.0), ready(1, 0.0), *run_key(0, "k0", 5, 1.0, 10.0),
              *run_key(1, "k0", 5, 10.1, 19.5), *run_key(1, "k1", 1, 1.2, 19.5)]
    report = run_check(events)
    assert any("token 5, not above 5" in v for v in report.violations)
    assert any("token 5 granted to two identities" in v for v in report.violations)


def test_tokens_are_judged_per_key() -> None:
    """Token 1 of one key after token 2 of another is no violation: each key counts alone."""
    events = [ready(0, 0.0), ready(1, 0.0), *run_key(0, "k0", 2, 1.0, 19.5),
              *run_key(1, "k1", 1, 1.2, 19.5)]
    assert run_check(events).violations == []


def test_key_left_unrun_too_long_is_a_violation() -> None:
    """A key nobody runs for longer than L + bound while a member lives is reported."""
    events = [ready(0, 0.0), ready(1, 0.0), *run_key(0, "k0", 1, 1.0, 6.0),
              *run_key(1, "k0", 2, 12.0, 19.5), *run_key(1, "k1", 1, 1.2, 19.5)]
    report = run_check(events)
    assert report.longest_unrun == 6.0
    assert report.violations == [
        "key k0: unrun for 6.00 s (6.000-12.000) while a member was alive and the store up, "
        "more than L + bound = 5.00 s"
    ]


def test_key_never_run_is_a_violation() -> None:
    """A key no member ever takes is unrun from the end of start-up to the stop."""
    events = [ready(0, 0.0), ready(1, 0.0), *run_key(0, "k0", 1, 1.0, 19.5)]
    report = run_check(events)
    assert report.violations == [
        "key k1: unrun for 14.00 s (5.000-19.000) while a member was alive and the store up, "
        "more than L + bound = 5.00 s"
    ]


def test_unrun_time_counts_only_while_a_member_is_alive() -> None:
    """A stretch with every member dead does not count against the key."""
    events = [ready(0, 0.0, pid=50), *run_key(0, "k0", 1, 1.0, None),
              *run_key(0, "k1", 1, 1.0, None), killed(0, 6.0), ready(0, 11.0, pid=51),
              *run_key(0, "k0", 2, 13.0, 19.5), *run_key(0, "k1", 2, 13.0, 19.5)]
    report = run_check(events)
    assert report.longest_unrun == 2.0
    assert report.violations == []


def test_store_outage_does_not_count_as_unrun_time() -> None:
    """Unrun time during a store-wide outage, and for L after it, is not held against a key."""
    events = [ready(0, 0.0), ready(1, 0.0), *run_key(0, "k0", 1, 1.0, 6.0),
              *run_key(1, "k0", 2, 12.0, 19.5), *run_key(1, "k1", 1, 1.2, 19.5)]
    outage = [{"kind": "pause-long", "target": 1, "t0": 6.5, "t1": 9.0}]
    assert run_check(events, nemesis=outage, outage_kinds=frozenset({"pause-long"})).ok
    report = run_check(events, nemesis=outage)  # the same pause, not an outage on this store
    assert report.longest_unrun == 6.0
    assert not report.ok


def test_stale_write_accepted_for_a_key_is_a_violation() -> None:
    """The store accepting a key's token below one it accepted for that key is reported."""
    report = run_check(
        clean_history(),
        writes=[write(10.2, "k0", 2, True, "w1"), write(10.3, "k0", 1, True),
                write(10.4, "k1", 1, True, "w1")],
    )
    assert report.stale_accepted == 1
    assert any(v.startswith("key k0: stale write accepted") for v in report.violations)


def test_run_without_moves_or_faults_does_not_bite() -> None:
    """A run where no key moved and no fault was injected fails its bite check."""
    events = [ready(0, 0.0), *run_key(0, "k0", 1, 1.0, 19.5), *run_key(0, "k1", 1, 1.0, 19.5)]
    report = run_check(events, nemesis=[])
    assert report.violations == []
    assert report.bite_failures == ["no key moved", "no fault was injected"]
    assert not report.ok


def assigned_history() -> tuple[list[dict[str, Any]], str]:
    """w0 and w1 (identities logged); the key the assignment gives w1 runs on w0 until 6 s,
    nobody runs it from 6 s to 14 s (8 s, above L + bound = 5 s), then w1 runs it."""
    ids = {0: "w0_a", 1: "w1_b"}
    key = assign(KEYS, sorted(ids.values()))[ids[1]][0]
    other = next(k for k in KEYS if k != key)
    events = [
        ready(0, 0.0), ready(1, 0.0), member(0, 0.1, ids[0]), member(1, 0.1, ids[1]),
        *run_key(0, key, 1, 1.0, 6.0, ids[0]), *run_key(1, key, 2, 14.0, 19.5, ids[1]),
        *run_key(0, other, 1, 1.2, 19.5, ids[0]),
    ]
    return events, key


def test_fault_on_the_keys_assignee_restarts_its_unrun_clock() -> None:
    """A partition of the member the key is assigned to cuts the key's unrun stretch: 3 s
    before it and 4 s after it, each within L + bound."""
    events, key = assigned_history()
    report = run_check(events, nemesis=[blackhole(1, 9.0, 10.0)])
    assert assignee_faults(events, [blackhole(1, 9.0, 10.0)], KEYS, L) == {key: [(9.0, 10.0)]}
    assert report.unrun_restarted == 1
    assert report.longest_unrun == 4.0
    assert report.violations == []


def test_fault_on_another_member_leaves_the_unrun_clock_running() -> None:
    """The same 8 s unrun stretch is a violation when the fault hits a member the key is not
    assigned to, or when there is no fault at all: the rule excuses only the assignee's."""
    events, key = assigned_history()
    expected = [
        f"key {key}: unrun for 8.00 s (6.000-14.000) while a member was alive and the store "
        "up, more than L + bound = 5.00 s"
    ]
    for nemesis in ([blackhole(0, 9.0, 10.0)], [pause(0, 30.0, 31.0)]):
        report = run_check(events, nemesis=nemesis)
        assert report.unrun_restarted == 0
        assert report.violations == expected


def test_restarted_clock_still_catches_a_key_left_unrun_after_the_fault() -> None:
    """After the assignee's fault ends, the key still must run within L + bound."""
    events, key = assigned_history()
    report = run_check(events, nemesis=[blackhole(1, 6.5, 7.0)])
    assert report.violations == [
        f"key {key}: unrun for 7.00 s (7.000-14.000) while a member was alive and the store "
        "up, more than L + bound = 5.00 s"
    ]


def test_member_killed_less_than_l_before_still_counts_in_the_assignment() -> None:
    """The assignment at a fault includes a member killed within L (its group record still
    stands) and leaves out one killed earlier."""
    events = [
        ready(0, 0.0, pid=10), ready(1, 0.0, pid=11), member(0, 0.1, "w0_a"),
        member(1, 0.1, "w1_b"), killed(1, 5.0), ready(1, 5.2, pid=12), member(1, 5.3, "w1_c"),
    ]
    soon, late = blackhole(1, 6.0, 6.5), blackhole(1, 8.0, 8.5)
    keys = [f"k{i}" for i in range(12)]
    with_dead = assign(keys, ["w0_a", "w1_b", "w1_c"])["w1_c"]
    without = assign(keys, ["w0_a", "w1_c"])["w1_c"]
    assert (len(with_dead), len(without)) == (4, 6)
    hits = assignee_faults(events, [soon, late], keys, L)
    assert {k for k, spans in hits.items() if (6.0, 6.5) in spans} == set(with_dead)
    assert {k for k, spans in hits.items() if (8.0, 8.5) in spans} == set(without)


def overlap_history() -> list[dict[str, Any]]:
    """k0 run by w0 (token 1) until 10.0 and by w1 (token 2) from 9.5."""
    return [ready(0, 0.0), ready(1, 0.0), *run_key(0, "k0", 1, 1.0, 10.0),
            *run_key(1, "k0", 2, 9.5, 19.5), *run_key(1, "k1", 1, 1.2, 19.5)]


def test_overlap_explained_by_a_stall_of_the_older_runner_beyond_the_margin() -> None:
    """A stall the lower-token member observed itself, beyond the margin, explains the overlap
    as an injected pause would, and is counted as the stall's."""
    report = run_check([*overlap_history(), stall(0, 8.9, 9.9)])
    explained_by_one_stall(report, 1.0)


def test_stall_shorter_than_the_margin_explains_nothing() -> None:
    """A member's stall within the margin is one the lease survives: the overlap is reported."""
    report = run_check([*overlap_history(), stall(0, 9.3, 9.3 + MARGIN - 0.01)])
    assert report.overlaps_explained == report.overlaps_explained_by_stall == 0
    assert [v[:32] for v in report.violations] == ["key k0: overlap of 500.0 ms: w0 "]


def test_stall_of_the_newer_runner_explains_nothing() -> None:
    """Only the stale member's own stall excuses it; the newer runner's is no excuse."""
    report = run_check([*overlap_history(), stall(1, 8.9, 9.9)])
    assert len(report.violations) == 1


def test_late_start_after_a_stall_spanning_the_newer_grant_is_explained() -> None:
    """A lower token whose body started late, its member stalled beyond the margin from the
    higher grant's start on, is explained like a paused one."""
    report = run_check([*late_start_history(), stall(0, 6.0, 9.8)], nemesis=[])
    assert (report.overlaps, report.overlaps_explained_by_stall) == (1, 1)
    assert report.late_starts_explained == 1
    assert report.violations == []
