"""The Akka-style API: acquire() with a lease-lost callback, check_lease(), release().

    python examples/akka_style.py [DATABASE]

The heartbeat of acquire() runs in the task group opened by ``async with lease.host():``, never in a
detached background task, so leaving that block always stops renewing.
"""

from __future__ import annotations

import sys

import anyio

from trio_lease import Lease, LeaseSettings
from trio_lease.backends.sqlite import SqliteBackend


def on_lost(cause: BaseException | None) -> None:
    print("lease lost:", cause)


async def main(path: str) -> None:
    settings = LeaseSettings(
        heartbeat_timeout="15s", heartbeat_interval="1.5s", lease_operation_timeout="500ms"
    )
    async with SqliteBackend(path) as backend:
        mine = Lease("shard-7", "node-a", backend, settings)
        theirs = Lease("shard-7", "node-b", backend, settings)
        async with mine.host(), theirs.host():
            print("node-a acquired:", await mine.acquire(on_lost=on_lost))
            print("node-b acquired:", await theirs.acquire())
            print("node-a check_lease:", mine.check_lease())
            print("node-a released:", await mine.release())
            print("node-b acquired:", await theirs.acquire())


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else "leases.sqlite3")
