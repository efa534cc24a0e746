"""A singleton as operators see it: metrics, health probes, and a handover in a rolling deploy.

    python examples/operated_singleton.py [DATABASE] [asyncio|trio]

Replica "old" runs a singleton on a SQLite lease with the observers of docs/operations.md: a
:class:`~trio_lease.metrics.PrometheusMetrics` and a :class:`~trio_lease.health.HealthObserver`,
served by a :class:`~trio_lease.health.HealthServer` on a free loopback port (in a pod: a fixed
port, probed by the kubelet and scraped by Prometheus). While it leads, the example probes itself
like a kubelet and scrapes itself like Prometheus. Then replica "new" (the next version, in a
rolling deploy) asks for a handover: "old" stops its work gracefully and releases, and "new"
leads at once with the next fencing token. Finally "new" stops gracefully and the probes show
nobody leading. (Both replicas share one process and one set of observers here; in a cluster
each pod has its own.)
"""

from __future__ import annotations

import functools
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
        replica = ctx.grant.owner
        print(f"{replica}: leading with fencing token {ctx.fencing_token}")
        leading.set()
        await ctx.stopping.wait()
        print(f"{replica}: stopping gracefully")

    async with (
        SqliteBackend(path) as backend,
        HealthServer(health, metrics=registry) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as probe,
    ):

        def replica(owner: str) -> Lease:
            observers = [metrics, health]
            return Lease("nightly-report", owner, backend, SETTINGS, observers=observers)

        old, new = replica("old"), replica("new")
        scope = anyio.CancelScope()
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(run_singleton, old, report, retry_interval=60))
            await leading.wait()
            await anyio.sleep(1.2)  # a couple of renewals
            await show(probe, "while old leads")

            leading = anyio.Event()
            await new.request_handover()  # the rolling deploy's new version asks

            async def next_version() -> None:
                with scope:
                    await run_singleton(new, report, stop_grace=1.0)

            tg.start_soon(next_version)
            await leading.wait()
            await show(probe, "while new leads")
            scope.cancel()  # as on SIGTERM: graceful stop, then release
            await anyio.sleep(0.2)
            tg.cancel_scope.cancel()  # old competes again: end it too
        await show(probe, "after both stopped")


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
