"""Helpers shared by the benchmark workers and the runner: events on stdout, percentiles, and
the machine a run was made on."""

from __future__ import annotations

import contextlib
import cProfile
import gc
import json
import math
import os
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

__all__ = ["emit", "now", "profiled", "summary", "wait_for_line"]


#: Idle connections the bare clients of :mod:`._floor` and :mod:`._floor_trio` send on.
FLOOR_CONNECTIONS = 4


def now() -> float:
    """CLOCK_MONOTONIC in seconds: one clock shared by every process on the machine."""
    return time.monotonic()


def emit(event: str, **fields: Any) -> None:
    """Print one JSON event line for the runner."""
    print(json.dumps({"event": event, **fields}), flush=True)


async def wait_for_line() -> str:
    """Block (in a worker thread) until the runner writes a line to our stdin."""
    line: str = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    return line.strip()


@contextlib.contextmanager
def profiled() -> Iterator[None]:
    """cProfile of the block when ``TRIO_LEASE_BENCH_PROFILE`` names a file: the stats go to
    ``<file>.<pid>`` (read them with :mod:`pstats`). A steady row's window is profiled so, to
    see where a renewal's CPU goes (tools/benchmarks/README.md). Profiling slows every call;
    read the shares, not the microseconds."""
    target = os.environ.get("TRIO_LEASE_BENCH_PROFILE")
    if not target:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        profile.dump_stats(f"{target}.{os.getpid()}")


class GcMeter:
    """The CPU the garbage collector takes in a block (``gc.callbacks``, process time), by
    generation, and how many collections of each ran: part of every client's CPU per renewal,
    and what a renewal's allocations cost besides their own (tools/benchmarks/README.md)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        #: The longest collection of each generation, wall time (the loop's pause).
        self.longest = [0.0, 0.0, 0.0]
        self._started = 0.0
        self._wall = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
            self._wall = time.perf_counter()
        else:
            generation = info["generation"]
            self.seconds[generation] += time.process_time() - self._started
            self.collections[generation] += 1
            took = round(time.perf_counter() - self._wall, 6)
            self.longest[generation] = max(self.longest[generation], took)

    def __enter__(self) -> GcMeter:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def fields(self) -> dict[str, Any]:
        """The raw fields a worker reports: ``gc_s`` and ``gc_collections``, by generation."""
        return {"gc_s": [round(s, 4) for s in self.seconds], "gc_collections": self.collections}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    """n, p50, p90, p99, max and mean of ``values``."""
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values) if values else math.nan,
        "mean": sum(values) / len(values) if values else math.nan,
    }


def machine(mode: str) -> dict[str, Any]:
    """Where and when: CPU, Python, versions, load."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for dist in ("trio_lease", "anyio", "trio", "httpx", "httpcore", "h11",
                 "kubernetes_asyncio", "aiohttp", "uvloop"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "missing"
    return {
        "mode": mode,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "versions": versions,
        "loadavg_start": list(os.getloadavg()),
    }
