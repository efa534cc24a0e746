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
import types
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

__all__ = ["emit", "now", "profiled", "promoted", "summary", "wait_for_line"]


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


class Promoted:
    """What the garbage collector moves to its oldest generation in a block, by kind.

    At each collection of the middle generation every object it holds (the young ones too)
    moves to the oldest, and the next full collection, which walks every tracked object, comes
    once a quarter of the oldest generation's size has been moved there: so its cost per second
    is set by how many objects are moved, whatever the heap's size. An object a renewal makes
    that outlives a second or so (the reply kept for the next write, a sleep's future) is one
    more of them. Counted at each collection of the middle generation (its objects before,
    those found in the oldest after), so the block runs slower: read the counts, not the time.
    """

    def __init__(self) -> None:
        #: Objects moved to the oldest generation, by kind (:func:`kind_of`).
        self.counts: dict[str, int] = {}
        #: Collections of the middle generation counted.
        self.collections = 0
        self._before: list[tuple[int, str]] | None = None

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 1:
            return
        gc.callbacks.remove(self._callback)  # what this does allocates: not counted
        try:
            if phase == "start":
                self._before = [(id(obj), kind_of(obj)) for obj in gc.get_objects(1)]
                self._before += [(id(obj), kind_of(obj)) for obj in gc.get_objects(0)]
            elif self._before is not None:
                oldest = {id(obj) for obj in gc.get_objects(2)}
                for ident, kind in self._before:
                    if ident in oldest:
                        self.counts[kind] = self.counts.get(kind, 0) + 1
                self._before = None
                self.collections += 1
        finally:
            gc.callbacks.append(self._callback)

    def __enter__(self) -> Promoted:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def most(self, count: int = 40) -> list[tuple[str, int]]:
        return sorted(self.counts.items(), key=lambda item: -item[1])[:count]


def kind_of(obj: object) -> str:
    """The object's type, with what tells its maker: a coroutine's function, a method's, a
    bound builtin's name and owner, a tuple's item types, a dict's first keys."""
    cls = type(obj)
    name = f"{cls.__module__}.{cls.__qualname__}"
    detail = ""
    if isinstance(obj, types.CoroutineType):
        detail = obj.cr_code.co_qualname
    elif isinstance(obj, types.MethodType):
        detail = obj.__func__.__qualname__
    elif isinstance(obj, types.BuiltinMethodType) and obj.__self__ is not None:
        detail = f"{obj.__name__} of {type(obj.__self__).__name__}"
    elif cls is tuple:
        detail = ", ".join(type(item).__name__ for item in obj[:4])  # type: ignore[index]
    elif cls is dict:
        detail = ", ".join(str(key) for key in list(obj)[:3])  # type: ignore[call-overload]
    return f"{name} ({detail})" if detail else name


@contextlib.contextmanager
def promoted() -> Iterator[None]:
    """:class:`Promoted` over the block when ``TRIO_LEASE_BENCH_PROMOTED`` names a file: the
    counts go to ``<file>.<pid>`` as JSON (what a steady row's window moves to the oldest
    generation; tools/benchmarks/README.md, "Promoted per renewal")."""
    target = os.environ.get("TRIO_LEASE_BENCH_PROMOTED")
    if not target:
        yield
        return
    with Promoted() as counted:
        yield
    Path(f"{target}.{os.getpid()}").write_text(json.dumps(
        {"middle_collections": counted.collections, "promoted": counted.most(60)}, indent=1
    ))


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
