"""One member of ``run_partitioned`` in a process of its own, for tools/benchmarks/_rebalance.py.

    python -m tools.benchmarks._partition_member JSON_PARAMS

Parameters (one JSON object): ``owner``, ``keys`` (how many: ``k000``, ``k001``, ...), ``L``
and ``R`` (seconds), and ``backend``: ``sqlite`` with ``path``, or ``etcd`` with ``endpoints``
and ``prefix``. Each line on stdout is a JSON event stamped with the system-wide monotonic
clock (CLOCK_MONOTONIC, shared with the runner): ``ready`` (backend open, about to join),
``start`` (a key's work began, with its fencing token), ``end`` (it stopped), ``leaving``
(SIGTERM received: the member leaves cleanly) and ``exit``. SIGKILL is the crash.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any

import anyio
from anyio.abc import TaskStatus

from trio_lease import Grant, LeaseBackend, LeaseSettings, run_partitioned
from trio_lease.backends.sqlite import SqliteBackend


def say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


def make_backend(p: dict[str, Any]) -> LeaseBackend:
    if p["backend"] == "etcd":
        from trio_lease.backends.etcd import EtcdBackend

        return EtcdBackend(p["endpoints"], prefix=p["prefix"])
    return SqliteBackend(p["path"])


async def main(p: dict[str, Any]) -> None:
    owner: str = p["owner"]
    keys = [f"k{i:03}" for i in range(p["keys"])]
    settings = LeaseSettings(heartbeat_timeout=p["L"], heartbeat_interval=p["R"])

    async def work(key: str, grant: Grant) -> None:
        say("start", member=owner, key=key, token=grant.fencing_token)
        try:
            await anyio.sleep_forever()
        finally:
            say("end", member=owner, key=key)

    async with make_backend(p) as backend, anyio.create_task_group() as tg:

        async def leave_on_sigterm(*, task_status: TaskStatus[None]) -> None:
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                task_status.started()
                async for _ in signals:
                    say("leaving", member=owner)
                    tg.cancel_scope.cancel()

        await tg.start(leave_on_sigterm)
        say("ready", member=owner)
        await run_partitioned(
            keys, work, name="bench", owner=owner, backend=backend, settings=settings
        )
    say("exit", member=owner)


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]))
