"""A database file rewritten in place from an older copy while in use is refused.

``cp backup.sqlite3 leases.sqlite3`` (or a restore tool writing into the file) keeps the inode,
so the identity check of ``test_sqlite_file_identity.py`` does not see it. Before, a ``get``
then reported the old rows as current (a lease free, or held by an old holder, while its holder
renewed) and the counter issued versions again; only a write whose compared version was above
the restored counter noticed. Now each backend object keeps the highest version counter it read
or wrote, and a counter below it raises ``LeaseConfigError`` ("went back in time") on that call
and on every later one (``trio_lease/backends/sqlite/_identity.py``, ``check_counter``).

A restore is made here as a user's would be with the writers idle: SQLite's WAL checkpointed
into the file (as ``sqlite3 leases.sqlite3 'PRAGMA wal_checkpoint(TRUNCATE)'``, or as SQLite
does on its own), then the copy's bytes written over the file's (``cp`` truncates and writes the
same inode). Pages still in the WAL would be read over the restored file's instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest

from tests._watching import first_state
from trio_lease import Lease, LeaseConfigError, LeaseLost, LeaseRecord, LeaseSettings
from trio_lease.backends.sqlite import SqliteBackend
from trio_lease.backends.sqlite._identity import DatabaseFile

from ._feed import LIMIT, refused_after, until

pytestmark = pytest.mark.anyio

WENT_BACK = "went back in time while this process used it"
#: Renewals a minute apart: nothing is written unless a test writes.
SLOW = LeaseSettings(heartbeat_timeout=180, heartbeat_interval=60, lease_operation_timeout=2)
#: L = 1.2 s, R = 0.3 s, T = 0.2 s: a holder whose renewals fail loses within a second.
FAST = LeaseSettings(
    heartbeat_timeout=1.2, heartbeat_interval=0.3, lease_operation_timeout=0.2, stop_timeout=0.1
)


@pytest.fixture
def anyio_backend(real_time_backend: str) -> str:
    """SQLite uses worker threads: real time on both backends."""
    return real_time_backend


def checkpoint(path: Path) -> None:
    """Another program moves every page of the WAL into the file and empties the WAL."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0


def snapshot(path: Path) -> bytes:
    """A backup of the file as it is now (``cp leases.sqlite3 backup.sqlite3``)."""
    checkpoint(path)
    return path.read_bytes()


def restore(path: Path, backup: bytes) -> None:
    """``cp backup.sqlite3 leases.sqlite3``: the backup's bytes written into the same file."""
    inode = path.stat().st_ino
    checkpoint(path)
    path.write_bytes(backup)  # O_TRUNC on the file that is there: the same inode
    assert path.stat().st_ino == inode


@contextlib.contextmanager
def idle(*backends: SqliteBackend) -> Iterator[None]:
    """No call of ``backends`` (nor of their shared watch) runs meanwhile: writers are idle."""
    with contextlib.ExitStack() as stack:
        for backend in backends:
            stack.enter_context(backend._lock)
            if backend._feed is not None:
                stack.enter_context(backend._feed._lock)
        yield


def calls(backend: SqliteBackend, job: LeaseRecord) -> dict[str, Callable[[], Awaitable[object]]]:
    """Every call of the SPI, on lease ``job`` (held at its version) and one never made."""
    return {
        "get": lambda: backend.get(job.name),
        "get-missing": lambda: backend.get("later"),
        "update": lambda: backend.update(job, job.version),
        "create": lambda: backend.create(LeaseRecord("new", "alice", 30.0, 1)),
        "names": backend.names,
        "watch": lambda: first_state(backend, job.name),
    }


@pytest.mark.parametrize("first", ["get", "get-missing", "update", "create", "names", "watch"])
async def test_every_call_after_an_in_place_restore_raises(tmp_path: Path, first: str) -> None:
    """After the file was rewritten from a backup in place, whichever call comes first raises
    LeaseConfigError saying the file went back in time and what to do; so does every call
    after it, also once other processes wrote the counter past where it was, and nothing is
    written. (Before: ``get`` showed the backup's rows, ``update`` and ``create`` wrote.)"""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        job = await backend.create(LeaseRecord("job", "alice", 30.0, 1))
        other = await backend.create(LeaseRecord("other", "bob", 30.0, 1))
        for _ in range(3):
            other = await backend.update(other, other.version)
        backup, restored = snapshot(path), other  # counter 5: job at 1, no lease "later"
        for _ in range(4):
            other = await backend.update(other, other.version)
        await backend.create(LeaseRecord("later", "carol", 30.0, 1))  # counter 10
        with idle(backend):
            restore(path, backup)
        spi = calls(backend, job)
        with pytest.raises(LeaseConfigError, match=WENT_BACK) as caught:
            await spi[first]()
        said = str(caught.value)
        assert str(path) in said and "restored or rewritten from an older copy" in said
        assert "check which holder is real" in said.lower() and "restart the processes" in said
        async with SqliteBackend(path) as newcomer:  # a process started after the restore
            for _ in range(10):
                restored = await newcomer.update(restored, restored.version)  # counter 15
        for call in spi.values():
            with pytest.raises(LeaseConfigError, match=WENT_BACK):
                await call()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT name, version FROM leases ORDER BY name").fetchall()
    assert rows == [("job", 1), ("other", 15)]


