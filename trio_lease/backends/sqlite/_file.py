"""The SQLite backend's database file: its default path, its directory, opening it, its tables.

A connection is opened on a file (never an in-memory database) in WAL mode with
``synchronous=FULL``. A file that has tables but not ours, or a trigger on our tables that is
not ours (:func:`_refuse_foreign_triggers`), is refused with :class:`LeaseConfigError` before
anything, even the journal mode, is written to it; a file without tables gets ours and their
triggers, in one transaction under SQLite's write lock (checked again under it), so of any
number of connections and processes opening a new file at once one creates the schema and the
others find it whole, but only when :func:`connect` is told it may create (a backend
object's first open: which file a backend object uses, and when it stops, is
:mod:`._identity`'s decision). A missing version counter restarts above every
version in use, so no version is issued twice. A file made by an earlier version gets the
columns added since (``handover_to``) on open.

Every write of ours takes its version from the counter. Triggers (:data:`TRIGGERS`) give any
other change of a row (another program's, a hand edit in the ``sqlite3`` shell) the counter's
next value instead of the version it kept or chose, and move the counter when a row is deleted,
so compare-and-swap and the watch's delta read (:mod:`._feed`) see the change: a holder's next
write fails and re-reads instead of overwriting the edit. Three more abort any change that
lowers the counter or deletes its row (versions would repeat: a stale holder's compare-and-swap
would match another state of its row). On open, a missing trigger is created and one of our
names whose SQL is not ours (changed by another program or by hand) is replaced, in the same
transaction as the added columns (:func:`_upgrade`). Triggers of other names on our tables are
refused; one added while the file is in use is an outside edit like any other.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Literal, overload

from ..._backoff import Backoff
from ..._exceptions import BackendUnavailable, LeaseConfigError
from ..._paths import user_path
from ._rows import ADDED_COLUMNS, LEASE_COLUMNS, decode_text

__all__ = ["TRIGGERS", "check_folder", "connect", "default_path", "rollback"]

logger = logging.getLogger("trio_lease")

_CREATE_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS leases (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        lease_duration REAL NOT NULL,
        fencing_token INTEGER NOT NULL,
        acquired_at TEXT,
        renewed_at TEXT,
        version INTEGER NOT NULL,
        handover_to TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE TABLE IF NOT EXISTS version_counter "
    "(id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER)",
)
# A missing counter row restarts above every version in use, so no version is issued twice.
# Inserted only where there is no row (so it never fires trio_lease_counter_replaced): the
# highest version is a scalar subquery, because an aggregate over the rows would make one row
# even where the WHERE clause is false, and insert a second counter row.
_RESTORE_COUNTER: Final = (
    "INSERT INTO version_counter (id, value) SELECT 1, (SELECT "
    "coalesce(max(CASE WHEN typeof(version) = 'integer' THEN version END), 0) FROM leases) "
    "WHERE NOT EXISTS (SELECT 1 FROM version_counter WHERE id = 1)"
)
_HAS_COUNTER: Final = "SELECT 1 FROM version_counter WHERE id = 1"
# A change of a row that did not take its version from the counter (a version kept, reused or
# chosen by hand) gets the counter's next value. Ours never fire: each write (of every version
# so far) sets the counter first, then writes the row at that new value. So an edit that sets
# a row's version to the counter's current value passes for ours and keeps it. Text or missing
# versions and counters are left as they are, for the row checks (._rows) to report.
_EDITED: Final = """
    typeof(NEW.version) = 'integer'
    AND (SELECT typeof(value) FROM version_counter WHERE id = 1) = 'integer'
    AND ({kept}NEW.version <> (SELECT value FROM version_counter WHERE id = 1))"""
_RENUMBER: Final = """
    BEGIN
        UPDATE version_counter SET value = value + 1 WHERE id = 1;
        UPDATE leases SET version = (SELECT value FROM version_counter WHERE id = 1)
            WHERE name = NEW.name;
    END"""
_ONLY_RISES: Final = (
    "trio_lease: version_counter.value only rises and its row stays (a lower value would issue "
    "versions twice)"
)
#: The triggers that give every change made outside this backend a new version and keep the
#: counter rising, by name (each as SQLite keeps it in ``sqlite_master.sql``, which is how an
#: open recognises them).
TRIGGERS: Final = {
    "trio_lease_edited_row": "CREATE TRIGGER trio_lease_edited_row "
    "AFTER UPDATE ON leases WHEN"
    + _EDITED.format(kept="NEW.version = OLD.version OR ")
    + _RENUMBER,
    "trio_lease_inserted_row": "CREATE TRIGGER trio_lease_inserted_row "
    "AFTER INSERT ON leases WHEN" + _EDITED.format(kept="") + _RENUMBER,
    # We never delete rows. Moving the counter on a deletion makes a row put back by hand at
    # its old version (delete, then insert) a reused version, renumbered above.
    "trio_lease_deleted_row": "CREATE TRIGGER trio_lease_deleted_row "
    "AFTER DELETE ON leases WHEN (SELECT typeof(value) FROM version_counter WHERE id = 1) "
    "= 'integer' BEGIN UPDATE version_counter SET value = value + 1 WHERE id = 1; END",
    # The counter only rises: a lower value (or a row deleted, then restored above the rows'
    # versions) issues versions again, and a stale holder's compare-and-swap would match
    # another state of its row. Ours only raise it. Text is left for the row checks.
    "trio_lease_counter_lowered": "CREATE TRIGGER trio_lease_counter_lowered "
    "BEFORE UPDATE ON version_counter WHEN typeof(OLD.value) = 'integer' "
    "AND typeof(NEW.value) = 'integer' AND NEW.value < OLD.value BEGIN "
    f"SELECT RAISE(ABORT, '{_ONLY_RISES}'); END",
    "trio_lease_counter_deleted": "CREATE TRIGGER trio_lease_counter_deleted "
    "BEFORE DELETE ON version_counter WHEN typeof(OLD.value) = 'integer' BEGIN "
    f"SELECT RAISE(ABORT, '{_ONLY_RISES}'); END",
    # INSERT OR REPLACE deletes the old row without firing delete triggers (unless recursive
    # triggers are on): a lower value replacing the row is refused here.
    "trio_lease_counter_replaced": "CREATE TRIGGER trio_lease_counter_replaced "
    "BEFORE INSERT ON version_counter WHEN typeof(NEW.value) = 'integer' "
    "AND (SELECT typeof(value) FROM version_counter WHERE id = NEW.id) = 'integer' "
    "AND NEW.value < (SELECT value FROM version_counter WHERE id = NEW.id) BEGIN "
    f"SELECT RAISE(ABORT, '{_ONLY_RISES}'); END",
}
# errno values of a failed mkdir that can pass on their own (space freed, descriptors closed).
_TRANSIENT_ERRNOS: Final = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EMFILE, errno.ENFILE, errno.ENOMEM}
)


def default_path() -> Path:
    """The per-user database path the CLI and examples use by default."""
    explicit = os.environ.get("TRIO_LEASE_SQLITE_PATH")
    if explicit:
        return user_path(explicit, "TRIO_LEASE_SQLITE_PATH")
    state = os.environ.get("XDG_STATE_HOME")
    if not state:
        try:
            state = str(Path.home() / ".local" / "state")
        except RuntimeError:  # no HOME and no password entry for this user
            raise LeaseConfigError(
                "the default SQLite lease database lives under the home directory, which is "
                "unknown here: set TRIO_LEASE_SQLITE_PATH (or XDG_STATE_HOME), or give a path"
            ) from None
    return Path(state) / "trio-lease" / "leases.sqlite3"


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back an open transaction, never hiding the error that made us roll back."""
    # After some errors (an I/O error in COMMIT) SQLite has rolled back already; a failing
    # ROLLBACK must not replace the error that explains what happened.
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def check_folder(path: Path, where: str) -> None:
    """LeaseConfigError naming ``where`` unless ``path``'s folder exists (a path given by a
    person: only the default location's folder is created, :func:`default_path`)."""
    parent = path.parent
    if os.path.isdir(parent):
        return
    if os.path.lexists(parent):
        problem = "is not a folder"
    else:
        problem = "does not exist"
        try:
            for ancestor in parent.parents:
                if os.path.lexists(ancestor) and not os.path.isdir(ancestor):
                    problem = f"does not exist: {ancestor} is a file, not a folder"
                    break
        except OSError:
            pass
    raise LeaseConfigError(
        f"{where} {str(path)!r}: the folder {parent} {problem}; create the folder first, or "
        "choose a path in an existing one (only the default location's folder is created)"
    )


