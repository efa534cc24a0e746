"""Cooperative handover on SQLite: the column handover_to, stored, read, and added to old files."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from tests.backends._handover import hand_over
from trio_lease import Lease, LeaseRecord, LeaseSettings
from trio_lease.backends.sqlite import SqliteBackend
from trio_lease.backends.sqlite._file import TRIGGERS

pytestmark = pytest.mark.anyio

#: Renewals a minute apart: within a test only the watch (the shared feed) can tell the holder.
SLOW = LeaseSettings(heartbeat_timeout=180, heartbeat_interval=60, lease_operation_timeout=2)

#: The schema of versions before handover (no column handover_to).
OLD_SCHEMA = (
    "CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, lease_duration REAL NOT "
    "NULL, fencing_token INTEGER NOT NULL, acquired_at TEXT, renewed_at TEXT, version INTEGER "
    "NOT NULL)",
    "CREATE TABLE version_counter (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER)",
    "INSERT INTO version_counter VALUES (1, 3)",
    "INSERT INTO leases VALUES ('job', 'alice', 15.0, 7, NULL, NULL, 3)",
)


@pytest.fixture
def anyio_backend(real_time_backend: str) -> str:
    """SQLite uses worker threads: real time on both backends."""
    return real_time_backend


def old_file(path: Path) -> Path:
    """A database as an earlier version made it: no column handover_to, one lease held, in
    WAL mode (every version's connect() switched the file to WAL)."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        for statement in OLD_SCHEMA:
            conn.execute(statement)
    return path


def columns(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return [row[1] for row in conn.execute("PRAGMA table_info(leases)")]


async def test_the_holder_is_told_and_the_requester_gets_the_lease_next(tmp_path: Path) -> None:
    """request_handover on SQLite: grant.handover_requested fires (through the shared feed, long
    before a renewal), the requester is next."""
    path = tmp_path / "leases.sqlite3"
    holder = Lease("job", "a", SqliteBackend(path, watch_interval=0.01), SLOW)
    requester = Lease("job", "b", SqliteBackend(path, watch_interval=0.01), SLOW)
    with anyio.fail_after(10):
        order, _ = await hand_over(holder, requester)
    assert order == ["a:1", "a:asked", "b:2"]


async def test_handover_to_is_stored_read_and_cleared(tmp_path: Path) -> None:
    """create, update and get keep handover_to; a new connection reads it; "" clears it."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        made = await backend.create(LeaseRecord("job", "a", 5.0, 1, handover_to="b"))
        assert made.handover_to == "b"
        cleared = await backend.update(dataclasses.replace(made, handover_to=""), made.version)
        assert cleared.handover_to == ""
        asked = await backend.update(dataclasses.replace(cleared, handover_to="c"), cleared.version)
        assert asked.handover_to == "c"
    async with SqliteBackend(path) as other:
        got = await other.get("job")
        assert got is not None and got.handover_to == "c" and not got.unreadable


async def test_an_old_file_opens_works_and_gains_the_column(tmp_path: Path) -> None:
    """A file without handover_to: its rows read as "" and it gains the column on open."""
    path = old_file(tmp_path / "old.sqlite3")
    async with SqliteBackend(path) as backend:
        got = await backend.get("job")
        assert got is not None and not got.unreadable
        assert (got.holder, got.fencing_token, got.handover_to) == ("alice", 7, "")
        assert "handover_to" in columns(path)
        asked = await backend.update(dataclasses.replace(got, handover_to="bob"), got.version)
        assert asked.handover_to == "bob"
        assert (await backend.get("job")) == asked
    async with SqliteBackend(path) as again:  # opening a file that has it already changes nothing
        assert (await again.get("job")) == asked
    assert columns(path).count("handover_to") == 1


async def test_connections_opening_an_old_file_at_once_all_work(tmp_path: Path) -> None:
    """Racing upgrades of one old file (one connection each, as processes have): one adds the
    column, the others open without an error."""
    path = old_file(tmp_path / "old.sqlite3")
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def open_and_read() -> None:
        backend = SqliteBackend(path)
        try:
            start.wait()
            record = backend._with_conn(lambda conn: backend._select(conn, "job"))
            assert record is not None and record.handover_to == ""
        except BaseException as exc:  # reported below, with the thread's error
            errors.append(exc)
        finally:
            if backend._conn is not None:
                backend._conn.close()

    threads = [threading.Thread(target=open_and_read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert columns(path).count("handover_to") == 1
    with contextlib.closing(sqlite3.connect(path)) as conn:  # and the triggers, once each
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        assert sorted(rows) == sorted(TRIGGERS.items())


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        pytest.param(42, "handover_to: expected a string, got an integer", id="integer"),
        pytest.param(b"bob", "handover_to: expected text, got a blob", id="blob"),
        pytest.param(None, "handover_to: expected a string, got null", id="null"),
    ],
)
async def test_an_unreadable_handover_to_makes_the_record_unreadable(
    tmp_path: Path, stored: object, problem: str
) -> None:
    """handover_to of the wrong type (another program's row): an unreadable record."""
    path = tmp_path / "foreign.sqlite3"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(
            "CREATE TABLE leases (name PRIMARY KEY, holder, lease_duration, fencing_token, "
            "acquired_at, renewed_at, version, handover_to)"
        )
        conn.execute("CREATE TABLE version_counter (id INTEGER PRIMARY KEY, value)")
        conn.execute("INSERT INTO version_counter VALUES (1, 5)")
        conn.execute(
            "INSERT INTO leases VALUES ('job', 'alice', 15.0, 7, NULL, NULL, 5, ?)", (stored,)
        )
    async with SqliteBackend(path) as backend:
        got = await backend.get("job")
    assert got is not None and got.unreadable == problem
    assert (got.holder, got.handover_to, got.is_free) == ("", "", False)
