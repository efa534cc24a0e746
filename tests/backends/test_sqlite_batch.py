"""The updates one SQLite backend object receives in one event-loop turn form one batch.

Renewals fall due on one grid (``_algorithm.next_renewal``), so many arrive together: they share
one worker-thread call and one transaction (``SqliteBackend._wait`` / ``_write_batch`` in
trio_lease/backends/sqlite/_backend.py), each row still compared and written on its own version,
and each caller gets its own record or its own error.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import threading
import traceback
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from trio_lease import BackendUnavailable, ConflictError, LeaseRecord
from trio_lease.backends.sqlite import SqliteBackend

from ._sqlite import shell

# SQLite uses worker threads: real time on both backends; another program's connection.
from .test_sqlite_edits import anyio_backend as anyio_backend
from .test_sqlite_edits import stored

pytestmark = pytest.mark.anyio


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """The test's lease file."""
    return tmp_path / "leases.sqlite3"


@pytest.fixture
async def backend(path: Path) -> AsyncIterator[SqliteBackend]:
    """A backend with the default options on the test's lease file, closed after the test."""
    async with SqliteBackend(path) as opened:
        yield opened


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
    backend: SqliteBackend, records: list[LeaseRecord]
) -> list[LeaseRecord | Exception]:
    """Every record updated on its own version, all started in one turn; each caller's result
    or error."""
    results: list[LeaseRecord | Exception] = [ValueError("not run")] * len(records)

    async def one(i: int) -> None:
        try:
            results[i] = await backend.update(records[i], records[i].version)
        except Exception as exc:
            results[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(len(records)):
            tg.start_soon(one, i)
    return results


async def test_updates_of_one_turn_share_one_transaction_each_on_its_own_version(
    path: Path, backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Updates started together run as one batch; each gets its own row at a new version."""
    records = await created(backend, 5)
    sizes = count_batches(backend, monkeypatch)
    results = await update_all(backend, records)
    assert sizes == [5]
    versions = set()
    for record, result in zip(records, results, strict=True):
        assert isinstance(result, LeaseRecord)
        assert result.name == record.name
        assert int(result.version) > int(record.version)
        assert stored(path, record.name)[1] == int(result.version)
        assert result == await backend.get(record.name)  # what the row reads back as
        versions.add(result.version)
    assert len(versions) == 5  # every row its own version


async def test_a_conflict_on_one_row_leaves_the_others_written(
    path: Path, backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale version fails only its own caller; the batch's other rows are written."""
    records = await created(backend, 3)
    moved = await backend.update(records[1], records[1].version)  # records[1] is stale now
    sizes = count_batches(backend, monkeypatch)
    results = await update_all(backend, records)
    assert sizes == [3]
    assert isinstance(results[1], ConflictError)
    assert stored(path, "job1")[1] == int(moved.version)  # the stale write wrote nothing
    for i in (0, 2):
        result = results[i]
        assert isinstance(result, LeaseRecord)
        assert stored(path, f"job{i}")[1] == int(result.version)


async def test_a_failed_transaction_fails_every_caller_with_its_own_typed_error(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose transaction cannot start fails every caller, each with its own error."""
    async with SqliteBackend(path, busy_timeout=0.1) as backend:
        records = await created(backend, 3)
        sizes = count_batches(backend, monkeypatch)
        with shell(path) as other:
            other.execute("BEGIN IMMEDIATE")  # another program holds the write lock
            results = await update_all(backend, records)
            other.execute("ROLLBACK")
        assert sizes == [3]
        assert all(isinstance(result, BackendUnavailable) for result in results)
        assert len({id(result) for result in results}) == 3
        for record in records:
            assert stored(path, record.name)[1] == int(record.version)  # nothing written


async def until(condition: Callable[[], bool]) -> None:
    """Wait on the event loop until ``condition()`` holds (the callers bound the wait)."""
    while not condition():
        await anyio.sleep(0.001)


def running(batches: list[threading.Event]) -> Callable[[], bool]:
    """True once a worker thread runs a batch's transaction (see :func:`hooked`)."""
    return lambda: any(event.is_set() for event in batches)


def waiting(limiter: anyio.CapacityLimiter, count: int) -> Callable[[], bool]:
    """True while ``count`` calls wait for a token of ``limiter`` (see :func:`threads_held`)."""
    return lambda: limiter.statistics().tasks_waiting == count


def hooked(backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch) -> list[threading.Event]:
    """One event per batch a worker thread claimed and started writing, set as it starts."""
    started: list[threading.Event] = []
    write_batch = backend._write_batch

    def noted(conn: sqlite3.Connection, items: list[Any]) -> Any:
        event = threading.Event()
        started.append(event)
        event.set()
        return write_batch(conn, items)

    monkeypatch.setattr(backend, "_write_batch", noted)
    return started


class Callers:
    """One caller per record, each updating it on its own version in its own cancel scope.

    ``results`` holds the record of each caller whose update returned, by index; ``scopes[i]``
    and :meth:`cancel` cancel caller ``i``.
    """

    def __init__(self, backend: SqliteBackend, records: list[LeaseRecord]) -> None:
        self.backend = backend
        self.records = records
        self.results: dict[int, LeaseRecord] = {}
        self.scopes = [anyio.CancelScope() for _ in records]
        self.left = [anyio.Event() for _ in records]

    async def update(self, i: int) -> None:
        """Caller ``i``: its update, then it leaves (returned or cancelled)."""
        record = self.records[i]
        with self.scopes[i]:
            self.results[i] = await self.backend.update(record, record.version)
        self.left[i].set()

    async def cancel(self, i: int) -> None:
        """Cancel caller ``i`` and wait until it left."""
        self.scopes[i].cancel()
        await self.left[i].wait()


def blocked_threads() -> list[str]:
    """The threads waiting in ``threading.Event.wait`` or inside the SQLite backend's module.

    The backend's waiters never wait in a worker thread: after every update returned, no
    thread of this process may be in either place (a thread left waiting for a batch that
    never runs also keeps the interpreter from exiting).
    """
    blocked = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        for entry in traceback.extract_stack(frame):
            if entry.filename.endswith(os.path.join("sqlite", "_backend.py")) or (
                entry.filename == threading.__file__
                and entry.name == "wait"
                and "self._cond.wait" in (entry.line or "")
            ):
                blocked.append(f"thread {ident}: {entry.filename}:{entry.lineno} {entry.name}")
    return blocked


@contextlib.asynccontextmanager
async def threads_held() -> AsyncIterator[anyio.CapacityLimiter]:
    """The default worker-thread limiter down to one token, held by this task meanwhile.

    A ``to_thread`` call made meanwhile waits for a token: its thread does not start, and a
    cancellation then reaches it before the worker picks up the call (the race under test).
    On leaving, the calls still waiting get the token one after another, in order.
    """
    limiter = anyio.to_thread.current_default_thread_limiter()
    total = limiter.total_tokens
    limiter.total_tokens = 1
    try:
        await limiter.acquire()
        try:
            yield limiter
        finally:
            limiter.release()
        # The calls that waited run one at a time, in the order they asked for a thread.
        await until(waiting(limiter, 0))
    finally:
        limiter.total_tokens = total


async def test_a_driver_cancelled_before_its_thread_starts_leaves_the_batch_to_the_others(
    path: Path, backend: SqliteBackend
) -> None:
    """The batch's sender cancelled before a thread took its call: the others send it."""
    records = await created(backend, 3)
    callers = Callers(backend, records)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg, threads_held() as limiter:
            for i in range(3):  # the first in the batch (caller 0, the driver) sends it
                tg.start_soon(callers.update, i)
            # The driver's call waits for a thread: the batch is sent, not claimed.
            await until(waiting(limiter, 1))
            await callers.cancel(0)
            # The next waiter sends the batch again: its call waits for the token.
            await until(waiting(limiter, 1))
            assert callers.results == {}
    assert callers.scopes[0].cancelled_caught
    assert sorted(callers.results) == [1, 2]
    for i, result in callers.results.items():
        assert stored(path, f"job{i}")[1] == int(result.version)
    # The cancelled update left before any thread took its batch: it is not written.
    assert stored(path, "job0")[1] == int(records[0].version)
    assert blocked_threads() == []


async def test_every_caller_cancelled_before_a_thread_starts_leaves_nothing_behind(
    path: Path, backend: SqliteBackend
) -> None:
    """A batch whose callers all left before any thread took it writes nothing, later or ever."""
    records = await created(backend, 2)
    with anyio.fail_after(20):
        async with threads_held() as limiter, anyio.create_task_group() as tg:
            for record in records:
                tg.start_soon(backend.update, record, record.version)
            await until(waiting(limiter, 1))
            tg.cancel_scope.cancel()
        for _ in range(3):  # a late thread of an abandoned call must find nothing to do
            await anyio.to_thread.run_sync(lambda: None)
    for record in records:
        assert stored(path, record.name)[1] == int(record.version)
    again = await backend.update(records[0], records[0].version)  # the backend goes on
    assert int(again.version) > int(records[0].version)
    assert blocked_threads() == []


async def test_a_driver_cancelled_while_its_batch_runs_leaves_the_others_results(
    path: Path, backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelling the caller that sent the batch, once a thread runs it, changes no result."""
    records = await created(backend, 3)
    batches = hooked(backend, monkeypatch)
    callers = Callers(backend, records)
    with shell(path) as lock, anyio.fail_after(20):
        lock.execute("BEGIN IMMEDIATE")  # the batch's transaction waits for this lock
        async with anyio.create_task_group() as tg:
            for i in range(3):  # caller 0, first in the batch, sends it and waits for the thread
                tg.start_soon(callers.update, i)
            await until(running(batches))
            await callers.cancel(0)
            assert callers.results == {}  # still waiting for the lock
            lock.execute("ROLLBACK")
    assert len(batches) == 1  # the others waited for that thread; none sent it again
    assert sorted(callers.results) == [1, 2]
    for i, result in callers.results.items():
        assert result.name == f"job{i}"
        assert stored(path, f"job{i}")[1] == int(result.version)
    # The cancelled update was claimed: its outcome is unknown to its caller, and it landed.
    assert int(str(stored(path, "job0")[1])) > int(records[0].version)
    assert blocked_threads() == []


async def test_a_waiter_cancelled_while_another_drives_is_written_only_if_claimed(
    path: Path, backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A waiter that leaves before a thread claims the batch is dropped; one after, written."""
    records = await created(backend, 4)
    batches = hooked(backend, monkeypatch)
    callers = Callers(backend, records)
    with shell(path) as lock, anyio.fail_after(20):
        lock.execute("BEGIN IMMEDIATE")
        async with anyio.create_task_group() as tg:
            async with threads_held() as limiter:
                for i in range(4):
                    tg.start_soon(callers.update, i)
                await until(waiting(limiter, 1))
                await callers.cancel(1)  # before the claim: not written
            await until(running(batches))
            await callers.cancel(2)  # after the claim: written, its caller never knows
            lock.execute("ROLLBACK")
    assert sorted(callers.results) == [0, 3]
    assert stored(path, "job1")[1] == int(records[1].version)
    assert int(str(stored(path, "job2")[1])) > int(records[2].version)
    for i in (0, 3):
        assert stored(path, f"job{i}")[1] == int(callers.results[i].version)
    assert blocked_threads() == []


async def test_a_backend_closed_with_a_batch_pending_answers_every_caller(path: Path) -> None:
    """Closing the backend while a batch waits to be sent: each caller gets a record or a
    typed error, all the same way (one transaction), and no thread stays behind."""
    backend = SqliteBackend(path)
    records = await created(backend, 3)
    results: list[LeaseRecord | Exception] = []

    async def updates() -> None:
        results.extend(await update_all(backend, records))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg, threads_held() as limiter:
            tg.start_soon(backend.aclose)  # its call waits for a thread, first in line
            await until(waiting(limiter, 1))
            tg.start_soon(updates)  # the batch's call waits behind it
            await until(waiting(limiter, 2))
    assert len(results) == 3
    assert all(isinstance(result, BackendUnavailable) for result in results)
    assert "closed" in str(results[0])
    for record in records:
        assert stored(path, record.name)[1] == int(record.version)
    assert blocked_threads() == []


async def test_a_caller_cancelled_before_its_batch_is_sent_writes_nothing(
    path: Path, backend: SqliteBackend
) -> None:
    """An update cancelled before its batch left the event loop is not written."""
    (record,) = await created(backend, 1)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await backend.update(record, record.version)
    assert scope.cancelled_caught
    assert stored(path, "job0")[1] == int(record.version)
    again = await backend.update(record, record.version)  # the backend goes on
    assert int(again.version) > int(record.version)