def _prepare_directory(path: Path, *, make_folder: bool) -> None:
    parent = path.parent
    where = f"the directory {parent} for the SQLite lease database {path}"
    if os.path.isdir(path):
        raise LeaseConfigError(
            f"{path} is a directory; the SQLite backend needs the path of a database "
            f"file, such as {path / 'leases.sqlite3'}"
        )
    if not make_folder:
        check_folder(path, "the SQLite lease database")
        return
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise LeaseConfigError(
            f"cannot create {where}: part of that path is a file, not a directory; choose "
            "another path"
        ) from None
    except OSError as exc:
        if exc.errno in _TRANSIENT_ERRNOS:
            raise BackendUnavailable(f"cannot create {where}: {exc.strerror}") from None
        raise LeaseConfigError(
            f"cannot create {where}: {exc.strerror}; create it with write access for this "
            "process, or choose another path"
        ) from None


@overload
def connect(
    path: Path, busy_timeout: float, *, create: Literal[True] = True, make_folder: bool = True
) -> sqlite3.Connection: ...
@overload
def connect(
    path: Path, busy_timeout: float, *, create: bool, make_folder: bool = True
) -> sqlite3.Connection | None: ...
def connect(
    path: Path, busy_timeout: float, *, create: bool = True, make_folder: bool = True
) -> sqlite3.Connection | None:
    """A connection to the database at ``path``, with our tables (raises ``sqlite3.Error``).

    Only with ``create`` are the file and our tables made (and the directory, with
    ``make_folder``; without it a missing one is a LeaseConfigError): without ``create`` a
    missing file fails to open (``mode=rw``) and a file without tables gives None, written to
    in no way.
    """
    if create:
        _prepare_directory(path, make_folder=make_folder)
        target = os.fspath(path)
        target = "./:memory:" if target == ":memory:" else target  # a file, never in memory
    else:
        target = f"file:{urllib.parse.quote(os.fsencode(os.path.abspath(path)))}?mode=rw"
    conn = sqlite3.connect(
        target, timeout=busy_timeout, isolation_level=None, check_same_thread=False, uri=not create
    )
    try:
        conn.text_factory = decode_text
        ours = _has_our_tables(conn, path)  # before anything, even the journal mode, changes
        if not (ours or create):
            conn.close()
            return None
        _refuse_foreign_triggers(conn, path)
        _use_wal(conn, busy_timeout)
        conn.execute("PRAGMA synchronous=FULL")
        needs_schema = not ours or conn.execute(_HAS_COUNTER).fetchone() is None
        if needs_schema and not _create_schema(conn, path, create=create):
            conn.close()  # emptied between the two checks
            return None
        if _outdated(conn):
            _upgrade(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _create_schema(conn: sqlite3.Connection, path: Path, *, create: bool) -> bool:
    """Make our tables and the counter's row, checked again under the write lock (racing
    creators); False, with nothing written, for a file emptied since without ``create``."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not _has_our_tables(conn, path):
            if not create:
                rollback(conn)
                return False
            for statement in (*_CREATE_TABLES, *TRIGGERS.values()):
                conn.execute(statement)  # the whole schema in one transaction
        conn.execute(_RESTORE_COUNTER)
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise
    return True


def _use_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch the file to WAL mode, waiting up to ``busy_timeout`` for other connections.

    Switching a file from a rollback journal needs its exclusive lock. When two connections
    switch at once, SQLite refuses one at once ("database is locked") instead of calling its
    busy handler, which could deadlock; so that refusal is retried here, with a growing pause,
    until the switch is made (by either) or ``busy_timeout`` has passed (then it is raised).
    """
    deadline = time.monotonic() + busy_timeout
    backoff = Backoff(0.002, 0.05)
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
            return
        except sqlite3.OperationalError as exc:
            pause = backoff.failed()
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)


