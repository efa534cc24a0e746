"""One member process of the partitioned mode: runs ``run_partitioned`` over the run's keys.

    python -m tools.campaign._pworker CONFIG_JSON

The member runs ``run_partitioned(keys, work, name="campaign", owner="w<slot>", ...)``; for each
key it is given, ``work`` logs ``start`` (with the key, the grant's fencing token and identity),
writes the token to the fencing store under the key (on a connection of its own), again
every ``gap`` seconds, and logs
``end`` in its ``finally`` (after the key's work has fully exited, before the key's release).
Events are JSON lines on stdout stamped with ``time.monotonic()`` (system-wide on Linux), as
the lease mode's workers log them; ``member`` names the identity the process joins the group
as (the same for every join of one process). When the member's own group lease is lost (a
long pause, a partition), ``run_partitioned`` raises; the member logs ``lost`` and joins
again. A sampler task logs ``stall`` (``t0``, ``t1``) when the member's own event loop runs
late (:func:`~tools.campaign._worker.watch_stalls`).

The member leaves (cancelling its keys, which releases them) when stdin closes, on SIGTERM, or
when the harness is gone.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from trio_lease import (
    BackendUnavailable,
    Grant,
    Group,
    LeaseLost,
    LeaseSettings,
    run_partitioned,
)

from ._fencing import FencingClient
from ._proc import exit_with_parent
from ._worker import _signals, emit, make_backend, watch_stalls

__all__ = ["PARTITIONED", "main", "stdin_closed", "until_told_to_stop"]

#: The ``name`` every member passes to run_partitioned (keys are ``campaign.<key>``).
PARTITIONED = "campaign"


async def stdin_closed(done: anyio.CancelScope) -> None:
    """Leave when stdin closes (the harness's way of stopping a member)."""
    while await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True):
        pass
    done.cancel()


async def members(config: dict[str, Any]) -> None:
    """Be a member over and over: join again after the member's own lease is lost."""
    settings = LeaseSettings(**config["settings"])
    gap = float(config["gap"])
    port = int(config["fencing_port"])
    keys = [f"k{i:03d}" for i in range(int(config["keys"]))]

    async def work(key: str, grant: Grant) -> None:
        token = grant.fencing_token
        emit("start", key=key, token=token, identity=grant.identity, hold=0.0)
        fencing = FencingClient(port, f"w{config['slot']}")  # one connection per key's run
        try:
            while True:
                try:
                    if not await fencing.write(key, token):
                        emit("stale", key=key, token=token)
                except (OSError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
                    emit("error", key=key, error=f"fencing: {type(exc).__name__}: {exc}"[:200])
                await anyio.sleep(gap)
        finally:
            emit("end", key=key, token=token)
            await fencing.aclose()

    async with make_backend(config) as backend:
        owner = f"w{config['slot']}"
        # The identity this process joins the group as (the checker computes the assignment).
        emit("member", identity=Group(PARTITIONED, owner, backend).identity)
        while True:
            try:
                await run_partitioned(
                    keys, work, name=PARTITIONED, owner=owner, backend=backend,
                    settings=settings,
                )
            except LeaseLost as exc:
                emit("lost", cause=str(exc.__cause__ or exc)[:200])
            except (BackendUnavailable, OSError, anyio.BrokenResourceError) as exc:
                emit("error", error=f"{type(exc).__name__}: {exc}"[:200])
            await anyio.sleep(0.05)


async def main(config: dict[str, Any]) -> None:
    """Be a member until stdin closes or SIGTERM."""
    emit("ready", identity=f"w{config['slot']}", slot=config["slot"], pid=os.getpid(),
         loop=config.get("loop", "asyncio"))
    await until_told_to_stop(functools.partial(members, config))
    emit("exit")


async def until_told_to_stop(work: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``work`` beside the stall sampler until stdin closes, SIGTERM comes or the harness
    is gone (the many-holder modes' workers)."""
    with anyio.CancelScope() as done:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_stalls)
            tg.start_soon(stdin_closed, done)
            tg.start_soon(_signals, done)
            tg.start_soon(exit_with_parent, done)
            tg.start_soon(work)


if __name__ == "__main__":
    worker_config = json.loads(sys.argv[1])
    anyio.run(main, worker_config, backend=worker_config.get("loop", "asyncio"))
