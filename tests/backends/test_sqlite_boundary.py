"""The SQLite backend's boundary: every row is checked, every error is ours and classified.

Rows are written here by raw ``sqlite3`` into tables as another program (or a hand edit) could
make them: untyped columns hold any type. Errors are provoked for real (a parent that is a
file, paths under /proc and /sys, garbage bytes, a held write lock); what needs an unprivileged
user (tests run as root) or a file-size limit runs in a child process that drops privileges or
sets the limit after importing everything it needs. Real files and threads: real time.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._watching import first_state
from trio_lease import (
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    LeaseConfigError,
    LeaseError,
    LeaseRecord,
    LeaseSettings,
)
from trio_lease._algorithm import UNKNOWN_HOLDER, Busy, decide_acquire
from trio_lease.backends.sqlite import SqliteBackend
from trio_lease.testing import check_backend

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
WHEN = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def anyio_backend(real_time_backend: str) -> str:
    """SQLite uses worker threads: real time on both backends."""
    return real_time_backend


@dataclass(frozen=True)
class Sql:
    """A raw SQL expression for a column (bound parameters cannot make invalid UTF-8 text)."""

    text: str


GOOD_ROW: dict[str, object] = {
    "name": "job",
    "holder": "alice",
    "lease_duration": 15.0,
    "fencing_token": 7,
    "acquired_at": WHEN.isoformat(),
    "renewed_at": None,
    "version": 5,
}


def foreign_file(path: Path, *, counter: object = 100, **row: object) -> Path:
    """A file with our table names but untyped columns, holding GOOD_ROW changed by ``row``."""
    values = GOOD_ROW | row
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(
            "CREATE TABLE leases (name PRIMARY KEY, holder, lease_duration, fencing_token, "
            "acquired_at, renewed_at, version)"
        )
        conn.execute("CREATE TABLE version_counter (id INTEGER PRIMARY KEY, value)")
        if counter is not None:
            conn.execute("INSERT INTO version_counter VALUES (1, ?)", (counter,))
        sql = ", ".join(v.text if isinstance(v, Sql) else "?" for v in values.values())
        params = [v for v in values.values() if not isinstance(v, Sql)]
        conn.execute(f"INSERT INTO leases ({', '.join(values)}) VALUES ({sql})", params)
    return path


def record(name: str = "job", holder: str = "bob", **changes: object) -> LeaseRecord:
    fields: dict[str, object] = {"lease_duration": 5.0, "fencing_token": 1, "acquired_at": WHEN}
    return LeaseRecord(name=name, holder=holder, **(fields | changes))  # type: ignore[arg-type]


async def read(path: Path, name: str = "job") -> LeaseRecord | None:
    async with SqliteBackend(path) as backend:
        return await backend.get(name)


# -- rows -------------------------------------------------------------------------------------

UNREADABLE = [
    pytest.param("holder", 42, "holder: expected a string, got an integer", id="holder-integer"),
    pytest.param("holder", b"alice", "holder: expected text, got a blob", id="holder-blob"),
    pytest.param("holder", None, "holder: expected a string, got null", id="holder-null"),
    pytest.param("holder", Sql("CAST(x'616cff' AS TEXT)"), "not valid UTF-8", id="holder-utf8"),
    pytest.param("fencing_token", "abc", "expected an integer, got a string", id="token-text"),
    pytest.param("fencing_token", "7", "expected an integer, got a string", id="token-digits"),
    pytest.param("fencing_token", 1.5, "expected an integer, got a number", id="token-real"),
    pytest.param("fencing_token", float(2**62 * 4), "got a number", id="token-2**64-real"),
    pytest.param("fencing_token", -1, "integer out of range", id="token-negative"),
    pytest.param("fencing_token", b"\x07", "got bytes", id="token-blob"),
    pytest.param("lease_duration", math.nan, "expected a number, got null", id="duration-nan"),
    pytest.param("lease_duration", math.inf, "number out of range", id="duration-inf"),
    pytest.param("lease_duration", -1.0, "number out of range", id="duration-negative"),
    pytest.param("lease_duration", 2.0**31, "number out of range", id="duration-over-int32"),
    pytest.param("lease_duration", "15", "expected a number, got a string", id="duration-text"),
]


@pytest.mark.parametrize(("column", "stored", "problem"), UNREADABLE)
async def test_row_with_unreadable_content_reads_as_unreadable(
    tmp_path: Path, column: str, stored: object, problem: str
) -> None:
    """A column of the wrong type or out of range gives an unreadable record, not an error."""
    got = await read(foreign_file(tmp_path / "db", **{column: stored}))
    assert got is not None
    assert got.unreadable.startswith(f"{column}: ") and problem in got.unreadable
    assert "alice" not in got.unreadable  # types and ranges only, never the stored value
    assert (got.holder, got.version, got.is_free) == ("", "5", False)
    assert got.fencing_token == (-1 if column == "fencing_token" else 7)
    assert got.lease_duration == (0.0 if column == "lease_duration" else 15.0)
    assert got.acquired_at == WHEN


@pytest.mark.parametrize(
    ("column", "stored"),
    [
        pytest.param("acquired_at", "yesterday", id="time-not-iso"),
        pytest.param("renewed_at", 1714564800, id="time-int"),
        pytest.param("renewed_at", "2" * 1000, id="time-long-text"),
        pytest.param("renewed_at", b"2024", id="time-blob"),
    ],
)
async def test_unreadable_timestamps_read_as_none_and_leave_the_record_readable(
    tmp_path: Path, column: str, stored: object
) -> None:
    """Timestamps are for humans only (never compared): a bad one reads as None, as on etcd."""
    got = await read(foreign_file(tmp_path / "db", **{column: stored}))
    assert got is not None and not got.unreadable
    assert getattr(got, column) is None
    assert (got.holder, got.fencing_token) == ("alice", 7)


async def test_a_naive_timestamp_reads_as_utc(tmp_path: Path) -> None:
    """A time without an offset (another program's row) reads as UTC, as on etcd."""
    got = await read(foreign_file(tmp_path / "db", acquired_at="2024-05-01T12:00:00"))
    assert got is not None and not got.unreadable
    assert got.acquired_at == datetime(2024, 5, 1, 12, tzinfo=UTC)


async def test_unreadable_row_is_held_by_an_unknown_holder_and_keeps_its_version(
    tmp_path: Path,
) -> None:
    """An unreadable row is never free: a contender waits, and a write at its version lands."""
    path = foreign_file(tmp_path / "db", holder=b"\x00")
    async with SqliteBackend(path) as backend:
        got = await backend.get("job")
        assert got is not None and got.unreadable and not got.is_free
        decision = decide_acquire(
            got,
            name="job",
            identity="me",
            observation=None,
            now=0.0,
            settings=LeaseSettings(
                heartbeat_timeout=10, heartbeat_interval=2, lease_operation_timeout=1
            ),
            wall_now=WHEN,
        )
        assert isinstance(decision, Busy) and decision.holder == UNKNOWN_HOLDER
        assert decision.expires_in == 15.0  # the readable lease_duration, counted from now
        written = await backend.update(record(fencing_token=8), got.version)
        assert written.version != got.version and not written.unreadable
        assert await backend.get("job") == written


@pytest.mark.parametrize(
    "stored",
    ["abc", "5", 0, -3, 1.5, None, b"\x05", float(2**64)],
    ids=["text", "digits", "zero", "negative", "real", "null", "blob", "2**64-real"],
)
async def test_unreadable_version_raises_protocol_error_naming_lease_and_column(
    tmp_path: Path, stored: object
) -> None:
    """A row whose version cannot be read is not a record: BackendProtocolError, in every read."""
    path = foreign_file(tmp_path / "db", version=stored)
    async with SqliteBackend(path) as backend:
        with pytest.raises(BackendProtocolError, match=r"lease 'job' has an unreadable version"):
            await backend.get("job")
        with pytest.raises(BackendProtocolError, match=r"\(version: "):
            await backend.names()
        with pytest.raises(BackendProtocolError, match=r"version"):
            await first_state(backend, "job")


async def test_names_checks_every_row(tmp_path: Path) -> None:
    """names() lists rows with unreadable content and refuses a row whose name is unreadable."""
    path = foreign_file(tmp_path / "db", holder=3.5)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("INSERT INTO leases VALUES ('other', 'x', 1.0, 1, NULL, NULL, 6)")
    async with SqliteBackend(path) as backend:
        assert await backend.names() == ["job", "other"]
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute(
                "INSERT INTO leases (name, holder, lease_duration, fencing_token, version) "
                "VALUES (x'6a6f62', 'x', 1.0, 1, 7)"
            )
        with pytest.raises(BackendProtocolError, match=r"unreadable name \(name: expected text"):
            await backend.names()


async def test_watch_validates_rows_on_its_own_connection(tmp_path: Path) -> None:
    """watch yields an unreadable row as unreadable, then the row a writer fixed."""
    path = foreign_file(tmp_path / "db", fencing_token="abc")
    backend = SqliteBackend(path, watch_interval=0.01)
    async with backend, backend.watch("job") as events:
        first = await anext(events)
        assert first is not None and first.unreadable.startswith("fencing_token: ")
        assert first.fencing_token == -1
        written = await backend.update(record(fencing_token=8), first.version)
        assert await anext(events) == written


@pytest.mark.parametrize(
    "change",
    [
        {"fencing_token": 2**64},
        {"fencing_token": -2},
        {"holder": "\ud800"},
        {"lease_duration": math.nan},
    ],
    ids=["token-over-int64", "token-negative", "holder-surrogate", "duration-nan"],
)
async def test_record_that_would_not_read_back_is_refused_before_writing(
    tmp_path: Path, change: dict[str, object]
) -> None:
    """A record the backend could not read back is a LeaseConfigError, not Overflow/Unicode."""
    async with SqliteBackend(tmp_path / "db") as backend:
        with pytest.raises(LeaseConfigError, match=r"cannot store lease 'job'"):
            await backend.create(record(**change))  # type: ignore[arg-type]
        assert await backend.get("job") is None


async def test_version_that_was_never_issued_conflicts(tmp_path: Path) -> None:
    """An expected version SQLite could not even bind (over int64, not digits) conflicts."""
    async with SqliteBackend(tmp_path / "db") as backend:
        await backend.create(record())
        for version in ["9" * 30, "9" * 19, "-1", " 1", "1.0", "01", "0", "x", ""]:
            with pytest.raises(ConflictError, match="never issued"):
                await backend.update(record(), version)


# -- schema -----------------------------------------------------------------------------------


async def test_leases_table_missing_columns_is_not_a_trio_lease_database(tmp_path: Path) -> None:
    """A leases table without our columns is a LeaseConfigError naming the path, every time."""
    path = tmp_path / "db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT)")
        conn.execute("CREATE TABLE version_counter (id INTEGER PRIMARY KEY, value INTEGER)")
    async with SqliteBackend(path) as backend:
        for _ in range(2):
            with pytest.raises(LeaseConfigError, match="is not a trio_lease database") as caught:
                await backend.get("job")
            assert str(path) in str(caught.value)
            assert "no column lease_duration, fencing_token" in str(caught.value)
        with pytest.raises(LeaseConfigError, match="is not a trio_lease database"):
            await first_state(backend, "job")


