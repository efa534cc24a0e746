"""Fixtures for the CLI acceptance tests: real `trio-lease` processes on a temporary SQLite file.

Every `trio-lease` process is started in its own session, so teardown can SIGKILL it together
with the command it runs (by process group id, which is the pid of the process we started).
Only the temporary SQLite file is touched: ``TRIO_LEASE_*`` variables of the outer environment
are dropped and ``XDG_STATE_HOME`` points into the test's directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REAL_TIME_RERUNS, STARVED
from trio_lease import LeaseLost, LeaseSettings

CHILD = Path(__file__).with_name("child.py")

#: Short timings for every test: L = 3 s, R = 0.5 s, T = 0.25 s, T_stop = 0.5 s (so D = 2 s).
TIMINGS = {
    "heartbeat-timeout": "3s",
    "heartbeat-interval": "0.5s",
    "lease-operation-timeout": "0.25s",
    "stop-timeout": "0.5s",
}
FAST = [arg for option, value in TIMINGS.items() for arg in (f"--{option}", value)]
#: What a holder prints when it lost the lease by its deadline (the STARVED rule).
STARVED_TEXT = "no renewal was confirmed before the holder's deadline"
SETTINGS = LeaseSettings.from_mapping(TIMINGS)
#: Timings for a one-shot command (handover) next to FAST holders: its requests are bounded by
#: T = 5 s as by default, not by FAST's 0.25 s, which a loaded machine can exceed; L = 60 s and
#: R = 6 s meet every backend's rules (Akka's wall-clock rule too).
ONE_SHOT = ["--heartbeat-timeout", "60s", "--heartbeat-interval", "6s",
            "--lease-operation-timeout", "5s"]
L = SETTINGS.heartbeat_timeout

def no_record(name: str) -> dict[str, Any]:
    """``status --json``'s row of a lease with no record: every key of a record, None."""
    from trio_lease._cli._admin import ROW_KEYS

    return dict.fromkeys(ROW_KEYS) | {"name": name, "exists": False}


#: Bound on waiting for anything that should take a fraction of a second: it only ends a test
#: whose process hangs. Generous, because on a loaded machine under coverage a `trio-lease run`
#: and its Python child have taken more than 20 s to start.
PATIENCE = 60.0


def trio_lease_command() -> list[str]:
    """The venv's console script when installed, else ``python -m trio_lease._cli``."""
    script = Path(sys.executable).parent / "trio-lease"
    return [str(script)] if script.exists() else [sys.executable, "-m", "trio_lease._cli"]


def read_events(log: Path) -> list[dict[str, Any]]:
    """The events a child logged so far (see child.py)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not reaped, counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, or going while we read
        return False
    fields = stat.rpartition(")")[2].split()  # the state follows the "(command)" field
    return bool(fields) and fields[0] not in ("Z", "X")


@dataclasses.dataclass
class Running:
    """A `trio-lease` process started by a test, with its output in files."""

    process: subprocess.Popen[bytes]
    out: Path
    err: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def wait(self, timeout: float = PATIENCE) -> int:
        """Wait for exit (failing the test after ``timeout``) and return the exit code."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"trio-lease did not exit within {timeout} s; stderr:\n{self.stderr()}")

    def wait_for_stderr(self, text: str, timeout: float = PATIENCE) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr():
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no {text!r} on stderr; stderr:\n{self.stderr()}")
            time.sleep(0.02)


