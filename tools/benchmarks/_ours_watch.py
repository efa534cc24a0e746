"""trio_lease's side of the shared-watch benchmarks, one scenario per run.

``python -m tools.benchmarks._ours_watch SCENARIO PARAMS_JSON``, the same events as
:mod:`._ours` (whose helpers it uses). Scenarios:

- ``waiters``: ``n`` Lease objects held by someone else (written directly, with trio_lease's
  ``app.kubernetes.io/managed-by`` label and a one-hour duration, so nobody renews or frees them
  during the run), and one waiting contender in ``held()`` on each; ``start`` / ``end`` bracket
  a window in which the runner counts requests and reads the watch streams open on the server.
- ``replicas``: three replicas, each with its own backend (its own client and shared watch, as
  three processes would have), in ``held()`` on one lease; the runner counts the requests.
- ``profile``: :func:`._ours.steady` with a sampling profiler over its window: a thread samples
  the event loop thread's stack every ``interval`` seconds; the result gets the share of the
  busy samples by module (innermost frame) and the top functions, self and inclusive.

Parameters as in :mod:`._ours` (``poll`` sets ``poll_interval``).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx

from trio_lease import Lease, LeaseSettings

from . import _ours
from ._common import emit, now, wait_for_line
from ._ours import kube_server, make_backend

Params = dict[str, Any]
LABEL = {"app.kubernetes.io/managed-by": "trio-lease"}


def settings(p: Params) -> LeaseSettings:
    """L, R, T (and ``poll`` as poll_interval) from the parameters."""
    extra = {"poll_interval": p["poll"]} if p.get("poll") else {}
    return LeaseSettings(heartbeat_timeout=p["L"], heartbeat_interval=p["R"],
                         lease_operation_timeout=p["T"], **extra)


def _lease_object(name: str, holder: str) -> dict[str, Any]:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "default", "labels": dict(LABEL)},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3600, "leaseTransitions": 1,
                 "acquireTime": stamp, "renewTime": stamp},
    }


async def _create(server: str, names: list[str], holder: str) -> None:
    """POST the Lease objects, 8 at a time."""
    path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    limit = anyio.Semaphore(8)
    async with httpx.AsyncClient(base_url=server) as client, anyio.create_task_group() as tg:
        async def post(name: str) -> None:
            async with limit:
                reply = await client.post(path, json=_lease_object(name, holder))
                if reply.status_code != 201:
                    raise RuntimeError(f"creating {name}: HTTP {reply.status_code}")

        for name in names:
            tg.start_soon(post, name)


async def _window(p: Params, fields: dict[str, Any]) -> None:
    """``start``, the measured window, ``end``; then report and exit."""
    emit("start", held=fields.get("held", 0))
    await wait_for_line()
    cpu0, wall0 = time.process_time(), now()
    await anyio.sleep(p["window"])
    cpu, wall = time.process_time() - cpu0, now() - wall0
    emit("end")
    await wait_for_line()
    _ours._finish(cpu_s=cpu, wall_s=wall, losses=0, failed=0, **fields)


async def waiters(p: Params) -> None:
    """``n`` contenders waiting on ``n`` leases held elsewhere; requests and watch streams."""
    # Reads that queue past T log a warning each (1,000 waiters polling at R = 1.5 s are ~670
    # GETs per second through 4 in-flight slots); the result counts them instead.
    failing = _CountWarnings()
    logging.getLogger("trio_lease").addHandler(failing)
    logging.getLogger("trio_lease").propagate = False
    names = [f"{p['prefix']}-{i}" for i in range(p["n"])]
    await _create(kube_server(p["kubeconfig"]), names, "elsewhere")
    backend, lease_settings = make_backend(p), settings(p)
    acquired = {"n": 0}

    async def wait(i: int, name: str) -> None:
        await anyio.sleep(i * p["ramp"] / len(names))
        async with Lease(name, "waiter", backend, lease_settings).held():
            acquired["n"] += 1  # must not happen: the holder's record lasts an hour

    async with anyio.create_task_group() as tg:
        for i, name in enumerate(names):
            tg.start_soon(wait, i, name)
        await anyio.sleep(p["ramp"] + p.get("settle", p["R"] * 2))
        await _window(p, {"waiting": len(names), "held": acquired["n"],
                          "warnings": failing.count})


class _CountWarnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


async def replicas(p: Params) -> None:
    """Three replicas with a backend each on one lease; the runner counts the requests."""
    leading = anyio.Event()

    async def replica(i: int) -> None:
        lease = Lease(p["prefix"], f"replica-{i}", make_backend(p), settings(p))
        async with lease.held():
            leading.set()
            await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        for i in range(p.get("replicas", 3)):
            tg.start_soon(replica, i)
        with anyio.fail_after(60):
            await leading.wait()
        await anyio.sleep(p.get("settle", p["R"] * 2))
        await _window(p, {"held": 1})


class _Sampler:
    """Samples one thread's Python stack at a fixed interval while ``on``."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.target = threading.get_ident()
        self.on = False
        self.idle = 0
        self.leaf: collections.Counter[str] = collections.Counter()
        self.module: collections.Counter[str] = collections.Counter()
        self.inclusive: collections.Counter[str] = collections.Counter()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            frame = sys._current_frames().get(self.target) if self.on else None
            if frame is None:
                continue
            code = frame.f_code
            if code.co_name in ("select", "poll") and "selectors" in code.co_filename:
                self.idle += 1  # the loop waits in epoll: not CPU
                continue
            self.leaf[_where(code)] += 1
            self.module[_module(code.co_filename)] += 1
            seen: set[str] = set()
            while frame is not None:
                seen.add(_where(frame.f_code))
                frame = frame.f_back
            self.inclusive.update(seen)

    def report(self, top: int = 15) -> dict[str, Any]:
        busy = sum(self.leaf.values())

        def share(counter: collections.Counter[str]) -> list[tuple[str, float]]:
            return [(k, round(100 * v / busy, 1)) for k, v in counter.most_common(top)]

        return {
            "busy_samples": busy, "idle_samples": self.idle, "interval_s": self.interval,
            "self_pct_by_module": share(self.module), "self_pct_by_function": share(self.leaf),
            "inclusive_pct": share(self.inclusive),
        }