def _has_our_tables(conn: sqlite3.Connection, path: Path) -> bool:
    """True for our tables, False for a file without tables; else LeaseConfigError."""
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    tables = {row[0] for row in rows if not str(row[0]).startswith("sqlite_")}
    if not tables:
        return False
    leases = [column for column in LEASE_COLUMNS if column not in ADDED_COLUMNS]
    for table, needed in (("leases", leases), ("version_counter", ("id", "value"))):
        info = conn.execute(f"PRAGMA table_info({table})").fetchall()
        problem = _table_problem(table, needed, tables, info)
        if problem:
            raise LeaseConfigError(
                f"{path} is not a trio_lease database ({problem}); it belongs to "
                "another program or was changed by hand: give the backend a file of its own"
            )
    return True


def _table_problem(table: str, needed: Sequence[str], tables: set[str], info: list[Any]) -> str:
    """What keeps ``table`` (its ``PRAGMA table_info`` rows) from being ours; "" if nothing."""
    missing = [column for column in needed if column not in {row[1] for row in info}]
    if table not in tables:
        return f"it has tables, but no table {table}"
    if missing:
        return f"table {table} has no column {', '.join(missing)}"
    if table == "leases" and [row[1] for row in info if row[5]] != ["name"]:
        return "the primary key of table leases is not its name"
    return ""


