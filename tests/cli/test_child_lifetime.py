"""The command `trio-lease run` starts lives exactly as long as the run: no shorter, no longer.

On Linux the kernel's parent-death signal (which kills the command if `trio-lease` is killed) is
tied to the *thread* that forked the command, and trio ends an idle worker thread after 10 s
(``IDLE_TIMEOUT`` in trio/_core/_thread_cache.py). A command forked from a worker thread would
die with that thread. These tests run commands that outlive the idle time, on both event loops
and every backend, and check that a killed `trio-lease` still takes its command down.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.etcd_server import EtcdCluster

from .conftest import FAST, PATIENCE, Cli, process_alive, read_events, wait_for_event

#: Longer than trio's worker-thread idle time (10 s), so a command tied to a worker thread dies
#: before it ends.
OUTLIVES_WORKER_THREADS = 12.0

LOOPS = ("asyncio", "trio")
BACKENDS = ("memory", "sqlite", "kubernetes", "etcd")


def _start_emulator(cli: Cli) -> Path:
    """`trio-lease emulate` as a real process (HTTPS on a free loopback port): its kubeconfig."""
    kubeconfig = cli.tmp / "kubeconfig"
    emulator = cli.start("emulate", "--kubeconfig", str(kubeconfig))
    deadline = time.monotonic() + PATIENCE
    while "Ctrl-C" not in emulator.stdout():
        if emulator.process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the emulator did not start; stderr:\n{emulator.stderr()}")
        time.sleep(0.05)
    return kubeconfig


def _backend_args(backend: str, config: Path) -> list[str]:
    if backend in ("memory", "sqlite"):
        return ["--backend", backend]
    return ["--config", str(config), "--section", backend]


def test_the_command_outlives_idle_worker_threads_on_every_loop_and_backend(
    cli: Cli, etcd_server: EtcdCluster
) -> None:
    """A command running longer than trio's worker-thread idle time runs to its end and its code
    passes through, on asyncio and trio, with every backend (eight runs side by side)."""
    kubeconfig = _start_emulator(cli)
    config = cli.tmp / "leases.toml"
    endpoints = ", ".join(f'"{endpoint}"' for endpoint in etcd_server.endpoints)
    config.write_text(
        f'[kubernetes]\nlease-class = "kubernetes"\nkubeconfig = "{kubeconfig}"\n\n'
        f'[etcd]\nlease-class = "etcd"\nendpoints = [{endpoints}]\n'
        f'prefix = "/child-lifetime-{os.getpid()}/"\n'
    )
    runs = []
    for loop in LOOPS:
        for backend in BACKENDS:
            label = f"{loop}-{backend}"
            log, child = cli.child(label, sleep=OUTLIVES_WORKER_THREADS, exit_code=3)
            running = cli.start(
                "run", f"job-{label}", "--anyio-backend", loop, *_backend_args(backend, config),
                *FAST, "--", *child,
            )
            runs.append((label, log, running))
    for label, log, running in runs:
        code = running.wait(timeout=OUTLIVES_WORKER_THREADS + PATIENCE)
        events = [event["event"] for event in read_events(log)]
        assert (label, code, events) == (label, 3, ["start", "end"]), running.stderr()


@pytest.mark.parametrize("loop", LOOPS)
def test_kill_9_of_trio_lease_takes_its_command_down_on_either_loop(cli: Cli, loop: str) -> None:
    """The parent-death protection holds on both loops: SIGKILL of `trio-lease run` ends its
    command at once (the kernel kills it), even though the command was forked without a
    worker thread."""
    log, child = cli.child("job")
    holder = cli.start("run", "job", "--anyio-backend", loop, *FAST, "--", *child)
    started = wait_for_event(log, "start", holder)
    os.kill(holder.pid, signal.SIGKILL)
    holder.process.wait()
    deadline = time.monotonic() + PATIENCE
    while process_alive(started["pid"]):
        assert time.monotonic() < deadline, "the command outlived trio-lease"
        time.sleep(0.01)
    assert [event["event"] for event in read_events(log)] == ["start"]