@dataclasses.dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@dataclasses.dataclass
class Cli:
    """Starts `trio-lease` processes and the logging child commands they run."""

    tmp: Path
    db: Path
    env: dict[str, str]
    started: list[Running] = dataclasses.field(default_factory=list)

    def child(
        self,
        log: str,
        *,
        sleep: float = 60.0,
        exit_code: int = 0,
        kill_self: int | None = None,
        ignore_term: bool = False,
    ) -> tuple[Path, list[str]]:
        """A child command logging to ``tmp/<log>.jsonl``: (log path, argv)."""
        path = self.tmp / f"{log}.jsonl"
        argv = [sys.executable, str(CHILD), str(path), "--sleep", str(sleep)]
        argv += ["--exit", str(exit_code)]
        if kill_self is not None:
            argv += ["--kill-self", str(kill_self)]
        if ignore_term:
            argv.append("--ignore-term")
        return path, argv

    def start(self, *args: str, env: dict[str, str] | None = None) -> Running:
        """Start ``trio-lease ARGS`` in its own session; it is killed at teardown if alive.
        With ``--config`` in ARGS and no ``env``, the default environment without its
        TRIO_LEASE_SQLITE_PATH (trio-lease refuses that variable beside --config)."""
        if env is None and "--config" in args:
            env = {k: v for k, v in self.env.items() if k != "TRIO_LEASE_SQLITE_PATH"}
        index = len(self.started)
        out, err = self.tmp / f"cli{index}.out", self.tmp / f"cli{index}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = subprocess.Popen(
                [*trio_lease_command(), *args],
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env=self.env if env is None else env,
                cwd=self.tmp,
                start_new_session=True,
            )
        running = Running(process, out, err)
        self.started.append(running)
        return running

    def run(self, *args: str, env: dict[str, str] | None = None) -> Result:
        """Run ``trio-lease ARGS`` to completion."""
        running = self.start(*args, env=env)
        code = running.wait()
        return Result(code, running.stdout(), running.stderr())

    def run_serving(self, loop: str, metrics_port: str = "0") -> tuple[Path, Running]:
        """`trio-lease run job` on ``loop`` with a probe server on a free port and metrics on
        ``metrics_port`` ("0": on the probe server): (its child's log, the process)."""
        log, child = self.child("child")
        running = self.start(
            "run",
            "job",
            "--anyio-backend",
            loop,
            *FAST,
            "--health-port",
            "0",
            "--metrics-port",
            metrics_port,
            "--",
            *child,
        )
        return log, running

    def status(self, *names: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """``trio-lease status --json NAMES``, parsed."""
        result = self.run("status", "--json", *names, env=env)
        assert result.returncode == 0, result.stderr
        rows: list[dict[str, Any]] = json.loads(result.stdout)
        return rows

    def cleanup(self) -> None:
        for running in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(running.pid, signal.SIGKILL)  # the session we started, child included
            running.process.wait()


def wait_for_event(log: Path, event: str, running: Running | None = None) -> dict[str, Any]:
    """The first ``event`` the child logged, waiting up to PATIENCE for it.

    When it never comes because ``running`` (a FAST holder) lost the lease by its deadline,
    the holder's LeaseLost is raised: the machine starved it (with L = 3 s, a loaded machine
    can), and the STARVED rule runs the test again (:func:`pytest_collection_modifyitems`).
    """
    deadline = time.monotonic() + PATIENCE
    while True:
        exited = running is not None and running.process.poll() is not None
        for item in read_events(log):
            if item["event"] == event:
                return item
        if exited or time.monotonic() > deadline:
            stderr = running.stderr() if running else ""
            if STARVED_TEXT in stderr:
                raise LeaseLost("job", f"{STARVED_TEXT} (in the holder):\n{stderr}")
            detail = f"; trio-lease stderr:\n{stderr}" if running else ""
            pytest.fail(f"no {event!r} in {log.name}: {read_events(log)}{detail}")
        time.sleep(0.01)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each CLI test runs again when a holder it started lost the lease by its deadline (the
    STARVED rule of tests/conftest.py, as for the tests on a real-time store): a holder the
    machine starved says nothing about the command under test; one that the code starves does
    so on every run, and the test fails."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=REAL_TIME_RERUNS, only_rerun=[STARVED]))


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    """A Cli on ``tmp_path/leases.sqlite3`` (via TRIO_LEASE_SQLITE_PATH); kills leftovers."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRIO_LEASE_")}
    db = tmp_path / "leases.sqlite3"
    env.update(TRIO_LEASE_SQLITE_PATH=str(db), XDG_STATE_HOME=str(tmp_path / "state"))
    env.pop("POD_NAME", None)
    runner = Cli(tmp_path, db, env)
    try:
        yield runner
    finally:
        runner.cleanup()
