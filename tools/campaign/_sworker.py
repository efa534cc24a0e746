"""One worker process of the semaphore mode: loops ``Semaphore(limit=k).held()``.

    python -m tools.campaign._sworker CONFIG_JSON

Each round logs ``want`` and enters ``async with Semaphore("campaign", "w<slot>", ...,
limit=k).held() as grant:``; inside, it logs ``start`` (the slot as ``sem_slot``, the slot's
fencing token and the identity), writes the token to the fencing store under ``slot<i>`` (on
the worker's own connection) every ``gap`` seconds for a hold drawn from ``hold``, and logs
``end`` in the body's ``finally`` (after the guarded work has fully exited, before the slot's
release). ``lost`` and ``error`` end a round; the worker rests up to ``rest`` seconds and asks
again. Events are JSON lines on stdout stamped with ``time.monotonic()`` (system-wide on Linux),
as the other modes' workers log them, and a sampler logs ``stall`` when the worker's own event
loop runs late (:func:`~tools.campaign._worker.watch_stalls`).

The worker leaves (releasing its slot) when stdin closes, on SIGTERM, or when the harness is
gone.
"""

from __future__ import annotations

import functools
import json
import os
import random
import sys
from typing import Any

import anyio

from trio_lease import BackendUnavailable, LeaseLost, LeaseSettings, Semaphore

from ._fencing import FencingClient
from ._pworker import until_told_to_stop
from ._worker import emit, make_backend

__all__ = ["SEMAPHORE", "main"]

#: The name of the semaphore every worker holds (its slots are ``campaign~slot~<i>``).
SEMAPHORE = "campaign"


async def contend(semaphore: Semaphore, fencing: FencingClient, config: dict[str, Any]) -> None:
    """Hold a slot over and over, doing fenced guarded work inside."""
    rng = random.Random(config["seed"])
    gap = float(config["gap"])
    low, high = config["hold"]
    while True:
        token, slot = 0, -1
        emit("want")
        try:
            async with semaphore.held() as grant:
                token, slot = grant.fencing_token, grant.slot
                emit("start", sem_slot=slot, token=token, identity=grant.identity, hold=0.0)
                try:
                    until = anyio.current_time() + rng.uniform(low, high)
                    while True:
                        if not await fencing.write(f"slot{slot}", token):
                            emit("stale", sem_slot=slot, token=token)
                        if anyio.current_time() >= until:
                            break
                        await anyio.sleep(gap)
                finally:
                    emit("end", sem_slot=slot, token=token)
            emit("released", sem_slot=slot, token=token)
        except LeaseLost as exc:
            emit("lost", sem_slot=slot, token=token, cause=str(exc.__cause__ or exc)[:200])
        except (BackendUnavailable, OSError, anyio.BrokenResourceError) as exc:
            emit("error", sem_slot=slot, token=token, error=f"{type(exc).__name__}: {exc}"[:200])
            await anyio.sleep(0.05)
        await anyio.sleep(rng.uniform(0.0, float(config["rest"])))


async def main(config: dict[str, Any]) -> None:
    """Contend until stdin closes or SIGTERM."""
    settings = LeaseSettings(**config["settings"])
    fencing = FencingClient(int(config["fencing_port"]), f"w{config['slot']}")
    async with make_backend(config) as backend:
        semaphore = Semaphore(
            SEMAPHORE, f"w{config['slot']}", backend, settings, limit=int(config["limit"])
        )
        emit("ready", identity=semaphore.identity, slot=config["slot"], pid=os.getpid(),
             loop=config.get("loop", "asyncio"))
        await until_told_to_stop(functools.partial(contend, semaphore, fencing, config))
        await fencing.aclose()
    emit("exit")


if __name__ == "__main__":
    worker_config = json.loads(sys.argv[1])
    anyio.run(main, worker_config, backend=worker_config.get("loop", "asyncio"))
    # Left on SIGTERM: the thread reading stdin is still blocked in readline(), and the
    # interpreter would wait for it until the harness closes the pipe. Everything is flushed.
    sys.stdout.flush()
    os._exit(0)
