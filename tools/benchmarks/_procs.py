"""Child processes for the runner: the emulator and the workers, read line by line."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["Emulator", "Proc", "rounds_of_workers"]

ROOT = Path(__file__).resolve().parents[2]  # the repository root (tools/<tool>/this file)


class Proc:
    """A child ``python -m MODULE ...`` with line-based stdin/stdout; always stopped."""

    def __init__(self, module: str, *args: str, cwd: Path = ROOT) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=cwd, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        self._selector = selectors.DefaultSelector()
        assert self.popen.stdout is not None
        self._selector.register(self.popen.stdout, selectors.EVENT_READ)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def readline(self, timeout: float) -> str:
        """The next stdout line; TimeoutError after ``timeout`` s, EOFError if it exited."""
        assert self.popen.stdout is not None
        if not self._selector.select(timeout):
            raise TimeoutError(f"pid {self.pid} said nothing for {timeout:g} s")
        line = self.popen.stdout.readline()
        if not line:
            raise EOFError(f"pid {self.pid} exited with {self.popen.wait()}")
        return line

    def event(self, timeout: float) -> dict[str, Any]:
        """The next JSON event line (other output is skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.readline(max(deadline - time.monotonic(), 0.001))
            if line.startswith("{"):
                parsed: dict[str, Any] = json.loads(line)
                return parsed

    def send(self, line: str) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(line + "\n")
        self.popen.stdin.flush()

    def kill(self) -> None:
        """SIGKILL (the crash in the failover benchmark)."""
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)

    def stop(self) -> None:
        """Make sure the process is gone (terminate, then kill), and reap it."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        self.popen.wait()
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._selector.close()


class Emulator:
    """The emulator process (``tools.benchmarks._emulator``) and its counting commands."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self._start()

    def restart(self) -> None:
        """A fresh emulator (empty store, no watch streams left by earlier workers)."""
        self.stop()
        self._start()

    def _start(self) -> None:
        self.proc = Proc("tools.benchmarks._emulator", str(self.kubeconfig))
        line = self.proc.readline(30)
        if not line.startswith("ready "):
            raise RuntimeError(f"emulator did not start: {line!r}")
        self.url = line.split()[1]

    def command(self, command: str) -> dict[str, Any]:
        self.proc.send(command)
        return self.proc.event(30)

    def stop(self) -> None:
        if self.proc.popen.poll() is None:
            try:
                self.proc.send("quit")
                self.proc.popen.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.proc.stop()


def rounds_of_workers(
    module: str, kinds: tuple[str, ...], rounds: int, args: tuple[str, ...], timeout: float
) -> None:
    """Against one emulator, ``rounds`` times: each kind in a fresh ``python -m module worker
    KUBECONFIG KIND *args``, which prints one JSON line with ``us_per_request``; then print
    each kind's median and runs (the layer and floor tools of this package)."""
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        emulator = Emulator(Path(tmp) / "kubeconfig")
        try:
            for _ in range(rounds):
                for kind in kinds:
                    proc = Proc(module, "worker", str(emulator.kubeconfig), kind, *args)
                    try:
                        line = json.loads(proc.readline(timeout))
                    finally:
                        proc.stop()
                    results[kind].append(line["us_per_request"])
        finally:
            emulator.stop()
    for kind, values in results.items():
        runs = ", ".join(f"{v:.0f}" for v in values)
        print(f"{kind}: median {statistics.median(values):.0f} µs per request ({runs})")
