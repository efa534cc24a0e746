"""A lease holder in a process of its own, for the kill -9 test.

Run as ``python -m tests.backends.etcd._holder ENDPOINTS PREFIX NAME L R T ANYIO_BACKEND``:
it acquires the lease on etcd, prints ``held <fencing token>``, and holds it until killed.
"""

from __future__ import annotations

import sys

import anyio

from trio_lease import Lease, LeaseSettings
from trio_lease.backends.etcd import EtcdBackend


async def hold(endpoints: str, prefix: str, name: str, settings: LeaseSettings) -> None:
    """Acquire ``name`` and keep renewing it forever."""
    async with EtcdBackend(endpoints.split(","), prefix=prefix) as backend:
        lease = Lease(name, "doomed-holder", backend, settings)
        async with lease.held(timeout=30) as grant:
            print(f"held {grant.fencing_token}", flush=True)
            await anyio.sleep_forever()


def main(argv: list[str]) -> None:
    """Parse the command line and hold the lease."""
    endpoints, prefix, name, timeout, interval, operation, backend = argv
    settings = LeaseSettings(
        heartbeat_timeout=float(timeout),
        heartbeat_interval=float(interval),
        lease_operation_timeout=float(operation),
    )
    anyio.run(hold, endpoints, prefix, name, settings, backend=backend)


if __name__ == "__main__":
    main(sys.argv[1:])
