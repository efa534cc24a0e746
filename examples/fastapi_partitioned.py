"""One consumer per partition of a queue, under FastAPI and uvicorn: scale from 1 to 3 replicas.

    pip install ".[examples]"    # in a checkout of this repository
    REPLICA=api-1 LEASES_DATABASE=leases.sqlite3 \\
        uvicorn --app-dir examples fastapi_partitioned:app --port 8001

Every replica serves HTTP; between them they consume the six partitions of the ``orders``
queue, each partition on exactly one replica at a time, under the partition's own lease. The
application's lifespan owns the work: at start-up it opens the backend and runs
``run_partitioned`` in a task group; on shutdown (SIGTERM, Ctrl-C) it cancels the consumers,
whose partitions are released and taken over at once by the other replicas. Start a second and
a third replica on the same database (``REPLICA=api-2 ... --port 8002``): the partitions spread
two per replica. Stop one: its partitions move to the others.

- ``GET /partitions``: the partitions this replica consumes, each with its fencing token (pass
  it with every write the consumer makes, see docs/recipes/fencing.md) and the batches read;
- ``GET /healthz``: 200 while the consumers run, 503 once they have stopped on an error (the
  orchestrator then restarts the replica).

``REPLICA`` names the replica (default: the host name, a pod's name on Kubernetes); each
replica needs its own. In production give every replica the same network store instead of a
SQLite file, ``KubernetesBackend()`` or ``EtcdBackend([...])``.
"""

from __future__ import annotations

import logging
import os
import socket
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from trio_lease import Grant, LeaseBackend, LeaseSettings, run_partitioned
from trio_lease.backends.sqlite import SqliteBackend

PARTITIONS = [f"orders-{i}" for i in range(6)]
SETTINGS = LeaseSettings(heartbeat_timeout="3s", heartbeat_interval="500ms")

logger = logging.getLogger("fastapi_partitioned")


class Consumers:
    """The application's lifespan: consumes this replica's share of the partitions while the
    application runs.

    A class rather than an ``@asynccontextmanager`` generator, so that no ``yield`` sits inside
    the task group. Entering opens the backend and starts ``run_partitioned`` in a task group;
    leaving cancels it (every consumer stops, every partition is released) and closes the
    backend. What ``__aenter__`` returns is the lifespan state: each request sees it as
    ``request.state``.
    """

    def __init__(self, backend: LeaseBackend, replica: str) -> None:
        self.replica = replica
        #: partition -> its fencing token and the batches read under it (what /partitions shows)
        self.running: dict[str, dict[str, int]] = {}
        #: why the consumers stopped, if they did (what /healthz reports)
        self.failure: str | None = None
        self._backend = backend
        self._stack = AsyncExitStack()
        self._tasks: TaskGroup | None = None

    async def __aenter__(self) -> dict[str, Any]:
        await self._stack.__aenter__()
        try:
            backend = await self._stack.enter_async_context(self._backend)
            self._tasks = await self._stack.enter_async_context(anyio.create_task_group())
        except BaseException as exc:
            await self._stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._tasks.start_soon(self._run, backend)
        return {"consumers": self}

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tasks is not None
        self._tasks.cancel_scope.cancel()  # shutdown: the consumers stop, partitions released
        return await self._stack.__aexit__(exc_type, exc, tb)

    async def _run(self, backend: LeaseBackend) -> None:
        try:
            await run_partitioned(
                PARTITIONS,
                self._consume,
                name="orders",
                owner=self.replica,
                backend=backend,
                settings=SETTINGS,
            )
        except Exception as exc:  # a consumer failed, or this replica lost its membership
            logger.exception("the consumers stopped")
            self.failure = f"{type(exc).__name__}: {exc}"

    async def _consume(self, partition: str, grant: Grant) -> None:
        """Consume one partition while this replica holds its lease (cancelled on loss)."""
        state = self.running[partition] = {"fencing_token": grant.fencing_token, "batches": 0}
        try:
            while True:
                # A real consumer reads the partition's next batch here and commits its offset
                # with grant.fencing_token, so that a stale consumer's commit is refused.
                await anyio.sleep(0.2)
                state["batches"] += 1
        finally:
            del self.running[partition]


def lifespan(app: FastAPI) -> Consumers:
    replica = os.environ.get("REPLICA") or socket.gethostname()
    return Consumers(SqliteBackend(os.environ.get("LEASES_DATABASE", "leases.sqlite3")), replica)


app = FastAPI(lifespan=lifespan)


@app.get("/partitions")
async def partitions(request: Request) -> dict[str, Any]:
    """The partitions this replica consumes, with their fencing tokens."""
    consumers: Consumers = request.state.consumers
    return {"replica": consumers.replica, "partitions": dict(sorted(consumers.running.items()))}


@app.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 while the consumers run; 503 with the reason once they have stopped."""
    consumers: Consumers = request.state.consumers
    if consumers.failure is not None:
        return JSONResponse({"status": "failed", "error": consumers.failure}, status_code=503)
    return JSONResponse({"status": "ok", "replica": consumers.replica})
