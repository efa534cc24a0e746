"""A singleton as operators see it: Prometheus metrics and health probes on one port.

    python examples/operated_singleton.py [DATABASE] [asyncio|trio]

One process runs a singleton on a SQLite lease with the observers of docs/operations.md: a
:class:`~trio_lease.metrics.PrometheusMetrics` and a :class:`~trio_lease.health.HealthObserver`,
served by a :class:`~trio_lease.health.HealthServer` on a free loopback port (in a pod: a fixed
port, probed by the kubelet and scraped by Prometheus). While it leads, the example probes itself
like a kubelet and scrapes itself like Prometheus, prints what they see, then stops the
singleton gracefully and probes again.
"""

from __future__ import annotations

import sys

import anyio
import httpx
from prometheus_client import CollectorRegistry

from trio_lease import Lease, LeaseSettings, SingletonContext, run_singleton
from trio_lease.backends.sqlite import SqliteBackend
from trio_lease.health import HealthObserver, HealthServer
from trio_lease.metrics import PrometheusMetrics

SETTINGS = LeaseSettings(heartbeat_timeout="3s", heartbeat_interval="0.5s")


async def main(path: str) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    health = HealthObserver()
    leading = anyio.Event()

    async def report(ctx: SingletonContext) -> None:
        print(f"leading with fencing token {ctx.fencing_token}")
        leading.set()
        await ctx.stopping.wait()
        print("stopping gracefully")

    async with (
        SqliteBackend(path) as backend,
        HealthServer(health, metrics=registry) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as probe,
    ):
        lease = Lease("nightly-report", "reporter", backend, SETTINGS, observers=[metrics, health])
        scope = anyio.CancelScope()

        async def singleton() -> None:
            with scope:
                await run_singleton(lease, report, stop_grace=1.0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(singleton)
            await leading.wait()
            await anyio.sleep(1.2)  # a couple of renewals
            await show(probe, "while leading")
            scope.cancel()  # as on SIGTERM: graceful stop, then release
        await show(probe, "after the release")


async def show(probe: httpx.AsyncClient, when: str) -> None:
    healthz = (await probe.get("/healthz")).status_code
    ready = (await probe.get("/readyz", params={"leader": "1"})).status_code
    held = next(
        line
        for line in (await probe.get("/metrics")).text.splitlines()
        if line.startswith("trio_lease_held{")
    )
    print(f"{when}: /healthz {healthz}, /readyz?leader=1 {ready}, {held}")


if __name__ == "__main__":
    database = sys.argv[1] if len(sys.argv) > 1 else "operated.sqlite3"
    backend_name = sys.argv[2] if len(sys.argv) > 2 else "asyncio"
    anyio.run(main, database, backend=backend_name)