def _module(filename: str) -> str:
    """``site-packages/h11/_util.py`` → ``h11``; ``trio_lease/_http.py`` → ``trio_lease/_http``."""
    parts = filename.replace("\\", "/").split("/")
    for anchor in ("site-packages", "python3.11", "work"):
        if anchor in parts[:-1]:
            rest = parts[len(parts) - parts[::-1].index(anchor):]
            break
    else:
        rest = parts[-2:]
    if rest and rest[0] == "main":
        rest = rest[1:]
    if rest and rest[0] in ("trio_lease", "tools"):
        return "/".join(rest[:3]).removesuffix(".py")
    return rest[0].removesuffix(".py") if rest else filename


def _where(code: Any) -> str:
    return f"{_module(code.co_filename)}:{code.co_name}"


class _PySpy:
    """``py-spy record`` of this process over the window, folded like :class:`_Sampler`.

    py-spy samples from outside (no GIL needed, idle threads left out), so its shares are not
    biased towards the moments the loop releases the GIL, as the in-process sampler's are.
    """

    def __init__(self, binary: str, window: float, rate: int = 200) -> None:
        self.binary, self.window, self.rate = binary, window, rate
        self.out = Path(tempfile.mkdtemp()) / "raw.txt"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.out.with_name("stderr.txt").open("wb") as errors:  # kept for the report
            self.proc = subprocess.Popen(
                [self.binary, "record", "--pid", str(os.getpid()), "-d", str(int(self.window)),
                 "-r", str(self.rate), "-f", "raw", "-o", str(self.out), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=errors,
            )

    def report(self, top: int = 15) -> dict[str, Any]:
        if self.proc is not None:
            self.proc.wait(60)
        leaf: collections.Counter[str] = collections.Counter()
        module: collections.Counter[str] = collections.Counter()
        inclusive: collections.Counter[str] = collections.Counter()
        text = self.out.read_text() if self.out.exists() else ""
        for line in text.splitlines():
            stack, _, count = line.rpartition(" ")
            frames = [_spy_frame(f) for f in stack.split(";")]
            leaf[frames[-1][1]] += int(count)
            module[frames[-1][0]] += int(count)
            inclusive.update({f[1]: int(count) for f in frames})
        busy = sum(leaf.values()) or 1

        def share(counter: collections.Counter[str]) -> list[tuple[str, float]]:
            return [(k, round(100 * v / busy, 1)) for k, v in counter.most_common(top)]

        errors = self.out.with_name("stderr.txt")
        return {
            "tool": "py-spy", "busy_samples": sum(leaf.values()), "idle_samples": 0,
            "stderr": errors.read_text(errors="replace")[-500:] if errors.exists() else "",
            "rate_hz": self.rate, "self_pct_by_module": share(module),
            "self_pct_by_function": share(leaf), "inclusive_pct": share(inclusive),
        }


def _spy_frame(frame: str) -> tuple[str, str]:
    """``f (trio_lease/backends/kubernetes/_api.py:40)`` → (``trio_lease/backends/kubernetes/_api``,
    ``…/_api:f``); other packages by their top name (``anyio``, ``asyncio``, ``h11``)."""
    name, _, where = frame.rpartition(" (")
    parts = where.rsplit(":", 1)[0].removesuffix(".py").split("/")  # relative: anyio/_core/x
    if parts[0] == "trio_lease":
        mod = "/".join(parts[:4] if parts[1:2] == ["backends"] else parts[:2])
    else:
        mod = parts[0]
    return mod, f"{mod}:{name or frame}"


async def profile(p: Params) -> None:
    """:func:`._ours.steady` with a profiler over its window: py-spy when it is installed
    (``pip install py-spy``), else the in-process sampler (biased, see :class:`_PySpy`)."""
    binary = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    profiler: _PySpy | _Sampler
    if binary is not None:
        profiler = _PySpy(binary, p["window"])
    else:
        # The sampler needs the GIL to look: a short switch interval lets it in while the
        # loop runs Python code (at the default 5 ms the busy samples would be few and late).
        sys.setswitchinterval(p.get("interval", 0.001) / 2)
        profiler = _Sampler(p.get("interval", 0.001))
    plain_finish = _ours._finish

    def emit_and_switch(event: str, **fields: Any) -> None:
        if event == "end" and isinstance(profiler, _Sampler):
            profiler.on = False
        emit(event, **fields)
        if event == "start":
            if isinstance(profiler, _Sampler):
                profiler.on = True
            else:
                profiler.start()

    def finish(**fields: Any) -> None:
        plain_finish(**fields, profile=profiler.report())

    _ours.emit = emit_and_switch  # type: ignore[attr-defined]  # steady's window starts here
    _ours._finish = finish
    await _ours.steady(p)


SCENARIOS = {"waiters": waiters, "replicas": replicas, "profile": profile}


def main() -> None:
    """Run one scenario: ``python -m tools.benchmarks._ours_watch SCENARIO PARAMS_JSON``."""
    scenario, params = sys.argv[1], json.loads(sys.argv[2])
    anyio.run(SCENARIOS[scenario], params, backend=params.get("anyio_backend", "asyncio"))


if __name__ == "__main__":
    main()
