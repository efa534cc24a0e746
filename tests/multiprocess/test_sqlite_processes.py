"""SQLite across real OS processes: exclusion, and failover after kill -9 (real time)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from .lease_worker import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def spawn(path: Path, owner: str, rounds: int, work: float, backend: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.multiprocess.lease_worker",
            str(path),
            owner,
            str(rounds),
            str(work),
            backend,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def reap(process: subprocess.Popen[str]) -> None:
    """Kill ``process`` if it still runs, wait for it, and close its output pipe."""
    if process.poll() is None:
        process.kill()
    process.wait()
    if process.stdout is not None:
        process.stdout.close()


def events(process: subprocess.Popen[str]) -> Iterator[dict[str, Any]]:
    assert process.stdout is not None
    for line in process.stdout:
        yield json.loads(line)


def wait_for(process: subprocess.Popen[str], event: str, limit: float) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    for item in events(process):
        if item["event"] == event:
            return item
        assert time.monotonic() < deadline, f"no {event!r} within {limit} s"
    raise AssertionError(f"process ended before {event!r}")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_two_processes_never_hold_at_once(tmp_path: Path, backend: str) -> None:
    """Two processes contending on one SQLite file never have overlapping guarded intervals."""
    db = tmp_path / "leases.sqlite3"
    procs = [spawn(db, f"p{i}", rounds=6, work=0.15, backend=backend) for i in range(2)]
    logs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        logs.append([json.loads(line) for line in out.splitlines()])
    intervals = []
    for log in logs:
        starts = [e for e in log if e["event"] == "start"]
        ends = [e for e in log if e["event"] == "end"]
        assert len(starts) == len(ends) == 6
        intervals += [(s["t"], e["t"], s["token"]) for s, e in zip(starts, ends, strict=True)]
    intervals.sort()
    for (_, end, _), (start, _, _) in itertools.pairwise(intervals):
        assert end <= start, "two processes held the lease at once"
    tokens = [token for _, _, token in intervals]
    assert tokens == sorted(set(tokens)) and len(tokens) == 12


def _last_renewal(db: Path, holder: str) -> float:
    """When (wall clock, seconds) ``holder`` last wrote the lease "job", from its record: the
    ``renewed_at`` its final write stamped before the write."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(db, timeout=5)) as conn:
        row = conn.execute("SELECT holder, renewed_at FROM leases WHERE name = 'job'").fetchone()
    assert row is not None and row[0] == holder, row
    return datetime.fromisoformat(row[1]).timestamp()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_kill_9_of_holder_fails_over_after_the_timeout(tmp_path: Path, backend: str) -> None:
    """After kill -9 of the holder, the other process acquires once the heartbeat timeout has
    passed since the holder's last renewal (read from the store), and not before."""
    db = tmp_path / "leases.sqlite3"
    holder = spawn(db, "holder", rounds=0, work=0, backend=backend)
    identity = wait_for(holder, "ready", 30)["identity"]
    wait_for(holder, "start", 30)
    contender = spawn(db, "contender", rounds=1, work=0.1, backend=backend)
    try:
        wait_for(contender, "ready", 30)
        time.sleep(2 * SETTINGS.heartbeat_interval)  # the contender is now waiting
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        # The holder's last renewal as the store has it: on a loaded machine it may have come
        # well over R before the kill, so the bound is taken from it, not from the kill.
        renewed = _last_renewal(db, identity)
        started = wait_for(contender, "start", 60)
        # Contenders wait L after the last change they saw, which came after that renewal.
        assert started["wall"] - renewed >= SETTINGS.heartbeat_timeout
        assert started["token"] == 2
        contender.wait(timeout=30)
    finally:
        for proc in (holder, contender):
            reap(proc)


def _wait_for_writes(db: Path, past: int, limit: float = 30.0) -> None:
    """Wait until the writers have taken the token past ``past`` (a loaded machine may need
    more than a fixed pause), reading the file as any reader would."""
    import sqlite3

    give_up = time.monotonic() + limit
    while True:
        try:
            with sqlite3.connect(db, timeout=5) as conn:
                row = conn.execute("SELECT fencing_token FROM leases WHERE name = 'job'").fetchone()
        except sqlite3.OperationalError:  # busy past the timeout: look again
            row = None
        if row is not None and row[0] > past:
            return
        assert time.monotonic() < give_up, f"no writes past token {past} in {limit} s"
        time.sleep(0.05)


def test_sqlite_survives_writers_killed_mid_write(tmp_path: Path) -> None:
    """kill -9 of processes in the middle of a stream of writes leaves a consistent file whose
    token never went backwards, and the lease is usable at once."""
    import sqlite3

    db = tmp_path / "leases.sqlite3"
    last_token = 0
    for _ in range(3):
        hammers = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.multiprocess.sqlite_hammer", str(db)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        try:
            for hammer in hammers:
                assert hammer.stdout is not None
                assert hammer.stdout.readline().strip() == "writing"
            _wait_for_writes(db, past=last_token + 20)  # killed in the middle of a stream
            assert all(hammer.poll() is None for hammer in hammers), "a writer died on its own"
        finally:
            for hammer in hammers:
                reap(hammer)
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            token = conn.execute("SELECT fencing_token FROM leases WHERE name = 'job'").fetchone()[
                0
            ]
        assert token > last_token
        last_token = token
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.multiprocess.lease_worker",
            str(db),
            "after",
            "1",
            "0",
            "asyncio",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    starts = [json.loads(line) for line in result.stdout.splitlines() if '"start"' in line]
    assert starts[0]["token"] == last_token + 1


def test_processes_first_opening_one_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Eight processes (trio and asyncio) that first open one missing file at the same instant,
    twenty times, each with a first get() and a first acquire: the schema is made once and no
    call fails."""
    rounds, count = 20, 8
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.multiprocess.first_open_worker",
                str(tmp_path),
                str(rounds),
                f"p{i}",
                ("trio", "asyncio")[i % 2],
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    streams = [events(worker) for worker in workers]
    failures = []
    try:
        for index in range(rounds):
            assert all(next(stream)["event"] == "ready" for stream in streams)
            assert not (tmp_path / f"db-{index}.sqlite3").exists()
            (tmp_path / f"go-{index}").touch()  # every process is polling for it: all start
            results = [next(stream) for stream in streams]
            failures += [(index, error) for result in results for error in result["errors"]]
            tokens = [token for result in results for token in result["tokens"]]
            assert tokens and len(set(tokens)) == len(tokens), tokens
        assert failures == []
        for worker in workers:
            assert worker.wait(timeout=30) == 0
    finally:
        for worker in workers:
            reap(worker)
