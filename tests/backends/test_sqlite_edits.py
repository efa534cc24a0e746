"""Changes made outside the backend (another program, the ``sqlite3`` shell) get a new version.

Every write of ours takes its version from the file's counter; the triggers in
``trio_lease/backends/sqlite/_file.py`` (``TRIGGERS``) give any other change of a row the
counter's next value and move the counter on a deletion. So a holder's compare-and-swap fails
instead of overwriting a hand edit, and the watch's delta read (``version > counter``) sees it.
Without them, an edit that kept the row's version was overwritten by the holder's next renewal
and never reached a waiter or a holder through the watch. A trigger of another name on our
tables (another program's, which runs inside our writes) is refused on open.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest

from trio_lease import (
    BackendProtocolError,
    ConflictError,
    Lease,
    LeaseConfigError,
    LeaseLost,
    LeaseRecord,
    LeaseSettings,
)
from trio_lease.backends.sqlite import SqliteBackend
from trio_lease.backends.sqlite._file import TRIGGERS

from ._sqlite import shell

pytestmark = pytest.mark.anyio

#: Renewals a minute apart: within a test only the watch can tell the holder of an edit.
SLOW = LeaseSettings(heartbeat_timeout=180, heartbeat_interval=60, lease_operation_timeout=2)
#: Renewals five times a second: the next renewal meets an edit within a fraction of a second.
FAST = LeaseSettings(heartbeat_timeout=6, heartbeat_interval=0.2, lease_operation_timeout=0.2)


@pytest.fixture
def anyio_backend(real_time_backend: str) -> str:
    """SQLite uses worker threads: real time on both backends."""
    return real_time_backend


def stored(path: Path, name: str = "job") -> tuple[str, object, object]:
    """(holder, version, counter) as the file has them."""
    with shell(path) as conn:
        holder, version = conn.execute(
            "SELECT holder, version FROM leases WHERE name = ?", (name,)
        ).fetchone()
        (counter,) = conn.execute("SELECT value FROM version_counter WHERE id = 1").fetchone()
    return holder, version, counter


def triggers(path: Path) -> set[str]:
    """The names of the file's triggers (each checked to be ours, SQL and all)."""
    with shell(path) as conn:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        found = dict(rows.fetchall())
    assert all(sql == TRIGGERS.get(name) for name, sql in found.items()), found
    return set(found)


async def written_twice(path: Path) -> LeaseRecord:
    """``job`` created and renewed by alice through the backend: version 2, counter 2."""
    async with SqliteBackend(path) as backend:
        made = await backend.create(LeaseRecord("job", "alice", 180.0, 1))
        return await backend.update(made, made.version)


async def test_our_writes_take_the_counters_versions_and_fire_no_trigger(tmp_path: Path) -> None:
    """Versions 1, 2, 3, 4 for a create and three updates: a trigger firing on our own writes
    would skip versions."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        record = await backend.create(LeaseRecord("job", "alice", 5.0, 1))
        versions = [record.version]
        for _ in range(3):
            record = await backend.update(record, record.version)
            versions.append(record.version)
    assert versions == ["1", "2", "3", "4"]
    assert stored(path) == ("alice", 4, 4)
    assert triggers(path) == set(TRIGGERS)


async def test_an_edit_that_keeps_the_version_gets_the_next_one(tmp_path: Path) -> None:
    """A hand edit of the holder, version untouched: the row gets version 3, and the renewal
    that expected version 2 fails instead of overwriting the edit."""
    path = tmp_path / "leases.sqlite3"
    mine = await written_twice(path)
    with shell(path) as conn:
        conn.execute("UPDATE leases SET holder = 'mallory' WHERE name = 'job'")
    assert stored(path) == ("mallory", 3, 3)
    async with SqliteBackend(path) as backend:
        with pytest.raises(ConflictError, match="not at version 2"):
            await backend.update(mine, mine.version)
        got = await backend.get("job")
    assert got is not None and (got.holder, got.version) == ("mallory", "3")


@pytest.mark.parametrize("version", [1, 2, 99], ids=["reused", "kept", "invented"])
async def test_an_edit_that_chooses_a_version_gets_the_next_one(
    tmp_path: Path, version: int
) -> None:
    """A version set by hand that is not the counter's: an old one, the same, one far above."""
    path = tmp_path / "leases.sqlite3"
    await written_twice(path)
    with shell(path) as conn:
        conn.execute("UPDATE leases SET holder = 'mallory', version = ?", (version,))
    assert stored(path) == ("mallory", 3, 3)


