"""The SQLite backend follows the SPI, on real time (it runs blocking calls in threads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_lease.backends.sqlite import SqliteBackend
from trio_lease.testing import check_backend

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend(real_time_backend: str) -> str:
    """SQLite uses worker threads: real time on both backends."""
    return real_time_backend


async def test_sqlite_backend_passes_conformance(tmp_path: Path) -> None:
    """SqliteBackend clients on one file pass check_backend."""
    path = tmp_path / "leases.sqlite3"
    await check_backend(lambda: SqliteBackend(path, watch_interval=0.01))