async def test_another_programs_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    """A database holding other tables is refused, and no table of ours is added to it."""
    path = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)")
    async with SqliteBackend(path) as backend:
        with pytest.raises(LeaseConfigError, match="no table leases"):
            await backend.create(record())
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("users",)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)


async def test_tables_dropped_while_connected_is_a_config_error(tmp_path: Path) -> None:
    """A table dropped under an open connection is a LeaseConfigError, and so is the reopen."""
    path = tmp_path / "db"
    async with SqliteBackend(path) as backend:
        await backend.create(record())
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("DROP TABLE leases")
        with pytest.raises(LeaseConfigError, match=r"no such table: leases; .* is no longer a"):
            await backend.get("job")
        with pytest.raises(
            LeaseConfigError, match=r"not a trio_lease database \(it has tables, but"
        ):
            await backend.get("job")


async def test_leases_table_keyed_by_something_else_is_refused(tmp_path: Path) -> None:
    """Without name as the primary key, two rows could share a name: the file is refused."""
    path = tmp_path / "db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(
            "CREATE TABLE leases (name, holder, lease_duration, fencing_token, acquired_at, "
            "renewed_at, version)"
        )
        conn.execute("CREATE TABLE version_counter (id INTEGER PRIMARY KEY, value)")
    with pytest.raises(LeaseConfigError, match="primary key of table leases is not its name"):
        await read(path)


