"""`trio-lease run` as real processes: exclusion, failover, busy codes, loss, signals, exit codes.

Every assertion about time is in the safety direction (never earlier than allowed) or has a
generous upper bound, so the tests do not depend on the machine's speed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import (
    FAST,
    PATIENCE,
    SETTINGS,
    Cli,
    L,
    Running,
    process_alive,
    read_events,
    wait_for_event,
)


def holder_and_waiter(
    cli: Cli,
) -> tuple[tuple[Path, Running, dict[str, Any]], tuple[Path, Running]]:
    """`trio-lease run job` as owner "first", its command started, and as "second", waiting
    for the lease: (first's log, process, start event), (second's log, process)."""
    first_log, first_child = cli.child("first")
    first = cli.start("run", "job", "--owner", "first", *FAST, "--", *first_child)
    first_start = wait_for_event(first_log, "start", first)
    second_log, second_child = cli.child("second", sleep=0.1)
    second = cli.start("run", "job", "--owner", "second", *FAST, "--", *second_child)
    second.wait_for_stderr("waiting for 'job'")
    return (first_log, first, first_start), (second_log, second)


def test_concurrent_runs_of_one_name_never_overlap(cli: Cli) -> None:
    """Three `trio-lease run` of one name started together run their commands one at a time."""
    runs = []
    for i in range(3):
        log, child = cli.child(f"child{i}", sleep=0.3)
        runs.append((log, cli.start("run", "job", "--owner", f"o{i}", *FAST, "--", *child)))
    assert [running.wait() for _, running in runs] == [0, 0, 0]
    intervals = []
    for log, _ in runs:
        start, end = wait_for_event(log, "start"), wait_for_event(log, "end")
        intervals.append((start["t"], end["t"], start["token"]))
    intervals.sort()
    for (_, end, _), (start, _, _) in itertools.pairwise(intervals):
        assert end <= start, f"two commands ran at once: {intervals}"
    assert [token for _, _, token in intervals] == [1, 2, 3]


def test_kill_9_of_the_holder_hands_over_only_after_the_heartbeat_timeout(cli: Cli) -> None:
    """After kill -9 of the holding `trio-lease run`, its command dies with it, and the waiting
    run starts its command no sooner than L after the holder's last renewal."""
    (first_log, first, first_start), (second_log, second) = holder_and_waiter(cli)

    # Kill right after a renewal lands. A read begun at `renewed_after` still showed the old
    # version, so the holder's last renewal committed after it: no contender may take over
    # before renewed_after + L.
    with contextlib.closing(sqlite3.connect(cli.db)) as db:
        query = "SELECT version FROM leases WHERE name = 'job'"
        renewed_after = time.monotonic()
        version = db.execute(query).fetchone()[0]
        while True:
            read_at = time.monotonic()
            if db.execute(query).fetchone()[0] != version:
                break
            renewed_after = read_at
            time.sleep(0.005)
    killed_at = time.monotonic()
    os.kill(first.pid, signal.SIGKILL)
    first.wait()

    while process_alive(first_start["pid"]):  # the kernel kills the orphan (PR_SET_PDEATHSIG)
        assert time.monotonic() < killed_at + PATIENCE, "the command outlived trio-lease"
        time.sleep(0.01)
    second_start = wait_for_event(second_log, "start", second)
    assert second_start["t"] - renewed_after >= L
    assert second_start["t"] - killed_at <= L + PATIENCE
    assert second_start["token"] == first_start["token"] + 1
    assert second.wait() == 0
    assert [e["event"] for e in read_events(first_log)] == ["start"]


def test_busy_lease_gives_exit_75_with_no_wait_and_124_on_timeout(cli: Cli) -> None:
    """While another run holds the lease, --no-wait exits 75 and --timeout exits 124, and
    neither starts its command."""
    holder_log, holder_child = cli.child("holder")
    holder = cli.start("run", "job", *FAST, "--", *holder_child)
    wait_for_event(holder_log, "start", holder)

    log, child = cli.child("never")
    busy = cli.run("run", "job", "--no-wait", *FAST, "--", *child)
    assert busy.returncode == 75, busy.stderr
    assert "is held by" in busy.stderr

    began = time.monotonic()
    timed_out = cli.run("run", "job", "--timeout", "1s", *FAST, "--", *child)
    assert timed_out.returncode == 124, timed_out.stderr
    assert time.monotonic() - began >= 1.0
    assert "not acquired within 1 s" in timed_out.stderr
    assert not log.exists()

    os.kill(holder.pid, signal.SIGTERM)
    assert holder.wait() == 128 + signal.SIGTERM


