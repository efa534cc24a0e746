"""What a contended request slot costs on trio: ``python -m tools.benchmarks._slot_waits
[--tree DIR ...]``.

200 tasks each take a slot of one :class:`trio_lease._slots.Slots` of 4, 200 times, holding it
across one checkpoint, so nearly every acquisition waits and is handed its slot by a release:
the path every renewal takes when a process holds hundreds of leases. Prints the process CPU
per acquisition and release, best of five runs, for this checkout and each ``--tree`` (another
checkout: the code before a change), each in a fresh interpreter, alternated three times.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

TASKS = 200
ROUNDS = 200


def measure() -> float:
    """µs of CPU per acquisition and release on trio (best of five)."""
    import trio

    from trio_lease._slots import Slots, urgent

    async def run() -> float:
        slots = Slots(4)

        async def one() -> None:
            for _ in range(ROUNDS):
                with urgent(time.monotonic()):  # renewals wait as urgent, by deadline
                    await slots.acquire()
                try:
                    await trio.lowlevel.checkpoint()
                finally:
                    slots.release()

        started = time.process_time()
        async with trio.open_nursery() as nursery:
            for _ in range(TASKS):
                nursery.start_soon(one)
        return (time.process_time() - started) / (TASKS * ROUNDS) * 1e6

    return min(trio.run(run) for _ in range(5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", type=Path, default=[])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(measure())
        return
    root = Path(__file__).resolve().parents[2]
    trees = [root, *(tree.resolve() for tree in args.tree)]
    results: dict[Path, list[float]] = {tree: [] for tree in trees}
    for _ in range(3):
        for tree in trees:
            # This file runs in each: the tree given first on the path imports its trio_lease.
            out = subprocess.run(
                [sys.executable, __file__, "--worker"],
                env={**os.environ, "PYTHONPATH": str(tree)},
                check=True, capture_output=True, text=True,
            )
            results[tree].append(float(out.stdout))
    for tree, values in results.items():
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"{tree}: {min(values):.2f} µs per acquisition and release ({runs})")


if __name__ == "__main__":
    main()
