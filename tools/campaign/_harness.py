"""The harness: starts the backend, proxies, fencing store and workers, runs the nemesis,
stops everything, and hands the logs to the checker.

Every process it starts is stopped when :func:`run` returns or raises: workers get their stdin
closed (they release and exit), then SIGTERM, then SIGKILL; stopped processes get SIGCONT first;
workers and the store also die with the harness (PR_SET_PDEATHSIG). All sockets are on
127.0.0.1 with ports chosen by the kernel; all files live in the run's directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio

from ._checker import Report, check
from ._config import STORE_OUTAGE_KINDS, RunConfig
from ._nemesis import Nemesis
from ._pchecker import PartitionedReport, check_partitioned
from ._pmode import PartitionedHarness, PartitionedNemesis
from ._proc import ROOT, append_log
from ._proxy import open_proxy
from ._schecker import SemaphoreReport, check_semaphore
from ._smode import SemaphoreHarness, SemaphoreNemesis
from ._state import Harness

__all__ = ["run", "run_partitioned_mode", "run_semaphore_mode"]

#: Each mode's live state and nemesis.
_MODES: dict[str, tuple[type[Harness], type[Nemesis]]] = {
    "lease": (Harness, Nemesis),
    "partitioned": (PartitionedHarness, PartitionedNemesis),
    "semaphore": (SemaphoreHarness, SemaphoreNemesis),
}


@contextlib.asynccontextmanager
async def _fencing_store(harness: Harness) -> AsyncIterator[None]:
    port_file = harness.out_dir / "fencing.port"
    port_file.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "tools.campaign._fencing", str(port_file),
            str(harness.out_dir / "writes.jsonl")]
    if harness.config.broken == "no-fencing":
        argv.append("--no-check")
    with append_log(harness.out_dir / "fencing.stderr") as stderr:
        process = await anyio.open_process(argv, stdin=-1, stdout=stderr, stderr=stderr, cwd=ROOT)
    try:
        with anyio.fail_after(30):
            while not port_file.exists():
                if process.returncode is not None:
                    raise RuntimeError("the fencing store exited at start; see fencing.stderr")
                await anyio.sleep(0.02)
        harness.fencing_port = int(port_file.read_text())
        yield
    finally:
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                with contextlib.suppress(Exception):
                    await process.stdin.aclose()
            with anyio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
            await process.aclose()


@contextlib.asynccontextmanager
async def _backend_server(harness: Harness) -> AsyncIterator[None]:
    """The API server the workers talk to (the emulator, or etcd already started)."""
    if harness.config.backend != "kubernetes":
        yield
        return
    if harness.config.emulator_process:
        async with _emulator_process(harness):
            yield
        return
    from trio_lease.testing.kube import KubeEmulator

    emulator = KubeEmulator(namespaces=["default"], require_auth=True)
    emulator.add_token("harness", "harness", groups=("system:masters",))
    for worker in harness.workers:
        emulator.add_token(worker.token, f"worker-{worker.slot}", groups=("system:masters",))
    harness.emulator = emulator
    async with emulator.serve("127.0.0.1", 0, tls=False) as server:
        harness.upstream = ("127.0.0.1", server.port)
        harness.direct_url = server.url
        yield


@contextlib.asynccontextmanager
async def _emulator_process(harness: Harness) -> AsyncIterator[None]:
    """``trio-lease emulate`` (plain HTTP) as a process of its own, so that the harness's work
    (the proxies, the members' event lines) never delays the emulator's replies, and back.

    Every worker uses the emulator's one admin token; the emulator's own faults (``emu-*``)
    need the emulator in the harness and are not available this way.
    """
    token = secrets.token_hex(16)
    for worker in harness.workers:
        worker.token = token
    out = harness.out_dir / "emulator.stdout"
    argv = [sys.executable, "-m", "trio_lease._cli", "emulate", "--plain-http", "--port", "0",
            "--token", token, "--kubeconfig", str(harness.out_dir / "emulator.kubeconfig")]
    with append_log(out) as stdout, append_log(harness.out_dir / "emulator.stderr") as stderr:
        process = await anyio.open_process(argv, stdin=-1, stdout=stdout, stderr=stderr, cwd=ROOT)
    try:
        if harness.config.emulator_nice:
            # The store stands in for an API server on cores of its own: on a shared machine,
            # keep it from queueing behind unrelated work (a negative value needs root).
            os.setpriority(os.PRIO_PROCESS, process.pid, harness.config.emulator_nice)
        with anyio.fail_after(30):
            while "Press Ctrl-C" not in (text := out.read_text() if out.exists() else ""):
                if process.returncode is not None:
                    raise RuntimeError("the emulator exited at start; see emulator.stderr")
                await anyio.sleep(0.05)
        url = text.split("serving at ", 1)[1].split()[0]
        host, port = url.removeprefix("http://").rsplit(":", 1)
        harness.upstream = (host, int(port))
        harness.direct_url = url
        harness.emulator_pid = process.pid
        yield
    finally:
        with anyio.CancelScope(shield=True):
            harness.emulator_cpu = _cpu_seconds(process.pid)
            if process.returncode is None:
                process.terminate()
            with anyio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
            await process.aclose()


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds a live process has used (Linux ``/proc``), None if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _loop_lag(harness: Harness) -> None:
    """How late the harness's own event loop wakes from a 50 ms sleep, sampled all run long:
    a busy or CPU-starved harness answers the members (proxies, in-harness emulator) late."""
    while True:
        t0 = time.monotonic()
        await anyio.sleep(0.05)
        harness.loop_lags.append(time.monotonic() - t0 - 0.05)


async def _run_async(harness: Harness) -> None:
    config = harness.config
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(_backend_server(harness))
        if harness.upstream is not None:
            for worker in harness.workers:
                harness.proxies[worker.slot] = await stack.enter_async_context(
                    open_proxy(*harness.upstream, seed=config.seed * 10 + worker.slot)
                )
        await stack.enter_async_context(_fencing_store(harness))
        async with anyio.create_task_group() as tg:
            try:
                tg.start_soon(harness.watch_records)
                tg.start_soon(_loop_lag, harness)
                if config.progress:
                    tg.start_soon(_progress, harness)
                for worker in harness.workers:
                    await harness.start_worker(worker, tg)
                nemesis = _MODES[config.mode][1](harness, tg)
                with anyio.move_on_after(config.duration):
                    await nemesis.run()
            finally:
                with anyio.CancelScope(shield=True):
                    await nemesis_cleanup(harness)
                    await anyio.sleep(0.5)  # let the last events and writes be logged
                tg.cancel_scope.cancel()


async def _progress(harness: Harness) -> None:
    """Print a progress line to stderr every 30 s (long runs)."""
    started = time.monotonic()
    while True:
        await anyio.sleep(30)
        print(
            f"[{time.monotonic() - started:6.0f} s] handovers {harness.handovers_live}, "
            f"faults {len(harness.nemesis_log)}",
            file=sys.stderr, flush=True,
        )


async def nemesis_cleanup(harness: Harness) -> None:
    """Heal every fault, then stop the workers."""
    for proxy in harness.proxies.values():
        proxy.clear()
    if harness.emulator is not None:
        harness.emulator.faults.clear()
    if harness.backend_pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(harness.backend_pid, signal.SIGCONT)
    await harness.stop_workers()


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            rows.append(json.loads(line))
    return rows


@contextlib.contextmanager
def _etcd(harness: Harness) -> Iterator[None]:
    if harness.config.backend != "etcd":
        yield
        return
    from tests.etcd_server import etcd_cluster

    with etcd_cluster(size=1) as cluster:
        member = cluster.members[0]
        host, port = member.client_url.removeprefix("http://").rsplit(":", 1)
        harness.upstream = (host, int(port))
        harness.direct_url = member.client_url
        assert member.process is not None
        harness.backend_pid = member.process.pid
        yield


def _library_revision() -> dict[str, Any]:
    """The commit the library was run from, and its uncommitted changes (read-only git)."""
    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    changed = git("status", "--porcelain", "--", "trio_lease")
    return {
        "commit": git("rev-parse", "HEAD"),
        "uncommitted": [line.split()[-1] for line in changed.splitlines() if line.strip()],
    }


def run(config: RunConfig) -> tuple[Report, Path]:
    """Run one campaign of the lease mode and judge it; returns the report and the run's
    directory."""
    return _run_as(config, "lease", Report, "run")


def run_partitioned_mode(config: RunConfig) -> tuple[PartitionedReport, Path]:
    """Run one campaign of the partitioned mode and judge it."""
    return _run_as(config, "partitioned", PartitionedReport, "run_partitioned_mode")


def run_semaphore_mode(config: RunConfig) -> tuple[SemaphoreReport, Path]:
    """Run one campaign of the semaphore mode and judge it."""
    return _run_as(config, "semaphore", SemaphoreReport, "run_semaphore_mode")


_R = TypeVar("_R", Report, PartitionedReport, SemaphoreReport)


def _run_as(config: RunConfig, mode: str, kind: type[_R], caller: str) -> tuple[_R, Path]:
    if config.mode != mode:
        raise ValueError(f"{caller}() runs the {mode} mode, not {config.mode!r}")
    report, out_dir = run_any(config)
    assert isinstance(report, kind)
    return report, out_dir


def run_any(config: RunConfig) -> tuple[Report | PartitionedReport | SemaphoreReport, Path]:
    """Run one campaign of any mode and judge it; returns the report and the run's
    directory."""
    out_dir = config.out_dir or Path(tempfile.mkdtemp(prefix="trio-lease-campaign-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    harness = _MODES[config.mode][0](config, out_dir)
    started = time.monotonic()
    with open(out_dir / "events.jsonl", "w", encoding="utf-8") as events_file, _etcd(harness):
        harness.events_file = events_file
        anyio.run(_run_async, harness, backend=config.controller_loop)
    run_end = time.monotonic()
    (out_dir / "nemesis.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in harness.nemesis_log)
    )
    (out_dir / "records.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in harness.records)
    )
    events = sorted(harness.events, key=lambda e: float(e["t"]))
    report: Report | PartitionedReport | SemaphoreReport
    if isinstance(harness, SemaphoreHarness):
        report = check_semaphore(
            events=events,
            writes=_read_jsonl(out_dir / "writes.jsonl"),
            nemesis=harness.nemesis_log,
            limit=config.limit,
            margin=harness.settings.safety_margin,
            heartbeat_timeout=harness.settings.heartbeat_timeout,
            bound=config.wait_bound,
            stop=harness.stop_started or run_end,
            run_end=run_end,
            outage_kinds=STORE_OUTAGE_KINDS[config.backend],
        )
    elif isinstance(harness, PartitionedHarness):
        report = check_partitioned(
            events=events,
            writes=_read_jsonl(out_dir / "writes.jsonl"),
            nemesis=harness.nemesis_log,
            keys=[f"k{i:03d}" for i in range(config.keys)],
            margin=harness.settings.safety_margin,
            heartbeat_timeout=harness.settings.heartbeat_timeout,
            bound=config.unrun_bound,
            stop=harness.stop_started or run_end,
            run_end=run_end,
            outage_kinds=STORE_OUTAGE_KINDS[config.backend],
        )
    else:
        report = check(
            events=events,
            writes=_read_jsonl(out_dir / "writes.jsonl"),
            records=harness.records,
            nemesis=harness.nemesis_log,
            margin=harness.settings.safety_margin,
            heartbeat_timeout=harness.settings.heartbeat_timeout,
            run_end=run_end,
        )
    lags = sorted(harness.loop_lags) or [0.0]
    cpu = os.times()
    summary = {
        **report.to_dict(),
        "harness_loop_lag_ms": {
            "p50": round(lags[len(lags) // 2] * 1e3, 1),
            "p99": round(lags[int(len(lags) * 0.99)] * 1e3, 1),
            "max": round(lags[-1] * 1e3, 1),
            "over_250": sum(lag > 0.25 for lag in lags),
            "samples": len(harness.loop_lags),
        },
        "cpu_seconds": {
            "harness": round(cpu.user + cpu.system, 1),
            "emulator_process": harness.emulator_cpu,
            "other_children": round(cpu.children_user + cpu.children_system, 1),
        },
        "emulator": (
            "" if config.backend != "kubernetes"
            else f"own process (nice {config.emulator_nice})" if config.emulator_process
            else "in the harness"
        ),
        "mode": config.mode,
        "workers": config.workers,
        "seed": config.seed,
        "backend": config.backend,
        "broken": config.broken,
        "seconds": round(run_end - started, 1),
        "settings": config.settings,
        "safety_margin": harness.settings.safety_margin,
        "worker_starts": sum(w.starts for w in harness.workers),
        "library": _library_revision(),
    }
    (out_dir / "report.json").write_text(json.dumps(summary, indent=2) + "\n")
    return report, out_dir