async def test_every_row_of_an_edit_gets_its_own_version(tmp_path: Path) -> None:
    """One statement over three rows, in a program that turned recursive triggers on: each row
    gets the next value once (the renumbering does not fire the trigger again)."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        for name in ("a", "b", "c"):
            await backend.create(LeaseRecord(name, "alice", 5.0, 1))
    with shell(path) as conn:
        conn.execute("PRAGMA recursive_triggers = ON")
        conn.execute("UPDATE leases SET holder = ''")
        rows = conn.execute("SELECT name, holder, version FROM leases ORDER BY name").fetchall()
    assert rows == [("a", "", 4), ("b", "", 5), ("c", "", 6)]
    assert stored(path, "c")[2] == 6


async def test_a_row_deleted_and_put_back_at_its_version_gets_a_new_one(tmp_path: Path) -> None:
    """Delete, then insert another holder at the old version (an ABA by hand): the deletion
    moved the counter, so the old version is a reused one and the row gets the next."""
    path = tmp_path / "leases.sqlite3"
    mine = await written_twice(path)
    with shell(path) as conn:
        conn.execute("DELETE FROM leases WHERE name = 'job'")
        assert conn.execute("SELECT value FROM version_counter").fetchone() == (3,)
        conn.execute("INSERT INTO leases VALUES ('job', 'eve', 180.0, 1, NULL, NULL, 2, '')")
    assert stored(path) == ("eve", 4, 4)
    async with SqliteBackend(path) as backend:
        with pytest.raises(ConflictError):
            await backend.update(mine, mine.version)


async def test_a_version_set_to_the_counters_value_passes_for_ours(tmp_path: Path) -> None:
    """The one edit the triggers cannot tell from ours (each of our writes sets the counter,
    then the row at that value): it keeps the version it set. docs/backends.md says so."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        await backend.create(LeaseRecord("job", "alice", 5.0, 1))
        await backend.create(LeaseRecord("other", "alice", 5.0, 1))
    with shell(path) as conn:
        conn.execute("UPDATE leases SET holder = 'mallory', version = 2 WHERE name = 'job'")
    assert stored(path) == ("mallory", 2, 2)


async def test_unreadable_versions_and_counters_are_left_to_the_row_checks(tmp_path: Path) -> None:
    """A text version is not renumbered (reads report it); with a text counter an edit keeps
    its version rather than failing in the other program."""
    path = tmp_path / "leases.sqlite3"
    await written_twice(path)
    with shell(path) as conn:
        conn.execute("UPDATE leases SET version = 'abc'")
    async with SqliteBackend(path) as backend:
        with pytest.raises(BackendProtocolError, match="unreadable version"):
            await backend.get("job")
    with shell(path) as conn:
        conn.execute("UPDATE version_counter SET value = 'x'")
        conn.execute("UPDATE leases SET version = 7, holder = 'mallory'")
        conn.execute("DELETE FROM leases")
        conn.execute("INSERT INTO leases VALUES ('job', 'eve', 180.0, 1, NULL, NULL, 5, '')")
    assert stored(path) == ("eve", 5, "x")


async def test_a_holder_on_the_watch_loses_to_an_edit_that_keeps_the_version(
    tmp_path: Path,
) -> None:
    """Renewals a minute apart: only the watch's delta read can show the holder the edit; it
    does, and the body is cancelled with LeaseLost."""
    path = tmp_path / "leases.sqlite3"
    lease = Lease("job", "alice", SqliteBackend(path, watch_interval=0.01), SLOW)
    with anyio.fail_after(10):
        with pytest.raises(LeaseLost):
            async with lease.held():
                await anyio.sleep(0.3)  # the watch has read the row: later polls read deltas
                with shell(path) as conn:
                    conn.execute("UPDATE leases SET holder = 'mallory' WHERE name = 'job'")
                await anyio.sleep_forever()
    assert stored(path)[0] == "mallory"


async def test_a_renewing_holder_loses_instead_of_overwriting_the_edit(tmp_path: Path) -> None:
    """A watch that polls once an hour: the next renewal meets the edit, fails its
    compare-and-swap, re-reads, and the holder loses; the edit stays."""
    path = tmp_path / "leases.sqlite3"
    lease = Lease("job", "alice", SqliteBackend(path, watch_interval=3600), FAST)
    with anyio.fail_after(10):
        with pytest.raises(LeaseLost, match="mallory"):
            async with lease.held() as grant:
                while grant._holding.renewals == 0:  # renewing (bounded by fail_after)
                    await anyio.sleep(0.01)
                with shell(path) as conn:
                    conn.execute("UPDATE leases SET holder = 'mallory' WHERE name = 'job'")
                await anyio.sleep_forever()
    assert stored(path)[0] == "mallory"


async def test_a_waiter_takes_a_lease_released_by_hand(tmp_path: Path) -> None:
    """A lease held for three minutes, released by hand (holder emptied, version untouched): a
    waiter sees it on the watch and takes the lease at once, not when it would have expired."""
    path = tmp_path / "leases.sqlite3"
    await written_twice(path)
    waiter = Lease("job", "bob", SqliteBackend(path, watch_interval=0.01), SLOW)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def release_by_hand() -> None:
                await anyio.sleep(0.3)  # the waiter is waiting on its watch
                with shell(path) as conn:
                    conn.execute("UPDATE leases SET holder = '' WHERE name = 'job'")

            tg.start_soon(release_by_hand)
            async with waiter.held() as grant:
                assert grant.fencing_token == 2
    assert stored(path)[0] == ""  # bob released on leaving held()


