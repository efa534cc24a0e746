"""The live state of one run, shared by the harness and the nemesis: the worker slots and
their processes (start, signal, kill, stop), the events they log, and the lease record's
history as the backend's watch reports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from trio_lease import LeaseBackend, LeaseSettings

from ._config import RunConfig
from ._proc import ROOT, append_log
from ._proxy import FaultProxy

__all__ = ["LEASE", "Harness", "Worker"]

#: The name of the lease every worker contends for.
LEASE = "campaign"


class Worker:
    """One worker slot: its current process and how many times it was started."""

    def __init__(self, slot: int) -> None:
        self.slot: int = slot
        self.token: str = f"campaign-token-{slot}"
        self.process: Process | None = None
        self.starts: int = 0
        self.stopped: bool = False  # SIGSTOPped right now
        self.holding: tuple[int, float, float] | None = None  # token, start, planned hold
        self.poised_event: anyio.Event | None = None  # set when it logs "poised" (about to write)
        self.poised_at: float = 0.0  # the stamp of its last "poised"


class Harness:
    """The live state of one run, shared with the nemesis."""

    #: The program each worker process runs.
    worker_module = "tools.campaign._worker"

    def __init__(self, config: RunConfig, out_dir: Path) -> None:
        self.config: RunConfig = config
        self.out_dir: Path = out_dir
        self.settings: LeaseSettings = LeaseSettings(**config.settings)
        self.workers: list[Worker] = [Worker(slot) for slot in range(config.workers)]
        self.proxies: dict[int, FaultProxy] = {}
        self.emulator: Any = None
        self.emulator_pid: int | None = None  # the emulator's own process, when it has one
        self.emulator_cpu: float | None = None  # its CPU seconds, read just before it stops
        self.loop_lags: list[float] = []  # the harness loop's lateness, sampled (seconds)
        self.backend_pid: int | None = None
        self.upstream: tuple[str, int] | None = None
        self.direct_url: str = ""
        self.sqlite_path: str = str(out_dir / "lease.sqlite")
        self.fencing_port: int = 0
        self.events: list[dict[str, Any]] = []
        self.nemesis_log: list[dict[str, Any]] = []
        self.records: list[dict[str, Any]] = []
        self.handovers_live: int = 0
        self._last_identity: str = ""
        self.stopping: bool = False
        self.events_file: IO[str] | None = None  # where record() also writes each event

    # -- events ----------------------------------------------------------------------------------

    def log_event(self, event: dict[str, Any]) -> None:
        """Keep ``event`` and write it to the run's events file."""
        self.events.append(event)
        if self.events_file is not None:
            self.events_file.write(json.dumps(event) + "\n")

    def record(self, event: dict[str, Any]) -> None:
        self.log_event(event)
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
        config = json.dumps(self.worker_config(worker))
        argv = [sys.executable, "-m", self.worker_module, config]
        with append_log(self.out_dir / f"worker{worker.slot}.stderr") as stderr:
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
                    async with backend.watch(LEASE) as records:
                        async for record in records:
                            if record is not None:
                                self.records.append({
                                    "t": time.monotonic(), "holder": record.holder,
                                    "token": record.fencing_token, "version": record.version,
                                })
                except Exception:  # cut watches, paused servers: watch again
                    pass
                await anyio.sleep(0.05)
