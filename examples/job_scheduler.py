"""A job scheduler that runs on exactly one node at a time, as a singleton (Akka's use case).

    python examples/job_scheduler.py [DATABASE] [asyncio|trio]

Two scheduler nodes share one SQLite file (in production: separate pods sharing a Kubernetes
Lease). Only the leader schedules jobs, stamping each with its fencing token. After a while the
leader is shut down gracefully (as on SIGTERM): it finishes the job in hand within stop_grace,
releases the lease, and the other node takes over at once.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from trio_lease import Grant, Lease, LeaseSettings, SingletonContext, run_singleton
from trio_lease.backends.sqlite import SqliteBackend

SETTINGS = LeaseSettings(
    heartbeat_timeout="3s",
    heartbeat_interval="0.5s",
    lease_operation_timeout="250ms",
    stop_timeout="0.5s",
)


def scheduler(node: str, leading: anyio.Event) -> Callable[[SingletonContext], Awaitable[None]]:
    async def schedule_jobs(ctx: SingletonContext) -> None:
        print(f"{node}: leading with fencing token {ctx.fencing_token}")
        leading.set()
        job = 0
        while not ctx.stopping.is_set():
            job += 1
            print(f"{node}: scheduled job {job} (token {ctx.fencing_token})")
            with anyio.move_on_after(0.2):
                await ctx.stopping.wait()
        print(f"{node}: stopping gracefully")

    return schedule_jobs


async def main(path: str) -> None:
    async with SqliteBackend(path, watch_interval=0.02) as backend:
        node_scopes = {name: anyio.CancelScope() for name in ("node-a", "node-b")}
        leading = {name: anyio.Event() for name in ("node-a", "node-b")}

        async def node(
            name: str, *, task_status: TaskStatus[Grant] = anyio.TASK_STATUS_IGNORED
        ) -> None:
            lease = Lease("job-scheduler", name, backend, SETTINGS)
            with node_scopes[name]:
                await run_singleton(
                    lease, scheduler(name, leading[name]), stop_grace=1.0, task_status=task_status
                )

        async with anyio.create_task_group() as tg:
            await tg.start(node, "node-a")  # returns once node-a leads
            tg.start_soon(node, "node-b")  # follows until node-a leaves
            await anyio.sleep(0.5)
            print("shutting node-a down")
            node_scopes["node-a"].cancel()  # graceful: node-a finishes, releases
            with anyio.fail_after(30):
                await leading["node-b"].wait()  # node-b takes over (at once, by watch)
            await anyio.sleep(0.5)
            node_scopes["node-b"].cancel()


if __name__ == "__main__":
    anyio.run(
        main,
        sys.argv[1] if len(sys.argv) > 1 else "leases.sqlite3",
        backend=sys.argv[2] if len(sys.argv) > 2 else "asyncio",
    )