async def test_files_without_the_triggers_get_them_on_open(tmp_path: Path) -> None:
    """A file of an earlier version (our tables, no triggers), or one whose triggers another
    program dropped, has them all after an open; an open that finds them changes nothing."""
    path = tmp_path / "leases.sqlite3"
    record = await written_twice(path)
    with shell(path) as conn:
        for name in TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("UPDATE leases SET holder = 'mallory'")  # no trigger: the version stays
    assert triggers(path) == set()
    assert stored(path) == ("mallory", 2, 2)
    async with SqliteBackend(path) as backend:
        assert await backend.get("job") == dataclasses.replace(record, holder="mallory")
    assert triggers(path) == set(TRIGGERS)
    with shell(path) as conn:
        conn.execute("DROP TRIGGER trio_lease_deleted_row")
        schema = conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    async with SqliteBackend(path) as backend:
        await backend.get("job")
    assert triggers(path) == set(TRIGGERS)
    async with SqliteBackend(path) as backend:
        await backend.get("job")
    with shell(path) as conn:
        again = conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    assert len(again) == len(schema) + 1


async def test_a_trigger_of_our_name_with_other_sql_is_replaced_on_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another program (or a hand edit) put a trigger that does nothing under one of our names:
    recognised by its SQL, not its name, it is replaced on open, with a warning, and an edit
    that keeps the version is renumbered again."""
    path = tmp_path / "leases.sqlite3"
    mine = await written_twice(path)
    with shell(path) as conn:
        conn.execute("DROP TRIGGER trio_lease_edited_row")
        conn.execute(
            "CREATE TRIGGER trio_lease_edited_row AFTER UPDATE ON leases BEGIN SELECT 1; END"
        )
        conn.execute("UPDATE leases SET holder = 'mallory'")  # the impostor: the version stays
    assert stored(path) == ("mallory", 2, 2)
    with shell(path) as conn:
        conn.execute("UPDATE leases SET holder = 'alice'")  # put back, still version 2
    async with SqliteBackend(path) as backend:
        assert await backend.get("job") == mine
        assert triggers(path) == set(TRIGGERS)  # ours again, SQL and all
        with shell(path) as conn:
            conn.execute("UPDATE leases SET holder = 'mallory' WHERE name = 'job'")
        assert stored(path) == ("mallory", 3, 3)
        with pytest.raises(ConflictError):
            await backend.update(dataclasses.replace(mine, holder="alice"), mine.version)
    assert "trigger trio_lease_edited_row was not ours; replacing it" in caplog.text


@pytest.mark.parametrize(
    "trigger",
    [
        "CREATE TRIGGER cleanup AFTER INSERT ON leases "
        "BEGIN DELETE FROM leases WHERE name = NEW.name; END",
        "CREATE TRIGGER steal AFTER UPDATE ON Leases WHEN NEW.holder = 'alice' "
        "BEGIN UPDATE leases SET holder = 'mallory' WHERE name = NEW.name; END",
        "CREATE TRIGGER audit BEFORE UPDATE ON version_counter BEGIN SELECT 1; END",
    ],
    ids=["deletes-our-insert", "rewrites-our-update", "on-the-counter"],
)
async def test_a_trigger_not_ours_on_our_tables_is_refused_on_open(
    tmp_path: Path, trigger: str
) -> None:
    """Another program's trigger runs inside our writes (one deleting the row we insert made
    create() report a grant the file did not have): the file is refused before any write."""
    path = tmp_path / "leases.sqlite3"
    await written_twice(path)
    with shell(path) as conn:
        conn.execute(trigger)
    name, table = trigger.split()[2], "version_counter" if "counter" in trigger else "leases"
    async with SqliteBackend(path) as backend:
        for _ in range(2):
            with pytest.raises(LeaseConfigError) as caught:
                await backend.create(LeaseRecord("other", "alice", 5.0, 1))
            said = str(caught.value)
            assert f"has trigger {name!r} on table {table}, which is not trio_lease's" in said
            assert str(path) in said and "give the backend a file of its own" in said
    assert stored(path) == ("alice", 2, 2)


async def test_a_trigger_added_while_in_use_is_met_by_the_next_compare_and_swap(
    tmp_path: Path,
) -> None:
    """A trigger added under a connected backend is not seen on open: like any outside edit,
    the holder's next compare-and-swap finds the row changed and fails (docs/backends.md)."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        await backend.names()
        with shell(path) as conn:
            conn.execute(
                "CREATE TRIGGER cleanup AFTER INSERT ON leases "
                "BEGIN DELETE FROM leases WHERE name = NEW.name; END"
            )
        granted = await backend.create(LeaseRecord("job", "alice", 5.0, 1))
        with pytest.raises(ConflictError):
            await backend.update(granted, granted.version)
