"""Which file a SQLite backend object uses: the one its first open found, for its whole life.

A connection keeps the file it opened even when the path is given another file (``mv``, a
restore, ``os.replace``) or none (``rm``): it would go on reading and renewing in the old,
unlinked file while other processes use the one at the path, and both would hold a lease. So the
file's identity (``st_dev``, ``st_ino``) is recorded when it is first opened, and each call
checks with one ``stat``, in the worker thread that then uses the connection, that the path
still names it (:meth:`DatabaseFile.current`); when it does not, the connection is closed and
the path opened again (:meth:`DatabaseFile.open`), which decides.

Only the first open may create the file and our tables. A later open that finds no file, or our
file emptied of its tables (truncated to 0 bytes), would otherwise start a new database in which
a live lease reads as free and fencing tokens restart at 1. One that finds another file with our
tables (a new file, or a moved or restored copy) cannot be trusted either: versions count in
each file on their own, so a version this process holds may name another state of the same row
there, and a stale holder's compare-and-swap would succeed over the new holder (a restart
forgets the versions; a reopen does not). Each of these raises :class:`LeaseConfigError` saying
so, and so does every open after it: continuing is the operator's choice, by restarting.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

from ..._exceptions import BackendUnavailable, LeaseConfigError
from ._file import connect

__all__ = ["DatabaseFile"]

Identity = tuple[int, int]


def _identity(path: Path) -> Identity | None:
    """(``st_dev``, ``st_ino``) of the file ``path`` names, None for none (one ``stat``)."""
    try:
        found = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return found.st_dev, found.st_ino


def _gone(path: Path) -> bool:
    try:
        return _identity(path) is None
    except OSError:
        return False


class DatabaseFile:
    """The one file a backend object uses for its whole life, and the connections on it.

    The first open that succeeds may create the file and our tables, and records the file's
    identity. Every later open (after a call found the path naming another file or none, or
    after a connection was closed on an error) must find that same file with our tables:
    versions and fencing tokens live in the file, so a file that was removed or emptied lost
    them, and another file (a new one, a restored or moved copy) issues versions this process
    may already hold for other states of a row; a compare-and-swap with them could succeed
    over another holder. Such an open raises :class:`LeaseConfigError`, and so does every open
    after it: a new backend object (a restart) is the operator's choice to continue.
    """

    def __init__(self, path: Path, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._identity: Identity | None = None
        self._lost = ""  # why no open may succeed any more
        self._lock = threading.Lock()

    def current(self) -> bool:
        """(worker thread) Whether the path still names the file (one ``stat``)."""
        try:
            return self._identity is not None and _identity(self.path) == self._identity
        except OSError:
            return False  # cannot tell: the open that follows reports it

    def open(self) -> sqlite3.Connection:
        """(worker thread) A new connection on the file (raises ``sqlite3.Error`` too)."""
        with self._lock:
            known, lost = self._identity, self._lost
        if lost:
            raise LeaseConfigError(lost)
        try:
            before = _identity(self.path)
        except OSError as exc:
            if known is None:
                before = None  # the first open reports what is wrong with the path
            else:
                raise LeaseConfigError(
                    f"cannot check the SQLite lease database {self.path}: {exc.strerror}; "
                    "give this process access to it and its directory"
                ) from None
        if known is not None and before != known:
            raise self._lose(removed=before is None)
        try:
            conn = connect(self.path, self.busy_timeout, create=known is None)
        except sqlite3.OperationalError:
            if known is not None and _gone(self.path):  # removed since the stat above
                raise self._lose(removed=True) from None
            raise
        if conn is None:
            raise self._lose(removed=True)
        try:
            after = _identity(self.path)
        except OSError:
            after = None
        with self._lock:
            if self._identity is None and after is not None and before in (None, after):
                self._identity = after
            if after is not None and after == self._identity:
                return conn
        conn.close()
        if known is None and self._identity is None:
            raise BackendUnavailable(
                f"the SQLite lease database {self.path} was replaced while it was opened; "
                "the next call opens it again"
            )
        raise self._lose(removed=after is None)

    def _lose(self, *, removed: bool) -> LeaseConfigError:
        """The error every open raises from now on (the file is gone, emptied or replaced)."""
        restart = (
            "restart the processes that use it: with a fresh file (it restarts fencing tokens "
            "at 1) or a restored one, as the operator chooses"
        )
        if removed:
            said = (
                f"the SQLite lease database {self.path} was removed or emptied while this "
                f"process used it: its leases and fencing tokens are gone; {restart}"
            )
        else:
            said = (
                f"the SQLite lease database {self.path} was replaced by another file while this "
                "process used it (a new, moved or restored file): its versions may repeat the "
                f"ones this process holds, so this backend does not use it; {restart}"
            )
        with self._lock:
            self._lost = self._lost or said
            return LeaseConfigError(self._lost)