async def test_missing_counter_restarts_above_every_version(tmp_path: Path) -> None:
    """A lost version counter is restored above the versions in use, so none is reused."""
    path = foreign_file(tmp_path / "db", counter=None, version=41)
    async with SqliteBackend(path) as backend:
        assert (await backend.create(record("other"))).version == "42"


async def test_unreadable_counter_is_a_protocol_error_and_writes_nothing(tmp_path: Path) -> None:
    """A counter that is not an integer is never incremented (SQLite would make 'x' + 1 = 1)."""
    path = foreign_file(tmp_path / "db", counter="x")
    async with SqliteBackend(path) as backend:
        with pytest.raises(BackendProtocolError, match=r"version counter .*version_counter"):
            await backend.create(record("other"))
        assert await backend.names() == ["job"]


# -- errors that retrying cannot fix, and transient ones ---------------------------------------


def garbage(path: Path) -> Path:
    path.write_bytes(b"SECRET-CONTENT " * 400)
    return path


def foreign_app(path: Path) -> Path:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    return path


def damaged(path: Path) -> Path:
    """Our schema with one row, then the page of table leases overwritten with junk."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(
            "CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, lease_duration "
            "REAL NOT NULL, fencing_token INTEGER NOT NULL, acquired_at TEXT, renewed_at TEXT, "
            "version INTEGER NOT NULL)"
        )
        conn.execute("CREATE TABLE version_counter (id INTEGER PRIMARY KEY, value INTEGER)")
        conn.execute("INSERT INTO version_counter VALUES (1, 1)")
        conn.execute("INSERT INTO leases VALUES ('job', 'SECRET', 15.0, 7, NULL, NULL, 1)")
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'leases'"
        ).fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    with path.open("r+b") as file:
        file.seek((root - 1) * size)
        file.write(b"\xee" * size)
    return path


def under_a_file(path: Path, *parts: str) -> Path:
    path.touch()
    return path.joinpath(*parts)


BAD_PATHS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "path-is-a-directory": (lambda tmp: tmp, "is a directory"),
    "under-proc-self": (lambda _: Path("/proc/self/leases.db"), "unable to open database file"),
    "garbage-bytes": (lambda tmp: garbage(tmp / "db"), "file is not a database"),
    "damaged-file": (lambda tmp: damaged(tmp / "db"), "database disk image is malformed"),
    "another-apps-database": (lambda tmp: foreign_app(tmp / "db"), "not a trio_lease database"),
}


@pytest.mark.parametrize("case", list(BAD_PATHS))
async def test_path_that_cannot_work_is_a_config_error(tmp_path: Path, case: str) -> None:
    """A path no retry can fix is a LeaseConfigError naming the path, without file content."""
    make, said = BAD_PATHS[case]
    path = make(tmp_path)
    async with SqliteBackend(path) as backend:
        for _ in range(2):  # the same answer again: nothing transient about it
            with pytest.raises(LeaseConfigError) as caught:
                await backend.get("job")
            assert said in str(caught.value) and str(path) in str(caught.value)
            assert "SECRET" not in str(caught.value)


#: Paths whose folder is missing or not a folder: refused when the backend is made (the
#: folder was created, anywhere, by the first call).
BAD_FOLDERS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "parent-is-a-file": (lambda tmp: under_a_file(tmp / "file", "db"), "is not a folder"),
    "ancestor-is-a-file": (
        lambda tmp: under_a_file(tmp / "file", "sub", "db"),
        "does not exist: {tmp}/file is a file, not a folder",
    ),
    "missing-folder": (lambda tmp: tmp / "no" / "such" / "db", "does not exist"),
    "directory-under-proc": (
        lambda _: Path("/proc/self/trio-lease-test/leases.db"),
        "does not exist",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FOLDERS))
@pytest.mark.parametrize("create", [True, False])
def test_a_path_in_a_missing_folder_is_refused_when_made(
    tmp_path: Path, case: str, create: bool
) -> None:
    """SqliteBackend(path) with no folder for path: LeaseConfigError at once, nothing created."""
    make, said = BAD_FOLDERS[case]
    path = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(LeaseConfigError) as caught:
        SqliteBackend(path, create=create)
    message = str(caught.value)
    assert said.format(tmp=tmp_path) in message, message
    assert "the SQLite backend's path" in message and "create the folder first" in message
    assert sorted(tmp_path.rglob("*")) == before


async def test_the_default_path_gets_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default location (XDG state) is the one path whose folder the backend creates."""
    monkeypatch.delenv("TRIO_LEASE_SQLITE_PATH", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    async with SqliteBackend() as backend:
        await backend.create(record())
    assert (tmp_path / "state" / "trio-lease" / "leases.sqlite3").is_file()


@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="no sysfs mounted at /sys")
async def test_path_under_sys_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating the default path's directory under /sys is refused by the kernel, even to
    root: LeaseConfigError."""
    monkeypatch.setenv("TRIO_LEASE_SQLITE_PATH", "/sys/trio-lease-test/leases.db")
    async with SqliteBackend() as backend:
        with pytest.raises(LeaseConfigError, match=r"cannot create the directory /sys/trio-lease"):
            await backend.create(record())


@pytest.mark.parametrize("case", list(BAD_PATHS))
async def test_no_raw_error_escapes_any_public_method(tmp_path: Path, case: str) -> None:
    """get, create, update, names, watch and aclose raise only trio_lease errors on a bad path."""
    path = BAD_PATHS[case][0](tmp_path)
    backend = SqliteBackend(path)
    calls = {
        "get": lambda: backend.get("job"),
        "create": lambda: backend.create(record()),
        "update": lambda: backend.update(record(), "1"),
        "names": backend.names,
        "watch": lambda: first_state(backend, "job"),
    }
    for call in calls.values():
        with pytest.raises(LeaseConfigError):
            await call()  # type: ignore[no-untyped-call]
    await backend.aclose()
    with pytest.raises(BackendUnavailable, match="is closed"):
        await backend.get("job")


async def test_lock_held_past_busy_timeout_is_transient(tmp_path: Path) -> None:
    """'database is locked' past busy_timeout is BackendUnavailable, and passes when released."""
    path = tmp_path / "db"
    async with SqliteBackend(path, busy_timeout=0.05) as backend:
        await backend.create(record())
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as blocker:
            blocker.execute("BEGIN IMMEDIATE")
            with pytest.raises(BackendUnavailable, match="database is locked") as caught:
                await backend.create(record("other"))
            assert not isinstance(caught.value, LeaseConfigError)
            blocker.execute("ROLLBACK")
        assert (await backend.create(record("other"))).holder == "bob"


async def test_conformance_still_passes(tmp_path: Path) -> None:
    """The checked boundary keeps the SPI: check_backend passes on a fresh file."""
    path = tmp_path / "leases.sqlite3"
    await check_backend(lambda: SqliteBackend(path, watch_interval=0.01), prefix="boundary")


# -- in a child process: as an unprivileged user, under a file-size limit ----------------------


def child_main() -> None:  # pragma: no cover - runs in the child process
    """Drop privileges / limit file size as told in argv[1], then run the writes it lists."""
    import resource
    import signal

    spec = json.loads(sys.argv[1])
    # Imported before privileges are dropped: the interpreter's files may be out of reach.
    import anyio._backends._asyncio
    import anyio._backends._trio

    if spec["unprivileged"] and os.getuid() == 0:
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    if spec["fsize"]:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (spec["fsize"], resource.RLIM_INFINITY))

    async def run() -> list[dict[str, object]]:
        results: list[dict[str, object]] = []
        if spec["default"]:  # the path as the default location (its folder may be made)
            os.environ["TRIO_LEASE_SQLITE_PATH"] = spec["path"]
        path = None if spec["default"] else spec["path"]
        async with SqliteBackend(path, busy_timeout=0.2) as backend:
            for name, size in spec["writes"]:
                if name == "unlimit":
                    resource.setrlimit(resource.RLIMIT_FSIZE, (-1, -1))
                    continue
                try:
                    await backend.create(record(name, holder="h" * size))
                    results.append({"ok": True})
                except Exception as exc:
                    results.append(
                        {
                            "type": type(exc).__name__,
                            "ours": isinstance(exc, LeaseError),
                            "config": isinstance(exc, LeaseConfigError),
                            "message": str(exc),
                        }
                    )
        return results

    print(json.dumps(anyio.run(run, backend=spec["backend"])))


def in_child(
    backend: str,
    path: Path,
    writes: list[tuple[str, int]],
    *,
    unprivileged: bool = False,
    fsize: int = 0,
    default: bool = False,
) -> list[dict[str, object]]:
    spec = {
        "backend": backend,
        "default": default,
        "path": str(path),
        "writes": writes,
        "unprivileged": unprivileged,
        "fsize": fsize,
    }
    code = "from tests.backends.test_sqlite_boundary import child_main; child_main()"
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(spec)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results: list[dict[str, object]] = json.loads(done.stdout)
    return results


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory under /tmp that an unprivileged user can reach (tmp_path's parent is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="trio-lease-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        path.chmod(0o755)
        shutil.rmtree(path)


def test_unwritable_directory_is_a_config_error(shared_dir: Path, real_time_backend: str) -> None:
    """'unable to open database file' in a directory we cannot write: LeaseConfigError."""
    shared_dir.chmod(0o555)  # for a child that is not root either way
    (result,) = in_child(real_time_backend, shared_dir / "db", [("job", 1)], unprivileged=True)
    assert result["config"] and "unable to open database file" in str(result["message"])


def test_permission_denied_creating_the_directory_is_a_config_error(
    shared_dir: Path, real_time_backend: str
) -> None:
    """mkdir's PermissionError becomes a LeaseConfigError naming the directory."""
    shared_dir.chmod(0o555)
    path = shared_dir / "sub" / "db"
    (result,) = in_child(real_time_backend, path, [("job", 1)], unprivileged=True, default=True)
    assert result["config"] and "Permission denied" in str(result["message"])
    assert f"cannot create the directory {path.parent}" in str(result["message"])


