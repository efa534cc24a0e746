"""A lease worker run as a real OS process by the multi-process tests.

    python -m tests.multiprocess.lease_worker PATH OWNER ROUNDS WORK [BACKEND]

Holds lease "job" ROUNDS times for WORK seconds each (ROUNDS 0 = hold forever) and prints one
JSON line per event with time.monotonic() stamps (CLOCK_MONOTONIC is system-wide on Linux, so
stamps from different processes compare) and wall-clock ones (``wall``: they compare with the
UTC times the holder writes into its record, ``renewed_at``).
"""

from __future__ import annotations

import json
import sys
import time

import anyio

from trio_lease import Lease, LeaseLost, LeaseSettings
from trio_lease.backends.sqlite import SqliteBackend

SETTINGS = LeaseSettings(
    heartbeat_timeout=3, heartbeat_interval=0.5, lease_operation_timeout=0.25, stop_timeout=0.2
)


def emit(event: str, **fields: object) -> None:
    stamps = {"t": time.monotonic(), "wall": time.time()}
    print(json.dumps({"event": event, **stamps, **fields}), flush=True)


async def main(path: str, owner: str, rounds: int, work: float) -> None:
    async with SqliteBackend(path, watch_interval=0.02) as backend:
        lease = Lease("job", owner, backend, SETTINGS)
        emit("ready", identity=lease.identity)
        done = 0
        while rounds == 0 or done < rounds:
            try:
                async with lease.held() as grant:
                    emit("start", token=grant.fencing_token)
                    try:
                        await anyio.sleep(work if rounds else 3600 * 24)
                    finally:
                        emit("end", token=grant.fencing_token)
            except LeaseLost as exc:
                emit("lost", cause=str(exc))
            done += 1
            await anyio.sleep(0.01)


if __name__ == "__main__":
    path, owner, rounds, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    backend_name = sys.argv[5] if len(sys.argv) > 5 else "asyncio"
    anyio.run(main, path, owner, rounds, work, backend=backend_name)
