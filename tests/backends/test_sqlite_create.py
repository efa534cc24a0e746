"""``SqliteBackend(path, create=False)``: a backend that never creates a folder, file or table.

A reader (``trio-lease status``, a dashboard) opens the database only to read it; opening one
that does not exist yet must leave the disk as it was. Reads of a missing database (no file,
or a file without the tables) find no leases; a write raises LeaseConfigError saying why.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from trio_lease import Lease, LeaseConfigError, LeaseRecord, LeaseSettings
from trio_lease.backends.sqlite import SqliteBackend

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(real_time_backend: str) -> str:
    """Real time: the backend's calls run in worker threads."""
    return real_time_backend

SETTINGS = LeaseSettings()  # T = 5 s: a first open in a worker thread under load


def _files(folder: Path) -> list[str]:
    """What ``folder`` holds, at any depth (the database, its -wal and -shm files, folders)."""
    return sorted(str(path) for path in folder.rglob("*"))


def _record(name: str = "job") -> LeaseRecord:
    now = datetime.now(UTC)
    return LeaseRecord(name=name, holder="me_1", fencing_token=1, acquired_at=now, renewed_at=now)


async def test_reading_a_missing_database_creates_nothing(tmp_path: Path) -> None:
    """get() and names() of a missing database find no leases, and no file appears."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path, create=False) as backend:
        assert await backend.get("job") is None
        assert await backend.names() == []
        assert await backend.get("job") is None  # again: still nothing made
    assert _files(tmp_path) == []


async def test_a_write_to_a_missing_database_is_refused(tmp_path: Path) -> None:
    """create() without a database raises LeaseConfigError naming create=False; nothing made."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path, create=False) as backend:
        with pytest.raises(LeaseConfigError, match=r"no SQLite lease database at .*create=False"):
            await backend.create(_record())
    assert _files(tmp_path) == []


async def test_a_handover_request_on_a_missing_database_writes_no_record(tmp_path: Path) -> None:
    """request_handover() through a create=False backend finds nothing to hand over."""
    async with SqliteBackend(tmp_path / "leases.sqlite3", create=False) as backend:
        assert not await Lease("job", "me", backend, SETTINGS).request_handover()
    assert _files(tmp_path) == []


async def test_a_file_without_the_tables_is_left_as_it_is(tmp_path: Path) -> None:
    """An empty file is read as no leases, and stays empty (no tables written into it)."""
    path = tmp_path / "leases.sqlite3"
    path.touch()
    async with SqliteBackend(path, create=False) as backend:
        assert await backend.get("job") is None
        assert await backend.names() == []
    assert path.stat().st_size == 0


async def test_an_existing_database_is_read_and_written(tmp_path: Path) -> None:
    """create=False opens a database another backend made, for reads and writes alike."""
    path = tmp_path / "leases.sqlite3"
    async with SqliteBackend(path) as maker:
        made = await maker.create(_record())
    async with SqliteBackend(path, create=False) as backend:
        read = await backend.get("job")
        assert read is not None and read.version == made.version
        assert await backend.names() == ["job"]
        written = await backend.create(_record("other"))
        assert written.name == "other"


def test_create_must_be_a_boolean(tmp_path: Path) -> None:
    """create="no" (a truthy string) is refused rather than read as True."""
    with pytest.raises(LeaseConfigError, match="create must be True or False"):
        SqliteBackend(tmp_path / "x", create="no")  # type: ignore[arg-type]


def test_a_provider_section_sets_create(tmp_path: Path) -> None:
    """`create = false` in a provider's sqlite section makes a backend that creates nothing."""
    backend = SqliteBackend.from_config({"path": str(tmp_path / "x.sqlite3"), "create": False})
    assert backend.may_create is False
    with pytest.raises(LeaseConfigError, match="create must be True or False"):
        SqliteBackend.from_config({"path": str(tmp_path / "x.sqlite3"), "create": "no"})


async def test_a_watch_of_a_missing_database_is_refused(tmp_path: Path) -> None:
    """watch() without a database raises LeaseConfigError (create=False) and creates nothing."""
    async with SqliteBackend(tmp_path / "leases.sqlite3", create=False) as backend:
        with pytest.raises(LeaseConfigError, match="create=False"):
            async with backend.watch("job") as records:
                async for _ in records:
                    break
    assert _files(tmp_path) == []
