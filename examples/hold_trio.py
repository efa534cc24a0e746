"""Hold a lease on trio: the body runs only while this owner holds "nightly-report".

    python examples/hold_trio.py [DATABASE] [SECONDS]
"""

from __future__ import annotations

import sys

import trio

from trio_lease import Lease, LeaseSettings
from trio_lease.backends.sqlite import SqliteBackend


async def main(path: str, seconds: float) -> None:
    settings = LeaseSettings(
        heartbeat_timeout="15s", heartbeat_interval="1.5s", lease_operation_timeout="500ms"
    )
    async with SqliteBackend(path) as backend:
        lease = Lease("nightly-report", "worker-1", backend, settings)
        async with lease.held() as grant:  # waits until this owner holds the lease
            print("running with fencing token", grant.fencing_token)
            await trio.sleep(seconds)  # guarded work: cancelled if the lease is lost
        # released here; on loss, LeaseLost is raised instead


if __name__ == "__main__":
    trio.run(
        main,
        sys.argv[1] if len(sys.argv) > 1 else "leases.sqlite3",
        float(sys.argv[2]) if len(sys.argv) > 2 else 5.0,
    )
