"""A process that opens brand-new SQLite files at the same instant as others, for the tests.

    python -m tests.multiprocess.first_open_worker DIRECTORY ROUNDS OWNER BACKEND

For each round ``i`` it prints ``ready``, waits until ``DIRECTORY/go-i`` exists (the test makes
it once every process is ready, so all start together), then opens ``DIRECTORY/db-i.sqlite3``
(missing until then) with two backend objects at once: one whose first call is ``get()``, one
whose first call is an acquire (``try_held()``). It prints one JSON line per round: the errors,
as ``"<type>: <message>"`` (none expected; ``LeaseBusy`` is another process holding the lease,
not an error), and the token it held, if any.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import anyio

from trio_lease import Lease, LeaseBusy, LeaseSettings
from trio_lease.backends.sqlite import SqliteBackend

HOLD = 0.3  # seconds the winner holds the lease: the others find it held (LeaseBusy)
LIMIT = 60.0  # seconds a process waits for a round to start: a hang guard


async def first_get(path: Path, errors: list[str]) -> None:
    try:
        async with SqliteBackend(path) as backend:
            await backend.get("job")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")


async def first_acquire(path: Path, owner: str, errors: list[str], tokens: list[int]) -> None:
    try:
        async with SqliteBackend(path) as backend:
            try:
                # The default settings: the embedded default's first experience.
                async with Lease("job", owner, backend, LeaseSettings()).try_held() as grant:
                    tokens.append(grant.fencing_token)
                    await anyio.sleep(HOLD)
            except LeaseBusy:
                pass  # another process holds it: the acquire itself worked
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")


async def round_(path: Path, owner: str) -> tuple[list[str], list[int]]:
    errors: list[str] = []
    tokens: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(first_get, path, errors)
        tg.start_soon(first_acquire, path, owner, errors, tokens)
    return errors, tokens


def wait_for_go(go: Path) -> bool:
    """A tight poll, so every process starts within about a millisecond of the file."""
    give_up = time.monotonic() + LIMIT
    while not os.path.exists(go):
        if time.monotonic() > give_up:
            return False
        time.sleep(0.0005)
    return True


def main(directory: Path, rounds: int, owner: str, backend: str) -> None:
    for index in range(rounds):
        print(json.dumps({"event": "ready", "round": index}), flush=True)
        go = directory / f"go-{index}"
        if not wait_for_go(go):
            errors, tokens = [f"no {go.name} within {LIMIT} s"], list[int]()
        else:
            path = directory / f"db-{index}.sqlite3"
            errors, tokens = anyio.run(round_, path, owner, backend=backend)
        print(json.dumps({"event": "done", "errors": errors, "tokens": tokens}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