def _refuse_foreign_triggers(conn: sqlite3.Connection, path: Path) -> None:
    """LeaseConfigError for a trigger on our tables whose name is not one of ours.

    Another program's trigger runs inside our writes: one that deletes or rewrites the row we
    just wrote makes a write report a grant the file does not have. Ours are recognised by name
    here; one of our names holding other SQL is replaced on open (:func:`_upgrade`).
    """
    rows = conn.execute(
        "SELECT name, lower(tbl_name) FROM sqlite_master WHERE type = 'trigger' "
        "AND lower(tbl_name) IN ('leases', 'version_counter') ORDER BY name"
    )
    for name, table in rows:
        if name not in TRIGGERS:
            shown = str(name)[:64].encode("ascii", "backslashreplace").decode()
            raise LeaseConfigError(
                f"{path} has trigger {shown!r} on table {table}, which is not trio_lease's: "
                "another program changes the leases it stores; give the backend a file of its "
                "own (or drop that trigger, if it was added by hand)"
            )


def _missing_columns(conn: sqlite3.Connection) -> list[str]:
    """The added columns (:data:`._rows.ADDED_COLUMNS`) table leases does not have yet."""
    present = {row[1] for row in conn.execute("PRAGMA table_info(leases)")}
    return [column for column in ADDED_COLUMNS if column not in present]


def _wrong_triggers(conn: sqlite3.Connection) -> dict[str, bool]:
    """The :data:`TRIGGERS` missing (False) or present with other SQL (True), by name."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
    present = dict(rows.fetchall())
    return {
        name: name in present for name, sql in TRIGGERS.items() if present.get(name) != sql
    }


def _outdated(conn: sqlite3.Connection) -> bool:
    return bool(_missing_columns(conn) or _wrong_triggers(conn))


def _upgrade(conn: sqlite3.Connection) -> None:
    """Add the missing columns and triggers, and replace triggers not ours, in one transaction.

    Checked again under the write lock, so of two processes opening the same old file at once
    one upgrades it and the other finds it done; "duplicate column name" (a writer that skipped
    the lock) counts as done. Rows that were there read an added column's default, as if
    written without a request. A trigger of ours whose SQL differs (another program or a hand
    edit replaced it) is dropped and created again: only ours keep every outside change visible.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        for column in _missing_columns(conn):
            try:
                conn.execute(f"ALTER TABLE leases ADD COLUMN {column} {ADDED_COLUMNS[column]}")
            except sqlite3.OperationalError as exc:
                if "duplicate column name" not in str(exc):
                    raise
        for name, foreign in _wrong_triggers(conn).items():
            if foreign:
                logger.warning("SQLite lease file: trigger %s was not ours; replacing it", name)
                conn.execute(f"DROP TRIGGER {name}")
            conn.execute(TRIGGERS[name])
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise
