"""Instructions per renewal write, counted by valgrind: the client's own work, unmoved by load.

``python -m tools.benchmarks._instructions [--tree DIR ...] [--loop asyncio] [--concurrency 20]
[--counts 20 120] [--bare] [--layers] [--allocations] [--json]`` starts the emulator
(:mod:`._emulator`, its own process), then, for this checkout and each ``--tree`` (another checkout
of the repository: the code before a change, say; only its ``trio_lease`` is used, so it needs no
copy of this tool), runs a worker twice under ``valgrind --tool=callgrind``: ``concurrency`` tasks
each sending the first count of renewal writes one after another, then the second count. The
difference of the two runs' instruction counts, divided by the writes it adds, is what one write
costs in user-space instructions (the interpreter's start and the set-up cancel out). ``--bare``
also counts the same writes sent bare, as :mod:`._floor`'s renewal rhythms send them: what any
client pays for them in this process (asyncio). ``--layers`` also counts this checkout's write
through each layer below ``KubernetesBackend.update`` (:data:`LAYERS`): where the write's
instructions go, layer by layer. ``--allocations`` also counts, from the same two runs of this
checkout with callgrind's call graph kept (``callgrind_annotate --tree=caller``), what one write
makes for the garbage collector to track, by the interpreter's function that made it
(:data:`ALLOCATORS`): the coroutines, bound methods, iterators and instances whose number sets how
often the collector runs.

Each write is what a holder sends: ``KubernetesBackend.update`` of the last record with a new
``renewTime``, under the bound a holder sets (the seam's write bound, ``_loops.write_bound``),
at the version the last answer gave. The count does not depend on the machine's speed or load:
two runs of one tree agree to a fraction of a percent (tools/benchmarks/README.md, "Counted in
instructions"), where the client CPU of the steady row moves by ±10 % between rounds. What it
leaves out is the kernel (the socket's send and receive) and any cost that grows with the heap
(the garbage collector's full collections): the steady row still decides.

Valgrind runs a program about fifty times slower; the emulator runs outside it at full speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from ._procs import ROOT, Emulator

#: callgrind's summary line: ``==123== Collected : 2847056434``.
_COLLECTED = re.compile(r"Collected\s*:\s*([0-9][0-9,]*)")


def collected(stderr: str) -> int:
    """The instructions valgrind's callgrind reports in its summary (``Collected``)."""
    found = _COLLECTED.search(stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {stderr[-500:]!r}")
    return int(found.group(1).replace(",", ""))


def per_write(low: int, high: int, counts: tuple[int, int], concurrency: int) -> float:
    """Instructions per write: the runs' difference over the writes the second one adds."""
    return (high - low) / (concurrency * (counts[1] - counts[0]))


#: What ``--allocations`` counts: the interpreter's functions that make an object the garbage
#: collector tracks (and one that closes a generator left unfinished), each by its callers.
ALLOCATORS = {
    "_PyObject_GC_New": "objects of a fixed size (bound methods, iterators, functions, cells)",
    "_PyObject_GC_NewVar": "objects of a variable size (coroutines, generators, matches)",
    "PyType_GenericAlloc": "instances of classes",
    "gen_close": "generators closed before their end (an exception with a traceback each)",
}
#: A line of ``callgrind_annotate --tree=caller``: cost, share, ``<`` (a caller), ``*`` (the
#: function the block is about) or ``>``, the function, and for a caller its calls (``(12x)``).
_TREE_LINE = re.compile(
    r"\s*[0-9,]+ \(\s*[0-9.]+%\)\s+([<*>])\s+(\S+?)(?: \(([0-9,]+)x\))?(?: \[|$)"
)


def callers_of(annotated: str, functions: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """For each of ``functions``, its callers and how often each called it, read from
    ``callgrind_annotate --tree=caller`` output (names without their source file)."""
    found: dict[str, dict[str, int]] = {function: {} for function in functions}
    callers: list[tuple[str, int]] = []
    for line in annotated.splitlines():
        match = _TREE_LINE.match(line)
        if match is None:
            if not line.strip():
                callers = []
            continue
        kind, name, calls = match.groups()
        name = name.rsplit(":", 1)[-1]
        if kind == "<":
            callers.append((name, int((calls or "0").replace(",", ""))))
        elif kind == "*":
            if name in found:
                for caller, count in callers:
                    found[name][caller] = found[name].get(caller, 0) + count
            callers = []
    return found


def per_write_calls(
    low: dict[str, dict[str, int]], high: dict[str, dict[str, int]], writes: int
) -> dict[str, dict[str, float]]:
    """Calls per write, by function and caller: the second run's counts less the first's, over
    the writes it adds (callers with fewer than 0.05 per write left out)."""
    result: dict[str, dict[str, float]] = {}
    for function, callers in high.items():
        before = low.get(function, {})
        rates = {
            caller: (count - before.get(caller, 0)) / writes for caller, count in callers.items()
        }
        result[function] = {
            caller: round(rate, 2)
            for caller, rate in sorted(rates.items(), key=lambda item: -item[1])
            if rate >= 0.05
        }
    return result


#: The layers ``--layers`` counts, from the top: what each write goes through.
LAYERS = ("update", "read", "request", "send", "unary")

#: The answer's version, from its bytes (the layers below ``update`` do not read the answer).
_VERSION = re.compile(rb'"resourceVersion":"([0-9]+)"')


async def _worker(kubeconfig: str, concurrency: int, count: int, layer: str = "update") -> None:
    """``concurrency`` tasks each sending ``count`` renewal writes through ``layer``:

    - ``update``: ``KubernetesBackend.update`` (a holder's write, everything included);
    - ``read``: ``KubeApi.request`` of the body, then the answer read as ``update`` reads it
      (``load_json``, ``read_object``, ``ObjectCache.record``), without building the body;
    - ``request``: ``KubeApi.request`` of the body alone (the attempt's bound, slot, retries);
    - ``send``: ``ClientLease.send`` (the headers and the body's encoding, no slot);
    - ``unary``: the seam's ``Unary.request`` of the encoded body (the lean HTTP client).

    Below ``update`` each task writes one body it built once, with a new ``renewTime`` and the
    version found in the last answer's bytes.
    """
    # Imported here, after main() put the tree first on the path.
    from trio_lease import LeaseRecord
    from trio_lease._loops import current
    from trio_lease.backends.kubernetes import KubernetesBackend, resolve_config

    backend = KubernetesBackend(resolve_config({"kubeconfig": kubeconfig}))
    written = 0

    async def renew(index: int) -> None:
        nonlocal written
        record = await backend.create(LeaseRecord(
            name=f"instructions-{os.getpid()}-{index}", holder="me", lease_duration=15.0,
            fencing_token=1, acquired_at=datetime.now(UTC),
        ))
        write = None if layer == "update" else _layer_write(backend, record, layer)
        with anyio.CancelScope() as scope:
            bound = current().write_bound(scope)
            for _ in range(count):
                bound.set(anyio.current_time() + 3.0)
                if write is None:
                    renewal = dataclasses.replace(record, renewed_at=datetime.now(UTC))
                    record = await backend.update(renewal, record.version)
                else:
                    await write()
                bound.clear()
                written += 1

    async with anyio.create_task_group() as tg:
        for index in range(concurrency):
            tg.start_soon(renew, index)
    await backend.aclose()
    import trio_lease

    print(json.dumps({"writes": written, "trio_lease": trio_lease.__file__}))


def _layer_write(backend: Any, record: Any, layer: str) -> Callable[[], Awaitable[None]]:
    """One renewal write through ``layer`` (below ``update``) of ``record``'s object."""
    from trio_lease._wire import load_json
    from trio_lease.backends.kubernetes._api import _timeouts
    from trio_lease.backends.kubernetes._backend import _put_body
    from trio_lease.backends.kubernetes._client import _HEADERS, _encode_json
    from trio_lease.backends.kubernetes._times import format_micro_time

    api, name = backend._api, record.name
    base = api.objects.get(name)
    body = _put_body(backend.kind.apply(base, record), base, name, record.version)
    path, ctx, lease = api.item_path(name), api.ctx("update", name), api._lease()

    async def write() -> None:
        body["spec"]["renewTime"] = format_micro_time(datetime.now(UTC))
        if layer in ("read", "request"):
            reply = await api.request("PUT", path, ctx, body=body)
        elif layer == "send":
            reply = await lease.send("PUT", path, _timeouts(3.0), body)
        else:
            headers = [*_HEADERS, *await lease._entry.auth.headers(),
                       ("Content-Type", "application/json")]
            reply = await lease._entry.unary.request(
                "PUT", f"{path}?timeout=3s", headers=headers, body=_encode_json(body)
            )
        found = _VERSION.search(reply.content)
        if reply.status_code != 200 or found is None:
            raise SystemExit(f"a write was refused: {reply.content[:200]!r}")
        body["metadata"]["resourceVersion"] = found.group(1).decode()
        if layer == "read":
            obj = api.read_object(load_json(reply.content, "the answer"), name, ctx)
            api.objects.record(name, obj)

    return write


async def _bare(kubeconfig: str, concurrency: int, count: int) -> None:
    """The same writes as :func:`_worker` sent bare, as :mod:`._floor`'s renewal rhythms send
    them (asyncio only): the body by ``to_json``, the version taken from the answer's bytes
    by a regular expression, a bare protocol on one of four connections, nothing checked."""
    from trio_lease import LeaseRecord
    from trio_lease.backends.kubernetes import KubernetesBackend, resolve_config

    from ._floor import _connections, bare_renewal

    backend = KubernetesBackend(resolve_config({"kubeconfig": kubeconfig}))
    api = backend._api
    unary = api._lease()._entry.unary
    idle = await _connections(unary)
    headers = [("Host", unary.url.netloc), *unary._headers, ("Accept", "application/json"),
               ("Content-Type", "application/json")]
    written = 0

    async def renew(index: int) -> None:
        nonlocal written
        name = f"instructions-bare-{os.getpid()}-{index}"
        await backend.create(LeaseRecord(
            name=name, holder="me", lease_duration=15.0, fencing_token=1,
            acquired_at=datetime.now(UTC),
        ))
        reply = await unary.request(
            "GET", api.item_path(name), headers=[("Accept", "application/json")]
        )
        obj = json.loads(reply.content)
        target = unary.url.prefix + api.item_path(name) + "?timeout=5s"
        for _ in range(count):
            await bare_renewal(idle, obj, target, headers)
            written += 1

    async with anyio.create_task_group() as tg:
        for index in range(concurrency):
            tg.start_soon(renew, index)
    import trio_lease

    print(json.dumps({"writes": written, "trio_lease": trio_lease.__file__}))


def _count(tree: Path, kubeconfig: Path, loop: str, concurrency: int, count: int,
           layer: str = "update", out: Path | None = None) -> int:
    """Instructions of one worker run under callgrind, in ``tree`` (its call graph kept in
    ``out`` if given)."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out or '/dev/null'}",
         sys.executable, "-m", "tools.benchmarks._instructions", "worker", str(tree),
         str(kubeconfig), loop, str(concurrency), str(count), layer],
        cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the worker in {tree} failed: {done.stderr[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if report["writes"] != concurrency * count:
        raise RuntimeError(f"the worker in {tree} did not write {concurrency * count} times")
    if not Path(report["trio_lease"]).is_relative_to(tree.resolve()):
        raise RuntimeError(f"the worker imported {report['trio_lease']}, not {tree}'s")
    return collected(done.stderr)


def _allocations(graph: Path) -> dict[str, dict[str, int]]:
    """The callers of :data:`ALLOCATORS` in one run's call graph."""
    done = subprocess.run(
        ["callgrind_annotate", "--tree=caller", "--threshold=100", str(graph)],
        capture_output=True, text=True, timeout=600, check=True,
    )
    return callers_of(done.stdout, tuple(ALLOCATORS))


def _print_allocations(allocations: dict[str, dict[str, float]]) -> None:
    print("made per renewal write for the garbage collector, by who made it:")
    for function, callers in allocations.items():
        print(f"  {function} ({ALLOCATORS[function]}): {sum(callers.values()):.1f}")
        for caller, rate in callers.items():
            print(f"    {rate:6.2f}  {caller}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        tree, kubeconfig, loop, concurrency, count = sys.argv[2:7]
        layer = sys.argv[7] if len(sys.argv) > 7 else "update"
        sys.path.insert(0, tree)
        if loop == "bare":
            anyio.run(_bare, kubeconfig, int(concurrency), int(count), backend="asyncio")
        else:
            anyio.run(_worker, kubeconfig, int(concurrency), int(count), layer, backend=loop)
        return
    parser = argparse.ArgumentParser(description="Instructions per renewal write (valgrind).")
    parser.add_argument("--tree", action="append", default=[], type=Path)
    parser.add_argument("--loop", default="asyncio", choices=("asyncio", "trio"))
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--counts", type=int, nargs=2, default=(20, 120))
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument(
        "--bare", action="store_true",
        help="also count the same writes sent bare, as _floor sends them (asyncio)",
    )
    parser.add_argument(
        "--layers", action="store_true",
        help="also count this checkout's write through each layer below update (see _worker)",
    )
    parser.add_argument(
        "--allocations", action="store_true",
        help="also count what this checkout's write makes for the garbage collector to track",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    if args.allocations and shutil.which("callgrind_annotate") is None:
        raise SystemExit("callgrind_annotate is not installed (it comes with valgrind)")
    counts = (args.counts[0], args.counts[1])
    if not 0 < counts[0] < counts[1]:
        raise SystemExit("--counts takes two counts, the first smaller: 20 120")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        emulator = Emulator(Path(tmp) / "kubeconfig")
        try:
            for tree in (ROOT, *(tree.resolve() for tree in args.tree)):
                graphs = [Path(tmp) / f"calls.{count}" if args.allocations and tree == ROOT
                          else None for count in counts]
                low, high = (
                    _count(tree, emulator.kubeconfig, args.loop, args.concurrency, count,
                           out=graph)
                    for count, graph in zip(counts, graphs, strict=True)
                )
                results[str(tree)] = round(per_write(low, high, counts, args.concurrency))
                first, second = graphs
                if first is not None and second is not None:
                    results["allocations"] = per_write_calls(
                        _allocations(first), _allocations(second),
                        args.concurrency * (counts[1] - counts[0]),
                    )
            if args.layers:
                for layer in LAYERS[1:]:
                    low, high = (
                        _count(ROOT, emulator.kubeconfig, args.loop, args.concurrency, count,
                               layer)
                        for count in counts
                    )
                    results[f"layer {layer}"] = round(per_write(low, high, counts,
                                                                args.concurrency))
            if args.bare:
                low, high = (
                    _count(ROOT, emulator.kubeconfig, "bare", args.concurrency, count)
                    for count in counts
                )
                results["bare"] = round(per_write(low, high, counts, args.concurrency))
        finally:
            emulator.stop()
    if args.json:
        print(json.dumps({"loop": args.loop, "instructions_per_write": results}))
        return
    for tree, value in results.items():
        if tree == "allocations":
            _print_allocations(value)
        elif tree == "bare":
            print(f"the same writes sent bare (as _floor sends them): {value:,} instructions")
        elif tree.startswith("layer "):
            print(f"{tree}: {value:,} instructions per write through it ({args.loop})")
        else:
            print(f"{tree}: {value:,} instructions per renewal write ({args.loop})")


if __name__ == "__main__":
    main()
