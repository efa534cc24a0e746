"""`trio-lease run --limit N` as real processes: at most N commands at once, each told its slot."""

from __future__ import annotations

import itertools
import os
import signal

from .conftest import FAST, Cli, wait_for_event


def test_at_most_limit_runs_at_once_each_with_its_slot(cli: Cli) -> None:
    """Four runs with --limit 2 started together: never more than two commands at once, each
    given TRIO_LEASE_SLOT and the slot lease's name, tokens increasing per slot."""
    runs = []
    for i in range(4):
        log, child = cli.child(f"child{i}", sleep=0.5)
        runs.append(
            (log, cli.start("run", "job", "--limit", "2", "--owner", f"o{i}", *FAST, "--", *child))
        )
    assert [running.wait() for _, running in runs] == [0, 0, 0, 0]
    events = []
    for log, _ in runs:
        start, end = wait_for_event(log, "start"), wait_for_event(log, "end")
        assert start["name"] == f"job~slot~{start['slot']}"
        events += [(start["t"], 1, start), (end["t"], -1, end)]
    inside = most = 0
    for _, step, _ in sorted(events, key=lambda event: (event[0], event[1])):
        inside += step
        most = max(most, inside)
    assert most == 2
    starts = sorted((event for event in events if event[1] == 1), key=lambda event: event[0])
    by_slot = {
        slot: [event[2]["token"] for event in group]
        for slot, group in itertools.groupby(
            sorted(starts, key=lambda event: event[2]["slot"]), key=lambda event: event[2]["slot"]
        )
    }
    assert set(by_slot) == {"0", "1"}
    for tokens in by_slot.values():
        assert tokens == sorted(set(tokens))


def test_no_wait_with_every_slot_taken_exits_75(cli: Cli) -> None:
    """With the only slot held, `run --limit 1 --no-wait` exits 75 (busy) at once."""
    log, child = cli.child("holder")
    holder = cli.start("run", "job", "--limit", "1", "--owner", "a", *FAST, "--", *child)
    wait_for_event(log, "start", holder)
    busy = cli.run("run", "job", "--limit", "1", "--no-wait", "--owner", "b", *FAST, "--", "true")
    assert busy.returncode == 75, busy.stderr
    os.kill(holder.pid, signal.SIGTERM)
    assert holder.wait() == 128 + signal.SIGTERM


def test_bad_limits_are_refused(cli: Cli) -> None:
    """--limit 0 and --limit with --handover are configuration errors (exit 78, one line), as
    every bad option value is."""
    zero = cli.run("run", "job", "--limit", "0", *FAST, "--", "true")
    assert zero.returncode == 78 and "at least 1" in zero.stderr
    assert len(zero.stderr.strip().splitlines()) == 1, zero.stderr
    both = cli.run("run", "job", "--limit", "2", "--handover", *FAST, "--", "true")
    assert both.returncode == 78 and "--handover" in both.stderr