def test_read_only_file_is_a_config_error(shared_dir: Path, real_time_backend: str) -> None:
    """'attempt to write a readonly database' (a file we may read, not write): LeaseConfigError."""
    path = shared_dir / "db"

    async def create_as_root() -> None:
        async with SqliteBackend(path) as backend:
            await backend.create(record())

    anyio.run(create_as_root, backend=real_time_backend)
    path.chmod(0o444)
    if os.getuid() == 0:  # the directory stays writable to the child (for -wal and -shm)
        os.chown(shared_dir, NOBODY, NOBODY)
    (result,) = in_child(real_time_backend, path, [("other", 1)], unprivileged=True)
    assert result["config"], result
    assert "attempt to write a readonly database" in str(result["message"])


def test_disk_io_error_is_transient(tmp_path: Path, real_time_backend: str) -> None:
    """'disk I/O error' (a write over the file-size limit) is BackendUnavailable, then passes."""
    writes = [("small", 10), ("big", 1_000_000), ("unlimit", 0), ("big", 1_000_000)]
    results = in_child(real_time_backend, tmp_path / "db", writes, fsize=256 * 1024)
    small, failed, retried = results
    assert small == retried == {"ok": True}
    assert failed["type"] == "BackendUnavailable" and not failed["config"], failed
    assert "disk I/O error" in str(failed["message"])


