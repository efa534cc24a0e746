"""Figures for the multi-holder features: idle cost of partitioned work, semaphore hand-off.

    python -m tools.benchmarks._partitioned [--smoke]

- *idle*: 100 keys on 5 members of ``run_partitioned`` (memory store, virtual time, L = 15 s,
  R = 1.5 s), requests counted per hour over 10 virtual minutes after a minute to settle;
- *hand-off*: a limit-1 ``Semaphore`` passed back and forth between two contenders in processes
  of their own (own store keys) on one SQLite file, on real time (L = 1.2 s, R = 0.3 s): the
  time from the holder leaving its scope (released) to the waiter's body starting, p50 and p99.

``--smoke`` runs tiny sizes (what tests/benchmarks/test_partitioned_smoke.py runs).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from trio_lease import Grant, LeaseSettings, Semaphore, run_partitioned
from trio_lease.backends.memory import MemoryBackend, MemoryStore
from trio_lease.backends.sqlite import SqliteBackend
from trio_lease.testing import FaultyBackend, virtual_time_backends

VIRTUAL = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)
REAL = LeaseSettings(
    heartbeat_timeout=1.2, heartbeat_interval=0.3, lease_operation_timeout=0.2, stop_timeout=0.1
)


class _OwnProcess(FaultyBackend):
    """A client standing for a process of its own (its own store key), counting requests."""

    @property
    def store_key(self) -> Hashable:
        return ("own process", id(self))


async def idle(keys: int, members: int, minutes: float) -> dict[str, float]:
    """Requests per hour of ``members`` idle members sharing ``keys`` keys."""
    store = MemoryStore()
    backends = [_OwnProcess(MemoryBackend(store)) for _ in range(members)]
    names = [f"k{i:03}" for i in range(keys)]

    async def fn(key: str, grant: Grant) -> None:
        await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        for index, backend in enumerate(backends):
            tg.start_soon(
                functools.partial(
                    run_partitioned,
                    names,
                    fn,
                    name="jobs",
                    owner=f"m{index}",
                    backend=backend,
                    settings=VIRTUAL,
                )
            )
        await anyio.sleep(60)
        before = sum((backend.calls for backend in backends), Counter())
        await anyio.sleep(minutes * 60)
        after = sum((backend.calls for backend in backends), Counter())
        tg.cancel_scope.cancel()
    return {op: count * 60 / minutes for op, count in (after - before).items()}


async def hand_off(rounds: int) -> list[float]:
    """Seconds from a release to the waiter's body, over ``rounds`` hand-offs."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "leases.sqlite3"
        backends = [_OwnProcess(SqliteBackend(path, watch_interval=0.01)) for _ in range(2)]
        semaphores = [
            Semaphore("pool", f"c{i}", backend, REAL, limit=1)
            for i, backend in enumerate(backends)
        ]
        released: list[float] = []
        latencies: list[float] = []

        async def contend(semaphore: Semaphore) -> None:
            while len(latencies) < rounds:
                async with semaphore.held():
                    if released:
                        latencies.append(time.monotonic() - released[-1])
                    await anyio.sleep(0.02)
                released.append(time.monotonic())
                await anyio.lowlevel.checkpoint()  # let the other waiter in line take it

        async with anyio.create_task_group() as tg:
            for semaphore in semaphores:
                tg.start_soon(contend, semaphore)
        for backend in backends:
            await backend.aclose()
    return latencies[:rounds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    args = parser.parse_args()
    keys, members, minutes, rounds = (10, 2, 1.0, 10) if args.smoke else (100, 5, 10.0, 200)
    spec: Any = dict(virtual_time_backends())["trio"]
    rates = anyio.run(idle, keys, members, minutes, backend="trio", backend_options=spec)
    print(f"idle, {keys} keys on {members} members, requests per hour:")
    for op in sorted(rates):
        print(f"  {op}: {rates[op]:,.0f}")
    latencies = sorted(anyio.run(hand_off, rounds))
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
    print(f"semaphore hand-off on SQLite, {len(latencies)} hand-offs: p50 {p50 * 1000:.1f} ms, "
          f"p99 {p99 * 1000:.1f} ms")


if __name__ == "__main__":
    main()