async def test_a_counter_read_before_another_connection_saw_more_is_no_time_travel(
    tmp_path: Path,
) -> None:
    """A statement's counter is held against the mark as it was when the statement began: a
    connection that started reading before another one wrote a higher value is not refused,
    one that reads below that earlier mark is."""
    file = DatabaseFile(tmp_path / "leases.sqlite3", 5.0)
    seen = file.counter_seen
    file.check_counter(7, seen)  # another connection wrote 7
    file.check_counter(5, seen)  # this one's snapshot began before: older, not back in time
    file.check_counter("x", file.counter_seen)  # nothing to compare
    assert file.counter_seen == 7 and file.current() is False  # never opened: not current
    with pytest.raises(LeaseConfigError, match=WENT_BACK):
        file.check_counter(6, file.counter_seen)
    with pytest.raises(LeaseConfigError, match=WENT_BACK):
        file.open()


async def test_the_shared_watch_stops_following_a_file_that_went_back(tmp_path: Path) -> None:
    """The poller, its connection open, reads the restored counter: LeaseConfigError ends its
    run, instead of publishing the backup's rows as news."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path, watch_interval=0.01) as backend:
        job = await backend.create(LeaseRecord("job", "alice", 30.0, 1))
        backup = snapshot(path)
        job = await backend.update(dataclasses.replace(job, holder="bob"), job.version)

        async def go_back() -> None:
            with idle(backend):
                restore(path, backup)

        published, failed = await refused_after(backend.watch_feed(), go_back)
    assert WENT_BACK in str(failed)
    assert published == [("job", job)]


async def test_a_waiter_does_not_take_a_lease_a_restore_showed_free(tmp_path: Path) -> None:
    """A backup from before the lease was taken, restored under its holder: a waiter that saw
    the lease held raises LeaseConfigError from held() itself (no ExceptionGroup), instead of
    taking the lease the file now shows free while the holder still runs."""
    path = tmp_path / "leases.sqlite3"
    holder_backend = SqliteBackend(path, watch_interval=0.01)
    waiter_backend = SqliteBackend(path, watch_interval=0.01)
    async with holder_backend, waiter_backend:
        assert await holder_backend.names() == []
        backup = snapshot(path)  # our tables, no lease yet: free
        holding = anyio.Event()

        async def hold() -> None:
            with contextlib.suppress(LeaseLost, LeaseConfigError):
                async with Lease("job", "alice", holder_backend, SLOW).held():
                    holding.set()
                    await anyio.sleep_forever()

        waiter = Lease("job", "bob", waiter_backend, SLOW)
        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(hold)
                await holding.wait()
                assert await waiter_backend.get("job") is not None  # bob saw it held
                with idle(holder_backend, waiter_backend):
                    restore(path, backup)
                with pytest.raises(LeaseConfigError, match=WENT_BACK):
                    async with waiter.held(timeout=LIMIT):
                        pytest.fail("bob took a lease alice holds")
                tg.cancel_scope.cancel()


async def test_a_holder_loses_naming_the_restore(tmp_path: Path) -> None:
    """A backup from before the holder's last renewals, restored under it: the renewals fail,
    and held() ends with a bare LeaseLost at the holder's deadline whose cause says the file
    went back in time. (Before: a renewal failed, the re-read found the holder's own row as
    the backup had it, and the holder renewed on in the restored file, at versions issued
    before, for as long as the test let it.)"""
    path = tmp_path / "leases.sqlite3"
    backend = SqliteBackend(path, watch_interval=3600)  # the renewals meet it, not the watch
    lease = Lease("job", "alice", backend, FAST)
    async with backend:
        with anyio.fail_after(LIMIT), pytest.raises(LeaseLost) as caught:
            async with lease.held() as grant:
                with idle(backend):
                    backup = snapshot(path)  # job: alice at version 1
                await until(lambda: grant._holding.renewals >= 2)
                with idle(backend):
                    restore(path, backup)
                await anyio.sleep_forever()
    assert WENT_BACK in str(caught.value)
    assert "no renewal was confirmed before the holder's deadline" in str(caught.value)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        row = conn.execute("SELECT holder, version FROM leases").fetchone()
    assert row == (lease.identity, 1)  # no renewal was written into the restored file
