"""The SQLite file's version counter only rises, so no version is issued twice.

A counter lowered by hand (``UPDATE version_counter SET value = 0``) made the backend issue
versions again: a stale holder's compare-and-swap with its old version then matched another
holder's row at the re-issued version (ABA) and overwrote a live lease. Triggers kept in the file
(``trio_lease_counter_lowered``, ``_deleted``, ``_replaced`` in
``trio_lease/backends/sqlite/_file.py``) refuse such edits, and a write that finds the counter
below the version it compares against, or below the row's, writes nothing
(``BackendProtocolError``): the file was changed with the triggers out of the way. A backend
object that read or wrote a higher counter before refuses the file from then on
(``LeaseConfigError``: it went back in time, tests/backends/test_sqlite_rewound.py).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from trio_lease import BackendProtocolError, LeaseConfigError, LeaseRecord
from trio_lease.backends.sqlite import SqliteBackend

from ._sqlite import another_program, shell

# SQLite uses worker threads: real time on both backends; another program's connection.
from .test_sqlite_edits import anyio_backend as anyio_backend

pytestmark = pytest.mark.anyio

REFUSED = "trio_lease: version_counter.value only rises"


def counter(path: Path) -> object:
    with shell(path) as conn:
        return conn.execute("SELECT value FROM version_counter").fetchone()[0]


async def held_at_four(backend: SqliteBackend) -> LeaseRecord:
    """``job`` created and renewed three times: version 4, counter 4."""
    record = await backend.create(LeaseRecord("job", "alice", 5.0, 1))
    for _ in range(3):
        record = await backend.update(record, record.version)
    assert record.version == "4"
    return record


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE version_counter SET value = 0",
        "UPDATE version_counter SET value = value - 1",
        "DELETE FROM version_counter",
        "INSERT OR REPLACE INTO version_counter VALUES (1, 0)",
        "INSERT INTO version_counter VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET value = 0",
    ],
    ids=["set-zero", "decrement", "delete", "replace", "upsert"],
)
async def test_an_edit_lowering_or_deleting_the_counter_is_refused(
    tmp_path: Path, edit: str
) -> None:
    """Each way of lowering the counter or removing its row fails in the other program, with
    a message naming trio_lease, and the counter stays."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        await held_at_four(backend)
    with shell(path) as conn, pytest.raises(sqlite3.IntegrityError, match=REFUSED):
        conn.execute(edit)
    assert counter(path) == 4


async def test_raising_the_counter_and_text_counters_are_left_alone(tmp_path: Path) -> None:
    """Only a lower integer is refused: a higher one is harmless, and a text counter (from it,
    or to it) is left for the row checks to report."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        await held_at_four(backend)
    another_program(
        path,
        "UPDATE version_counter SET value = 10",
        "UPDATE version_counter SET value = 'x'",
        "UPDATE version_counter SET value = 3",
    )
    assert counter(path) == 3


async def test_a_counter_row_lost_with_a_text_value_is_restored_on_open(tmp_path: Path) -> None:
    """The counter row can still go when its value is not an integer; the next open restores
    it above every version in use, as for a file that never had one."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as backend:
        await held_at_four(backend)
    another_program(
        path, "UPDATE version_counter SET value = NULL", "DELETE FROM version_counter"
    )
    async with SqliteBackend(path) as backend:
        assert (await backend.create(LeaseRecord("other", "bob", 5.0, 1))).version == "5"


@pytest.mark.parametrize(
    ("lowered_to", "expected"), [(0, "4"), (2, "1")], ids=["below-expected", "below-row"]
)
async def test_a_write_finding_the_counter_lowered_writes_nothing(
    tmp_path: Path, lowered_to: int, expected: str
) -> None:
    """With the trigger out of the way (dropped while a backend is connected), a counter below
    the version compared against, or below the row's, is a BackendProtocolError for a backend
    that never saw it higher: a stale holder's compare-and-swap cannot match a re-issued
    version, and the row stays. The backend that wrote it higher refuses the file."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as alice, SqliteBackend(path) as bob:
        held = await held_at_four(alice)
        with shell(path) as conn:
            conn.execute("DROP TRIGGER trio_lease_counter_lowered")
            conn.execute("UPDATE version_counter SET value = ?", (lowered_to,))
        taken = dataclasses.replace(held, holder="bob", fencing_token=2)
        with pytest.raises(BackendProtocolError, match="counter is below the version") as caught:
            await bob.update(taken, expected)
        assert "nothing was written" in str(caught.value)
        with pytest.raises(LeaseConfigError, match="went back in time"):
            await alice.get("job")
    with shell(path) as conn:
        row = conn.execute("SELECT holder, fencing_token, version FROM leases").fetchone()
    assert row == ("alice", 1, 4)
    assert counter(path) == lowered_to