def test_forced_release_makes_the_holder_stop_its_command_and_exit_125(cli: Cli) -> None:
    """`release --force` frees the lease keeping its token; the holder notices at its next
    renewal, SIGTERMs its command and exits 125; the waiting run then gets a greater token."""
    (first_log, first, first_start), (second_log, second) = holder_and_waiter(cli)

    released = cli.run("release", "job", "--force")
    assert released.returncode == 0, released.stderr
    assert "released 'job' (was held by 'first_" in released.stdout

    wait_for_event(first_log, "sigterm", first)
    assert first.wait() == 125
    assert "was lost" in first.stderr()
    assert "the command was stopped" in first.stderr()
    assert wait_for_event(second_log, "start", second)["token"] == first_start["token"] + 1
    assert second.wait() == 0


def test_renewals_that_cannot_commit_stop_the_command_at_the_deadline(cli: Cli) -> None:
    """With the SQLite write lock held elsewhere, no renewal commits: at its deadline the holder
    SIGTERMs its command and exits 125."""
    log, child = cli.child("holder")
    holder = cli.start("run", "job", *FAST, "--", *child)
    wait_for_event(log, "start", holder)
    blocker = sqlite3.connect(cli.db, timeout=PATIENCE, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # SQLite's write lock: every renewal now times out
        locked_at = time.monotonic()
        sigterm = wait_for_event(log, "sigterm", holder)
        # No renewal committed after locked_at, so the deadline is at most D after it.
        assert sigterm["t"] - locked_at <= SETTINGS.deadline + PATIENCE
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert holder.wait() == 125
    assert "no renewal was confirmed before the holder's deadline" in holder.stderr()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_stops_the_command_releases_and_exits_128_plus_n(
    cli: Cli, signum: signal.Signals
) -> None:
    """SIGINT, SIGTERM or SIGHUP (a closed terminal) to `trio-lease run` SIGTERMs the command,
    releases the lease (status shows it free at once) and exits 130, 143 or 129."""
    log, child = cli.child("holder")
    holder = cli.start("run", "job", *FAST, "--", *child)
    wait_for_event(log, "start", holder)
    os.kill(holder.pid, signum)
    assert holder.wait() == 128 + signum
    assert [e["event"] for e in read_events(log)] == ["start", "sigterm"]
    [row] = cli.status("job")
    assert row["holder"] is None
    assert row["fencing_token"] == 1


def test_command_ignoring_sigterm_is_killed_after_the_stop_timeout(cli: Cli) -> None:
    """A command that ignores SIGTERM gets SIGKILL once --stop-timeout has passed, not before."""
    log, child = cli.child("stubborn", ignore_term=True)
    holder = cli.start("run", "job", *FAST, "--", *child)
    started = wait_for_event(log, "start", holder)
    signalled_at = time.monotonic()
    os.kill(holder.pid, signal.SIGTERM)
    wait_for_event(log, "sigterm", holder)
    while process_alive(started["pid"]):
        assert time.monotonic() < signalled_at + PATIENCE, "the command was never killed"
        time.sleep(0.005)
    # trio-lease sent SIGTERM no sooner than signalled_at, and SIGKILL stop_timeout after that.
    assert time.monotonic() - signalled_at >= SETTINGS.stop_timeout
    assert holder.wait() == 128 + signal.SIGTERM
    assert "end" not in [e["event"] for e in read_events(log)]


@pytest.mark.parametrize(
    ("exit_code", "kill_self", "expected"),
    [(3, None, 3), (0, signal.SIGKILL, 128 + signal.SIGKILL)],
    ids=["exit-3", "killed-by-signal-9"],
)
def test_exit_code_of_the_command_passes_through(
    cli: Cli, exit_code: int, kill_self: int | None, expected: int
) -> None:
    """`trio-lease run` exits with the command's code, or 128+N if a signal N killed it, and
    leaves the lease free."""
    log, child = cli.child("job", sleep=0, exit_code=exit_code, kill_self=kill_self)
    result = cli.run("run", "job", *FAST, "--", *child)
    assert result.returncode == expected, result.stderr
    assert wait_for_event(log, "start")["name"] == "job"
    [row] = cli.status("job")
    assert row["holder"] is None


def test_missing_command_exits_78_without_touching_the_lease(cli: Cli) -> None:
    """A CMD that cannot be found exits 78 before the lease is acquired (no record written)."""
    result = cli.run("run", "job", *FAST, "--", "no-such-command-trio-lease-test")
    assert result.returncode == 78
    assert "cannot start 'no-such-command-trio-lease-test'" in result.stderr
    assert not cli.db.exists()  # nothing written, not even the database
