"""Hold a lease on asyncio: the same program as hold_trio.py, with asyncio.

    python examples/hold_asyncio.py [DATABASE] [SECONDS]
"""

from __future__ import annotations

import asyncio
import sys

from trio_lease import Lease, LeaseSettings
from trio_lease.backends.sqlite import SqliteBackend


async def main(path: str, seconds: float) -> None:
    settings = LeaseSettings(
        heartbeat_timeout="15s", heartbeat_interval="1.5s", lease_operation_timeout="500ms"
    )
    async with SqliteBackend(path) as backend:
        lease = Lease("nightly-report", "worker-1", backend, settings)
        async with lease.held() as grant:
            print("running with fencing token", grant.fencing_token)
            await asyncio.sleep(seconds)


if __name__ == "__main__":
    asyncio.run(
        main(
            sys.argv[1] if len(sys.argv) > 1 else "leases.sqlite3",
            float(sys.argv[2]) if len(sys.argv) > 2 else 5.0,
        )
    )
