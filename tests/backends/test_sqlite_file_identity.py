"""A backend object uses one database file for its life: the one its first open found.

A connection keeps the file it opened after the path is given another file or none, so without a
check a holder renewed in the old, unlinked file while the file at the path showed the lease
free: two holders. And a file removed or truncated under a backend was made again, empty, on its
next open: a live lease read as free and fencing tokens restarted at 1. Now each call checks
(one ``stat``) that the path names the file the backend first opened; a file gone, emptied or
replaced raises ``LeaseConfigError`` on that call and every later one
(``trio_lease/backends/sqlite/_identity.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
from pathlib import Path

import anyio
import pytest

from trio_lease import LeaseConfigError, LeaseRecord
from trio_lease.backends.sqlite import SqliteBackend

from ._feed import LIMIT, refused_after

pytestmark = pytest.mark.anyio

GONE = "was removed or emptied while this process used it"
REPLACED = "was replaced by another file while this process used it"


@pytest.fixture
def anyio_backend(real_time_backend: str) -> str:
    """SQLite uses worker threads: real time on both backends."""
    return real_time_backend


def remove(path: Path) -> None:
    """``rm leases.sqlite3*``."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


async def replace(path: Path) -> None:
    """Another file put at the path (a restore, ``mv``): an empty trio_lease database."""
    fresh = path.with_name("fresh.sqlite3")
    async with SqliteBackend(fresh) as other:
        await other.names()
    remove(path)
    os.replace(fresh, path)


@pytest.mark.parametrize("how", ["replaced", "removed"])
async def test_a_renewal_after_the_file_was_replaced_or_removed_is_refused(
    tmp_path: Path, how: str
) -> None:
    """The holder's next renewal raises instead of landing in the old, unlinked file, while a
    newcomer holds the lease in the file at the path; it raises on every later call too."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as holder:
        made = await holder.create(LeaseRecord("job", "alice", 30.0, 1))
        if how == "replaced":
            await replace(path)
        else:
            remove(path)
        async with SqliteBackend(path) as newcomer:
            assert await newcomer.get("job") is None
            await newcomer.create(LeaseRecord("job", "bob", 30.0, 2))
        for _ in range(2):
            with pytest.raises(LeaseConfigError, match=REPLACED) as caught:
                await holder.update(made, made.version)
        assert str(path) in str(caught.value) and "restart" in str(caught.value)
    async with SqliteBackend(path) as check:
        stored = await check.get("job")
    assert stored is not None and (stored.holder, stored.version) == ("bob", "1")


async def test_a_truncated_file_is_not_made_again(tmp_path: Path) -> None:
    """A file truncated to 0 bytes under connected backends is refused, not filled with fresh
    tables (in which the live lease would read as free), and is left empty."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as holder, SqliteBackend(path) as waiter:
        await holder.create(LeaseRecord("job", "alice", 30.0, 1))
        assert await waiter.get("job") is not None
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        os.truncate(path, 0)
        for backend in (waiter, holder, waiter, holder):
            with pytest.raises(LeaseConfigError):
                await backend.get("job")
        with pytest.raises(LeaseConfigError, match=GONE) as caught:
            await waiter.create(LeaseRecord("job", "bob", 30.0, 2))
    assert "fencing tokens are gone" in str(caught.value)
    assert "restarts fencing tokens" in str(caught.value)
    assert path.stat().st_size == 0


async def test_a_file_emptied_then_filled_again_stays_refused(tmp_path: Path) -> None:
    """Once a backend found its file emptied, it never uses it again, even after a restarted
    process made new tables in that same file: the holder's version 1 would match the
    newcomer's version 1 there, and its renewal would overwrite the newcomer's lease."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as holder:
        made = await holder.create(LeaseRecord("job", "alice", 30.0, 1))
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        os.truncate(path, 0)
        with anyio.fail_after(LIMIT):
            while True:  # the first call may meet the old pages ("not a database"), then GONE
                with pytest.raises(LeaseConfigError) as caught:
                    await holder.get("job")
                if GONE in str(caught.value):
                    break
        async with SqliteBackend(path) as restarted:
            await restarted.create(LeaseRecord("job", "bob", 30.0, 2))
        with pytest.raises(LeaseConfigError, match=GONE):
            await holder.update(made, made.version)
    async with SqliteBackend(path) as check:
        stored = await check.get("job")
    assert stored is not None and stored.holder == "bob"


async def test_a_file_removed_while_closed_on_an_error_is_not_made_again(tmp_path: Path) -> None:
    """A backend whose connection was closed (on an error) and whose file was then removed does
    not create a new one at its next call."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        await backend.create(LeaseRecord("job", "alice", 30.0, 1))
        backend._drop()  # as after an error that needs a fix
        remove(path)
        with pytest.raises(LeaseConfigError, match=GONE):
            await backend.get("job")
    assert not path.exists()


async def test_the_shared_watch_stops_following_a_replaced_file(tmp_path: Path) -> None:
    """The shared watch's poller, with its connection open, notices the file was replaced:
    LeaseConfigError ends its run instead of polling the old file for ever.

    The replacement takes two steps (the old files removed, then the new one moved in), and
    the poller runs in a worker thread: a poll that falls between them finds no file, and
    "removed" is then the first reason found, and a true one (seen on a loaded machine)."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path, watch_interval=0.01) as backend:
        await backend.create(LeaseRecord("job", "alice", 30.0, 1))
        published, failed = await refused_after(backend.watch_feed(), lambda: replace(path))
    assert published[0][0] == "job"
    assert REPLACED in str(failed) or GONE in str(failed), str(failed)


async def test_a_watch_stops_following_a_removed_file(tmp_path: Path) -> None:
    """A watch (its own connection) raises once the file is removed, instead of waiting on the
    old file for a change that cannot come."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path, watch_interval=0.01) as backend:
        made = await backend.create(LeaseRecord("job", "alice", 30.0, 1))
        with anyio.fail_after(LIMIT):
            with pytest.raises(LeaseConfigError, match=GONE):
                async with backend.watch("job") as changes:
                    assert await anext(changes) == made
                    remove(path)
                    await anext(changes)


async def test_the_same_file_moved_away_and_back_is_used_on(tmp_path: Path) -> None:
    """The identity is the file's, not the path's content: a file renamed away and back between
    two calls is the same file, and the backend goes on with it."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        made = await backend.create(LeaseRecord("job", "alice", 30.0, 1))
        os.rename(path, tmp_path / "aside.sqlite3")
        os.rename(tmp_path / "aside.sqlite3", path)
        renewed = await backend.update(made, made.version)
    assert renewed == dataclasses.replace(made, version="2")


async def test_a_reopen_finds_a_path_with_uri_characters(tmp_path: Path) -> None:
    """A later open (``mode=rw``, by URI) of a path with ``?``, ``#``, ``%``, a space and a
    non-ASCII letter opens the same file, not another one."""
    path = tmp_path / "a b?#%é" / "leases.sqlite3"
    os.mkdir(path.parent)  # a path given must be in an existing folder
    async with SqliteBackend(path) as backend:
        made = await backend.create(LeaseRecord("job", "alice", 30.0, 1))
        backend._drop()  # as after an error that needs a fix
        assert await backend.get("job") == made
