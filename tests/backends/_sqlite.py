"""Another program's hands on a SQLite lease file, for the SQLite backend's tests."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def shell(path: Path) -> Iterator[sqlite3.Connection]:
    """Another program's connection to the file, committing each statement."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        yield conn


def another_program(path: Path, *statements: str) -> None:
    """Run ``statements`` on ``path`` through a connection of its own, as another program."""
    with shell(path) as conn:
        for statement in statements:
            conn.execute(statement)
