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
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from trio_lease import LeaseBackend, LeaseSettings

from ._checker import Report, check
from ._config import RunConfig
from ._nemesis import Nemesis
from ._proxy import FaultProxy, open_proxy

__all__ = ["Harness", "run"]

ROOT = Path(__file__).resolve().parent.parent
LEASE = "campaign"


def _append(path: Path) -> IO[bytes]:
    """A log file for a child's output (opened before the child starts, closed after)."""
    return open(path, "ab")


class Worker:
    """One worker slot: its current process and how many times it was started."""

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.token = f"campaign-token-{slot}"
        self.process: Process | None = None
        self.starts = 0
        self.stopped = False  # SIGSTOPped right now
        self.holding: tuple[int, float, float] | None = None  # token, start, planned hold
        self.poised_event: anyio.Event | None = None  # set when it logs "poised" (about to write)
        self.poised_at = 0.0  # the stamp of its last "poised"


class Harness:
    """The live state of one run, shared with the nemesis."""

    def __init__(self, config: RunConfig, out_dir: Path) -> None:
        self.config = config
        self.out_dir = out_dir
        self.settings = LeaseSettings(**config.settings)
        self.workers = [Worker(slot) for slot in range(config.workers)]
        self.proxies: dict[int, FaultProxy] = {}
        self.emulator: Any = None
        self.backend_pid: int | None = None
        self.upstream: tuple[str, int] | None = None
        self.direct_url = ""
        self.sqlite_path = str(out_dir / "lease.sqlite")
        self.fencing_port = 0
        self.events: list[dict[str, Any]] = []
        self.nemesis_log: list[dict[str, Any]] = []
        self.records: list[dict[str, Any]] = []
        self.handovers_live = 0
        self._last_identity = ""
        self.stopping = False
        self._events_file: IO[str] | None = None

    # -- events ----------------------------------------------------------------------------------

    def record(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if self._events_file is not None:
            self._events_file.write(json.dumps(event) + "\n")
        worker = self.workers[event["slot"]]
        if event["ev"] == "start":
            worker.holding = (int(event["token"]), float(event["t"]), float(event["hold"]))
            if event["identity"] != self._last_identity:
                if self._last_identity:
                    self.handovers_live += 1
                self._last_identity = event["identity"]
        elif event["ev"] == "poised":
            worker.poised_at = float(event["t"])
            if worker.poised_event is not None:
                worker.poised_event.set()
        elif event["ev"] in ("end", "killed", "gone", "exit"):
            worker.holding = None

    def log_fault(self, episode: dict[str, Any]) -> None:
        self.nemesis_log.append(episode)

    # -- workers ---------------------------------------------------------------------------------

    def worker_config(self, worker: Worker) -> dict[str, Any]:
        config = self.config
        server = ""
        if worker.slot in self.proxies:
            server = f"http://127.0.0.1:{self.proxies[worker.slot].port}"
        return {
            "slot": worker.slot,
            "backend": config.backend,
            "server": server,
            "token": worker.token,
            "path": self.sqlite_path,
            "lease": LEASE,
            "settings": config.settings,
            "fencing_port": self.fencing_port,
            "seed": config.seed * 1000 + worker.slot * 100 + worker.starts,
            "loop": "trio" if (worker.slot + worker.starts) % 2 else "asyncio",
            "p_long": config.p_long,
            "gap": config.gap,
            "long_hold": config.long_hold,
            "rest": config.rest,
            "rate": 1.0,
            "broken": config.broken if config.broken == "reply-anchor" else "",
            "slow_reply": config.slow_reply,
        }

    async def start_worker(self, worker: Worker, tg: anyio.abc.TaskGroup) -> None:
        worker.starts += 1
        argv = [sys.executable, "-m", "campaign._worker", json.dumps(self.worker_config(worker))]
        with _append(self.out_dir / f"worker{worker.slot}.stderr") as stderr:
            worker.process = await anyio.open_process(
                argv, stdin=-1, stdout=-1, stderr=stderr, cwd=ROOT
            )
        tg.start_soon(self._read_worker, worker, worker.process)

    async def _read_worker(self, worker: Worker, process: Process) -> None:
        assert process.stdout is not None
        reader = BufferedByteReceiveStream(process.stdout)
        with contextlib.suppress(anyio.EndOfStream, anyio.IncompleteRead,
                                 anyio.BrokenResourceError, anyio.ClosedResourceError):
            while True:
                line = await reader.receive_until(b"\n", 1 << 20)
                event = json.loads(line)
                event["slot"] = worker.slot
                self.record(event)
        # The process is gone (or going): whatever it believed ends when it is dead.
        with anyio.CancelScope(shield=True):
            await process.wait()
        self.record({"ev": "gone", "t": time.monotonic(), "slot": worker.slot,
                     "pid": process.pid, "returncode": process.returncode})

    async def send(self, worker: Worker, command: dict[str, Any]) -> None:
        """Send a command line to a worker (lost if it is dead)."""
        process = worker.process
        if process is None or process.stdin is None:
            return
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await process.stdin.send(json.dumps(command).encode() + b"\n")

    async def kill_worker(self, worker: Worker) -> float:
        """SIGKILL a worker and wait for it to be gone; returns the time it was gone."""
        process = worker.process
        assert process is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        await process.wait()
        gone = time.monotonic()
        worker.stopped = False
        self.record({"ev": "killed", "t": gone, "slot": worker.slot})
        return gone

    def signal_worker(self, worker: Worker, signum: int) -> None:
        if worker.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.process.pid, signum)
            worker.stopped = signum == signal.SIGSTOP

    async def stop_workers(self) -> None:
        """Resume, then stop every worker: stdin closed, then SIGTERM, then SIGKILL."""
        self.stopping = True
        with anyio.CancelScope(shield=True):
            for worker in self.workers:
                self.signal_worker(worker, signal.SIGCONT)
                if worker.process is not None and worker.process.stdin is not None:
                    with contextlib.suppress(Exception):
                        await worker.process.stdin.aclose()
            for grace, signum in ((5.0, signal.SIGTERM), (3.0, signal.SIGKILL), (10.0, 0)):
                with anyio.move_on_after(grace):
                    for worker in self.workers:
                        if worker.process is not None:
                            await worker.process.wait()
                for worker in self.workers:
                    process = worker.process
                    if signum and process is not None and process.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(process.pid, signum)
            for worker in self.workers:
                if worker.process is not None:
                    with contextlib.suppress(Exception):
                        await worker.process.aclose()

    # -- the lease record history ----------------------------------------------------------------

    def _watch_backend(self) -> LeaseBackend:
        if self.config.backend == "kubernetes":
            from trio_lease.backends.kubernetes import (
                ClusterConfig,
                Credentials,
                KubernetesBackend,
            )

            return KubernetesBackend(
                ClusterConfig(server=self.direct_url, credentials=Credentials(token="harness"))
            )
        if self.config.backend == "sqlite":
            from trio_lease.backends.sqlite import SqliteBackend

            return SqliteBackend(self.sqlite_path, watch_interval=0.01)
        from trio_lease.backends.etcd import EtcdBackend

        return EtcdBackend([self.direct_url])

    async def watch_records(self) -> None:
        """Log every version of the lease record the backend's watch reports."""
        async with self._watch_backend() as backend:
            while True:
                try:
                    async for record in backend.watch(LEASE):
                        if record is not None:
                            self.records.append({
                                "t": time.monotonic(), "holder": record.holder,
                                "token": record.fencing_token, "version": record.version,
                            })
                except Exception:  # cut watches, paused servers: watch again
                    pass
                await anyio.sleep(0.05)


