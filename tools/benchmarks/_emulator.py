"""The Kubernetes API emulator as its own process, with request counting for the benchmarks.

``python -m tools.benchmarks._emulator KUBECONFIG`` serves a :class:`KubeEmulator` over plain
HTTP on a free loopback port, writes a kubeconfig (no token: anonymous requests are admin), prints
``ready <url>`` and then answers one line per command read from stdin:

- ``reset``: forget the counts; answers ``{"ok": true}``;
- ``stats``: answers the counts since the last reset as JSON: requests by method and by
  ``METHOD status``, the emulator's CPU seconds and the wall time of the window, and the watch
  streams open right now (``open_watches``: all, ``named``: narrowed to one name by a field
  selector, ``selected``: with a label or other field selection);
- ``quit`` (or end of input): stop.

The emulator keeps every request in ``emulator.requests``; a task folds that list into counters
every 0.2 s and empties it, so memory stays flat during long runs.
"""

from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

import anyio
import anyio.to_thread

from trio_lease.testing.kube import KubeEmulator


class _Counts:
    """Requests folded out of ``emulator.requests`` since the last reset."""

    def __init__(self, emulator: KubeEmulator) -> None:
        self.emulator = emulator
        self.by_method: collections.Counter[str] = collections.Counter()
        self.by_status: collections.Counter[str] = collections.Counter()
        self.cpu0 = time.process_time()
        self.wall0 = time.monotonic()

    def fold(self) -> None:
        requests, self.emulator.requests[:] = list(self.emulator.requests), []
        for request in requests:
            method = "WATCH" if request.query.get("watch") in ("1", "true") else request.method
            self.by_method[method] += 1
            self.by_status[f"{method} {request.status}"] += 1

    def reset(self) -> None:
        self.fold()
        self.by_method.clear()
        self.by_status.clear()
        self.cpu0 = time.process_time()
        self.wall0 = time.monotonic()

    def stats(self) -> dict[str, object]:
        self.fold()
        return {
            "requests": sum(self.by_method.values()),
            "by_method": dict(self.by_method),
            "by_status": dict(self.by_status),
            "cpu_s": time.process_time() - self.cpu0,
            "wall_s": time.monotonic() - self.wall0,
            "open_watches": self.watches(),
        }

    def watches(self) -> dict[str, int]:
        open_ = self.emulator.open_watches()
        return {
            "all": len(open_),
            "named": sum(1 for w in open_ if w.name is not None),
            "selected": sum(1 for w in open_ if w.selection is not None),
        }


async def _main(kubeconfig: Path) -> None:
    emulator = KubeEmulator(namespaces=["default"])
    counts = _Counts(emulator)
    async with emulator.serve("127.0.0.1", 0, tls=False) as server, anyio.create_task_group() as tg:
        server.write_kubeconfig(kubeconfig)

        async def fold_forever() -> None:
            while True:
                await anyio.sleep(0.2)
                counts.fold()

        tg.start_soon(fold_forever)
        print(f"ready {server.url}", flush=True)
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            command = line.strip()
            if command in ("", "quit"):
                break
            if command == "reset":
                counts.reset()
                reply: dict[str, object] = {"ok": True}
            elif command == "stats":
                reply = counts.stats()
            else:
                reply = {"error": f"unknown command {command!r}"}
            print(json.dumps(reply), flush=True)
        tg.cancel_scope.cancel()


def main() -> None:
    """Serve until ``quit`` or end of input."""
    anyio.run(_main, Path(sys.argv[1]), backend="trio")


if __name__ == "__main__":
    main()
