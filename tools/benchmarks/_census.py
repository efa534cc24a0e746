"""The objects the garbage collector tracks for each held lease, by type.

``python -m tools.benchmarks._census [--leases 200] [--loop asyncio|trio]`` holds ``leases``
leases on the memory backend (``held()``, each body asleep), collects, and prints what the
collector tracks per held lease beyond what it tracked before: the caller's body task among
them, as the steady row's holders have one. A full collection walks every one of them, so
this count times the leases held is what each full collection costs (tools/benchmarks/README.md,
"Where the collector's share goes"). Counts, not times: the same on every machine for one
Python, anyio and trio version.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json

import anyio
import anyio.lowlevel

from trio_lease import Lease, LeaseSettings
from trio_lease.backends.memory import MemoryBackend

SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=1)


def _tracked() -> collections.Counter[str]:
    gc.collect()
    return collections.Counter(
        f"{type(obj).__module__}.{type(obj).__qualname__}" for obj in gc.get_objects()
    )


async def census(leases: int) -> dict[str, float]:
    """Objects tracked per held lease, by type (the types with at least one per ten leases)."""
    backend = MemoryBackend()
    all_held = anyio.Event()
    held = 0

    async def hold(i: int) -> None:
        nonlocal held
        async with Lease(f"census-{i}", "me", backend, SETTINGS).held():
            held += 1
            if held == leases:
                all_held.set()
            await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        await anyio.lowlevel.checkpoint()
        before = _tracked()
        for i in range(leases):
            tg.start_soon(hold, i)
        await all_held.wait()
        await anyio.sleep(0.1)
        added = _tracked() - before
        tg.cancel_scope.cancel()
    per_lease = {name: count / leases for name, count in added.most_common()}
    return {name: value for name, value in per_lease.items() if value >= 0.1}


def main() -> None:
    parser = argparse.ArgumentParser(description="Objects the collector tracks per held lease.")
    parser.add_argument("--leases", type=int, default=200)
    parser.add_argument("--loop", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.leases < 1:
        parser.error("--leases must be at least 1")
    per_type = anyio.run(census, args.leases, backend=args.loop)
    total = sum(per_type.values())
    if args.json:
        print(json.dumps({"loop": args.loop, "leases": args.leases, "total": total,
                          "per_type": per_type}))
        return
    print(f"{args.loop}, {args.leases} leases held: {total:.0f} tracked objects per lease")
    for name, value in per_type.items():
        print(f"{value:7.2f}  {name}")


if __name__ == "__main__":
    main()