@contextlib.asynccontextmanager
async def _fencing_store(harness: Harness) -> AsyncIterator[None]:
    port_file = harness.out_dir / "fencing.port"
    port_file.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "campaign._fencing", str(port_file),
            str(harness.out_dir / "writes.jsonl")]
    if harness.config.broken == "no-fencing":
        argv.append("--no-check")
    with _append(harness.out_dir / "fencing.stderr") as stderr:
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
                if config.progress:
                    tg.start_soon(_progress, harness)
                for worker in harness.workers:
                    await harness.start_worker(worker, tg)
                nemesis = Nemesis(harness, tg)
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
    """Run one campaign and judge it; returns the report and the run's directory."""
    out_dir = config.out_dir or Path(tempfile.mkdtemp(prefix="trio-lease-campaign-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    harness = Harness(config, out_dir)
    started = time.monotonic()
    with open(out_dir / "events.jsonl", "w", encoding="utf-8") as events_file, _etcd(harness):
        harness._events_file = events_file
        anyio.run(_run_async, harness, backend=config.controller_loop)
    run_end = time.monotonic()
    (out_dir / "nemesis.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in harness.nemesis_log)
    )
    (out_dir / "records.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in harness.records)
    )
    report = check(
        events=sorted(harness.events, key=lambda e: float(e["t"])),
        writes=_read_jsonl(out_dir / "writes.jsonl"),
        records=harness.records,
        nemesis=harness.nemesis_log,
        margin=harness.settings.safety_margin,
        heartbeat_timeout=harness.settings.heartbeat_timeout,
        run_end=run_end,
    )
    summary = {
        **report.to_dict(),
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
