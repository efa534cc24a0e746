"""One consumer per tenant, shared by the replicas that are running: scale from 1 to 3.

    python examples/partitioned_consumers.py DATABASE REPLICA SECONDS

Each replica runs ``run_partitioned`` over six tenants for SECONDS: it consumes the tenants the
assignment gives it (here: it logs), each under the tenant's own lease, and hands a tenant over
when a new replica joins. Start one, then a second and a third on the same DATABASE: the tenants
spread two per replica, and no tenant is ever consumed by two replicas at once. Each line on
stdout is a JSON event stamped with the system-wide monotonic clock.
"""

from __future__ import annotations

import json
import sys
import time

import anyio

from trio_lease import Grant, LeaseSettings, run_partitioned
from trio_lease.backends.sqlite import SqliteBackend

TENANTS = ["acme", "globex", "hooli", "initech", "stark", "umbrella"]
SETTINGS = LeaseSettings(
    heartbeat_timeout="3s", heartbeat_interval="500ms", lease_operation_timeout="300ms"
)


def say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


async def main(path: str, replica: str, seconds: float) -> None:
    async def consume(tenant: str, grant: Grant) -> None:
        say("start", replica=replica, tenant=tenant, token=grant.fencing_token)
        try:
            await anyio.sleep_forever()  # read the tenant's queue, fenced by grant.fencing_token
        finally:
            say("end", replica=replica, tenant=tenant)

    async with SqliteBackend(path) as backend:
        with anyio.move_on_after(seconds):
            await run_partitioned(
                TENANTS,
                consume,
                name="consumers",
                owner=replica,
                backend=backend,
                settings=SETTINGS,
            )
    say("exit", replica=replica)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]))
