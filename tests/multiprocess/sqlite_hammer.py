"""Writes to one SQLite lease record as fast as it can, until killed (for the crash test).

python -m tests.multiprocess.sqlite_hammer PATH
"""

from __future__ import annotations

import dataclasses
import sys

import anyio

from trio_lease import BackendUnavailable, ConflictError, LeaseRecord
from trio_lease.backends.sqlite import SqliteBackend


async def main(path: str) -> None:
    async with SqliteBackend(path) as backend:
        record = None
        while record is None:  # several hammers may race to create the record
            try:
                record = await backend.get("job") or await backend.create(
                    LeaseRecord(name="job", holder="hammer", fencing_token=1)
                )
            except (ConflictError, BackendUnavailable):
                await anyio.sleep(0.01)  # another hammer is creating it, or the file is busy
        print("writing", flush=True)
        while True:
            try:
                record = await backend.update(
                    dataclasses.replace(record, fencing_token=record.fencing_token + 1),
                    record.version,
                )
            except (ConflictError, BackendUnavailable):
                record = await _read(backend)


async def _read(backend: SqliteBackend) -> LeaseRecord:
    """The record, read again until a read succeeds (a busy file is retried, not fatal)."""
    while True:
        try:
            current = await backend.get("job")
        except BackendUnavailable:
            await anyio.sleep(0.01)  # the file stayed busy past busy_timeout: look again soon
            continue
        assert current is not None
        return current


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