class _RefusedSwitch:
    """A connection whose journal-mode switch is refused ``refusals`` times, as SQLite refuses
    one of two connections switching at once (no busy handler: it could deadlock)."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls = 0

    def execute(self, sql: str) -> _RefusedSwitch:
        assert sql == "PRAGMA journal_mode=WAL"
        self.calls += 1
        if self.calls <= self.refusals:
            raise sqlite3.OperationalError("database is locked")
        return self

    def fetchall(self) -> list[tuple[str]]:
        return [("wal",)]


def test_a_refused_switch_to_wal_is_retried_until_busy_timeout() -> None:
    """The switch is tried again after a refusal; refused past busy_timeout, SQLite's error is
    raised as it is (the backend's one translation point makes it a typed error)."""
    from trio_lease.backends.sqlite._file import _use_wal

    twice = _RefusedSwitch(2)
    _use_wal(twice, 5.0)  # type: ignore[arg-type]
    assert twice.calls == 3
    always = _RefusedSwitch(10**9)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _use_wal(always, 0.05)  # type: ignore[arg-type]
    assert always.calls >= 2


_RACE_ROUNDS = 30
_RACERS = 8


def _open_each_round(directory: str, start: Any, done: Any, failures: Any) -> None:
    """One racing process: open round r's file when every racer is ready, for each round."""
    from trio_lease.backends.sqlite._file import connect

    for round_ in range(_RACE_ROUNDS):
        start.wait()
        try:
            connect(Path(directory) / f"old-{round_}.db", 5.0).close()
        except sqlite3.Error as exc:
            failures.put(f"round {round_}: {type(exc).__name__}: {exc}")
        done.wait()


def test_processes_opening_a_rollback_journal_file_at_once_all_switch_it_to_wal(
    tmp_path: Path,
) -> None:
    """A file left in rollback-journal mode (with our tables), opened by eight processes at the
    same moment, thirty times over: every open succeeds and the file ends in WAL mode. (Without
    the retry about one open in twenty was refused with "database is locked".)"""
    import multiprocessing
    import queue

    from trio_lease.backends.sqlite._file import connect

    context = multiprocessing.get_context("spawn")
    start, done = context.Barrier(_RACERS + 1), context.Barrier(_RACERS + 1)
    failures = context.Queue()
    racers = [
        context.Process(target=_open_each_round, args=(str(tmp_path), start, done, failures))
        for _ in range(_RACERS)
    ]
    for racer in racers:
        racer.start()
    try:
        for round_ in range(_RACE_ROUNDS):
            path = tmp_path / f"old-{round_}.db"
            connect(path, 5.0).close()
            with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as plain:
                assert plain.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
            start.wait(timeout=60)
            done.wait(timeout=60)
            with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as plain:
                assert plain.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        for racer in racers:
            racer.join(timeout=60)
    refused: list[str] = []
    with contextlib.suppress(queue.Empty):
        while True:
            refused.append(failures.get(timeout=0.5))
    assert refused == []
    assert [racer.exitcode for racer in racers] == [0] * _RACERS
