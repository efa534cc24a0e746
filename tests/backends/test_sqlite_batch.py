"""The updates one SQLite backend object receives in one event-loop turn form one batch.

Renewals fall due on one grid (``_algorithm.next_renewal``), so many arrive together: they share
one worker-thread call and one transaction (``SqliteBackend._wait`` / ``_write_batch`` in
trio_lease/backends/sqlite/_backend.py), each row still compared and written on its own version,
and each caller gets its own record or its own error.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from trio_lease import BackendUnavailable, ConflictError, LeaseRecord
from trio_lease.backends.sqlite import SqliteBackend

# SQLite uses worker threads: real time on both backends; another program's connection.
from .test_sqlite_edits import anyio_backend as anyio_backend
from .test_sqlite_edits import shell, stored

pytestmark = pytest.mark.anyio


async def created(backend: SqliteBackend, count: int) -> list[LeaseRecord]:
    """``job0`` .. ``job{count-1}``, each created on its own."""
    return [await backend.create(LeaseRecord(f"job{i}", "alice", 5.0, 1)) for i in range(count)]


def count_batches(backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of updates in each batch the backend sends from now on."""
    sizes: list[int] = []
    write_batch = backend._write_batch

    def counted(conn: sqlite3.Connection, items: list[Any]) -> Any:
        sizes.append(sum(item is not None for item in items))
        return write_batch(conn, items)

    monkeypatch.setattr(backend, "_write_batch", counted)
    return sizes


async def update_all(
    backend: SqliteBackend, updates: list[tuple[LeaseRecord, str]]
) -> list[LeaseRecord | Exception]:
    """Every update started in one turn; each caller's result or error."""
    results: list[LeaseRecord | Exception] = [ValueError("not run")] * len(updates)

    async def one(i: int) -> None:
        try:
            results[i] = await backend.update(*updates[i])
        except Exception as exc:
            results[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(len(updates)):
            tg.start_soon(one, i)
    return results


async def test_updates_of_one_turn_share_one_transaction_each_on_its_own_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Updates started together run as one batch; each gets its own row at a new version."""
    async with SqliteBackend(tmp_path / "leases.sqlite3") as backend:
        records = await created(backend, 5)
        sizes = count_batches(backend, monkeypatch)
        results = await update_all(backend, [(r, r.version) for r in records])
        assert sizes == [5]
        versions = set()
        for record, result in zip(records, results, strict=True):
            assert isinstance(result, LeaseRecord)
            assert result.name == record.name
            assert int(result.version) > int(record.version)
            assert stored(tmp_path / "leases.sqlite3", record.name)[1] == int(result.version)
            versions.add(result.version)
        assert len(versions) == 5  # every row its own version


async def test_a_conflict_on_one_row_leaves_the_others_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale version fails only its own caller; the batch's other rows are written."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        records = await created(backend, 3)
        moved = await backend.update(records[1], records[1].version)  # records[1] is stale now
        sizes = count_batches(backend, monkeypatch)
        results = await update_all(backend, [(r, r.version) for r in records])
        assert sizes == [3]
        assert isinstance(results[1], ConflictError)
        assert stored(path, "job1")[1] == int(moved.version)  # the stale write wrote nothing
        for i in (0, 2):
            result = results[i]
            assert isinstance(result, LeaseRecord)
            assert stored(path, f"job{i}")[1] == int(result.version)


async def test_a_failed_transaction_fails_every_caller_with_its_own_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose transaction cannot start fails every caller, each with its own error."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path, busy_timeout=0.1) as backend:
        records = await created(backend, 3)
        sizes = count_batches(backend, monkeypatch)
        with shell(path) as other:
            other.execute("BEGIN IMMEDIATE")  # another program holds the write lock
            results = await update_all(backend, [(r, r.version) for r in records])
            other.execute("ROLLBACK")
        assert sizes == [3]
        assert all(isinstance(result, BackendUnavailable) for result in results)
        assert len({id(result) for result in results}) == 3
        for record in records:
            assert stored(path, record.name)[1] == int(record.version)  # nothing written


async def test_a_caller_cancelled_while_its_batch_runs_leaves_the_others_results(
    tmp_path: Path,
) -> None:
    """Cancelling the caller that sent the batch does not change the others' results."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        records = await created(backend, 3)
        results: dict[int, LeaseRecord] = {}
        cancelled = anyio.Event()

        async def first() -> None:
            with anyio.move_on_after(0.2):  # the batch waits for the write lock meanwhile
                await backend.update(records[0], records[0].version)
            cancelled.set()

        async def other(i: int) -> None:
            results[i] = await backend.update(records[i], records[i].version)

        with shell(path) as lock:
            lock.execute("BEGIN IMMEDIATE")
            async with anyio.create_task_group() as tg:
                tg.start_soon(first)  # first in the batch: it sends it and waits for the thread
                tg.start_soon(other, 1)
                tg.start_soon(other, 2)
                await cancelled.wait()
                assert results == {}  # still waiting for the lock
                lock.execute("ROLLBACK")
        assert sorted(results) == [1, 2]
        for i, result in results.items():
            assert result.name == f"job{i}"
            assert stored(path, f"job{i}")[1] == int(result.version)
        # The cancelled update was sent: its outcome is unknown to its caller, and it landed.
        assert int(str(stored(path, "job0")[1])) > int(records[0].version)


async def test_a_caller_cancelled_before_its_batch_is_sent_writes_nothing(
    tmp_path: Path,
) -> None:
    """An update cancelled before its batch left the event loop is not written."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        (record,) = await created(backend, 1)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await backend.update(record, record.version)
        assert scope.cancelled_caught
        assert stored(path, "job0")[1] == int(record.version)
        again = await backend.update(record, record.version)  # the backend goes on
        assert int(again.version) > int(record.version)
