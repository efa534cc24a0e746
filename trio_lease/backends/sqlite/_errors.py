"""The one place SQLite's errors become ours, by SQLite's primary result code.

Errors that retrying cannot fix (a path that cannot be opened, a file that is not a database, a
read-only or damaged file, denied access, our tables changed under us) are
:class:`LeaseConfigError` naming the path and the fix: they end a wait at once. Everything else
(a lock held past ``busy_timeout``, an I/O error, a full disk) is :class:`BackendUnavailable`:
it may pass, and a write it interrupted has an unknown outcome, which the core resolves by
reading again (a read's error says the read wrote nothing).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

from ..._exceptions import BackendUnavailable, LeaseConfigError, LeaseError

__all__ = ["translate"]

# How SQLite's result codes (https://sqlite.org/rescode.html) are classified, by primary code.
# These cannot be fixed by retrying (each raises LeaseConfigError, which ends waits at once); the
# text is the fix. Every other code is transient (BackendUnavailable, see translate).
_NEEDS_A_FIX: Final = {
    # "unable to open database file": the path is a directory, its directory is missing or not
    # writable, it lies under /proc or /sys, or the -wal/-shm files cannot be created beside it.
    # (SQLite also says this when the process is out of file descriptors: a process limit, so
    # still something to fix, not to wait out.)
    sqlite3.SQLITE_CANTOPEN: "the path must name a database file in a directory this process "
    "can write (SQLite creates -wal and -shm files beside it); check the path and the "
    "permissions of the file and its directory (or the process's open-file limit)",
    # "file is not a database": the file holds something else; a retry reads the same bytes.
    sqlite3.SQLITE_NOTADB: "give the backend a path of its own (it creates the file there), or "
    "restore this file from a backup",
    # "attempt to write a readonly database": the file, its directory or its mount is read-only
    # to this process; that stays so until someone changes it.
    sqlite3.SQLITE_READONLY: "the file or its directory is read-only to this process; leases "
    "need write access to both (SQLite writes -wal and -shm files beside the database)",
    # "access permission denied", "authorization denied": refused the same way every time.
    sqlite3.SQLITE_PERM: "access was denied; give this process read and write access",
    sqlite3.SQLITE_AUTH: "access was denied; give this process read and write access",
    # "database disk image is malformed": the file is damaged and stays damaged.
    sqlite3.SQLITE_CORRUPT: "the file is damaged; restore it from a backup (a new file restarts "
    "fencing tokens, so stop every user of the lease first)",
}


def translate(
    exc: sqlite3.Error, path: Path, busy_timeout: float, *, write: bool = False
) -> LeaseError:
    """The one place an ``sqlite3`` error becomes ours; see ``_NEEDS_A_FIX`` for the codes.

    ``write``: the failed call was a write, whose outcome is then unknown; a read's error says
    it wrote nothing.
    """
    unknown = "the outcome of a write is unknown" if write else "this read wrote nothing"
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    said = f"SQLite at {path}: {exc}"  # SQLite's own fixed texts, never file content
    if primary in _NEEDS_A_FIX:
        return LeaseConfigError(f"{said}; {_NEEDS_A_FIX[primary]}")
    if primary == sqlite3.SQLITE_ERROR and str(exc).startswith(
        ("no such table", "no such column")
    ):  # a program changed our tables while we were connected
        return LeaseConfigError(f"{said}; {path} is no longer a trio_lease database")
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        # "database is locked": another connection held the write lock for longer than
        # busy_timeout; it ends when that transaction does, so this is worth retrying.
        return BackendUnavailable(
            f"{said} (for longer than busy_timeout, {busy_timeout:g} s): another "
            f"connection holds a long write transaction; {unknown}"
        )
    # "disk I/O error" (SQLITE_IOERR), "database or disk is full" and the rest: a read,
    # write or fsync failed in a way that can pass (a device hiccup, a file-size limit or a
    # quota, space freed), and a write whose commit failed may or may not be on disk, which
    # is exactly an unknown outcome: the core re-reads, waits retry with backoff.
    return BackendUnavailable(f"{said}; {unknown}")
