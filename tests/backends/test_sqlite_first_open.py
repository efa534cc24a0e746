"""Many backend objects first opening one brand-new SQLite file at once: one schema, no error.

Each object's first open finds no tables and creates them under SQLite's write lock, checking
again under it; the counter row was inserted by every creator that came second (an aggregate
``SELECT`` makes a row even where its ``WHERE`` is false), so a first ``get()`` failed with
"UNIQUE constraint failed: version_counter.id" (``trio_lease/backends/sqlite/_file.py``).
The processes' side: tests/multiprocess/test_sqlite_processes.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from trio_lease import BackendUnavailable, Lease, LeaseBusy, LeaseRecord, LeaseSettings
from trio_lease.backends.sqlite import SqliteBackend
from trio_lease.backends.sqlite._file import TRIGGERS

pytestmark = pytest.mark.anyio

COUNT = 12  # backend objects per file
ROUNDS = 10  # fresh files
HOLD = 0.3  # seconds the winner holds the lease: the others find it held (LeaseBusy)


@pytest.fixture
def anyio_backend(real_time_backend: str) -> str:
    """SQLite uses worker threads: real time on both backends."""
    return real_time_backend


async def first_get(backend: SqliteBackend, errors: list[Exception]) -> None:
    try:
        await backend.get("job")
    except Exception as exc:
        errors.append(exc)


async def first_acquire(
    backend: SqliteBackend, owner: str, errors: list[Exception], tokens: list[int]
) -> None:
    try:
        async with Lease("job", owner, backend, LeaseSettings()).try_held() as grant:
            tokens.append(grant.fencing_token)
            await anyio.sleep(HOLD)
    except LeaseBusy:
        pass  # another object holds it: the acquire itself worked
    except Exception as exc:
        errors.append(exc)


async def test_backends_first_opening_one_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Backend objects whose first call (a get() or an acquire) opens one brand-new file, all
    at once: none fails, and the file has one counter row and every trigger."""
    for index in range(ROUNDS):
        path = tmp_path / f"new-{index}.sqlite3"
        errors: list[Exception] = []
        tokens: list[int] = []
        backends = [SqliteBackend(path) for _ in range(COUNT)]
        try:
            async with anyio.create_task_group() as tg:
                for number, backend in enumerate(backends):
                    if number % 2:
                        tg.start_soon(first_acquire, backend, f"owner-{number}", errors, tokens)
                    else:
                        tg.start_soon(first_get, backend, errors)
        finally:
            for backend in backends:
                await backend.aclose()
        assert errors == []
        assert tokens and len(set(tokens)) == len(tokens)
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM version_counter").fetchone() == (1,)
            names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        conn.close()
        assert set(TRIGGERS) <= names


async def test_a_failed_read_says_it_wrote_nothing_and_a_failed_write_says_its_outcome_is_unknown(
    tmp_path: Path,
) -> None:
    """A get() that fails (the file locked past busy_timeout) says the read wrote nothing; a
    create() that fails the same way says the outcome of its write is unknown."""
    path = tmp_path / "locked.sqlite3"
    locker = sqlite3.connect(path, isolation_level=None)  # a rollback journal: locks readers
    try:
        locker.execute("BEGIN EXCLUSIVE")
        async with SqliteBackend(path, busy_timeout=0.05) as reader:
            with pytest.raises(BackendUnavailable, match="locked") as read:
                await reader.get("job")
        assert "this read wrote nothing" in str(read.value)
        assert "outcome of a write" not in str(read.value)
        async with SqliteBackend(path, busy_timeout=0.05) as writer:
            with pytest.raises(BackendUnavailable, match="locked") as written:
                await writer.create(LeaseRecord("job", "me", 10.0, 1))
        assert "the outcome of a write is unknown" in str(written.value)
    finally:
        locker.close()
