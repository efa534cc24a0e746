"""Several processes contend for one lease on the emulator's HTTPS server (real time)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASE_YML

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = """
import json, os, sys
import anyio
from trio_lease import Lease, LeaseSettings
from trio_lease.backends.kubernetes import KubernetesBackend, default_owner

async def main(kubeconfig: str, log: str, rounds: int, kind: str) -> None:
    settings = LeaseSettings(heartbeat_timeout=3, heartbeat_interval=0.5,
                             lease_operation_timeout=0.25, stop_timeout=0.5,
                             holder_deadline=1.5)
    section = {"kubeconfig": kubeconfig, "lease-kind": kind}
    async with KubernetesBackend.from_config(section) as backend:
        lease = Lease("multi-process", default_owner(), backend, settings)
        for _ in range(rounds):
            async with lease.held(timeout=60) as grant:
                with open(log, "a") as f:
                    f.write(json.dumps(["enter", os.getpid(), grant.fencing_token]) + "\\n")
                await anyio.sleep(0.05)
                with open(log, "a") as f:
                    f.write(json.dumps(["exit", os.getpid(), grant.fencing_token]) + "\\n")

anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], backend=sys.argv[5])
"""


async def _run_worker(command: list[str]) -> None:
    result = await anyio.run_process(command, check=False)
    assert result.returncode == 0, result.stderr.decode()


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real time: real sockets and subprocesses."""
    backend: str = request.param
    return backend


@pytest.mark.parametrize("kind", ["coordination.k8s.io/v1", "akka.io/v1"])
async def test_processes_exclude_each_other_over_https(
    tmp_path: Path, kind: str, anyio_backend: str
) -> None:
    """Three processes on HTTPS (kubeconfig with CA data) never overlap; tokens increase."""
    emulator = KubeEmulator(require_auth=True)
    emulator.apply(LEASE_YML.read_text())
    emulator.add_token("worker-token", "worker", groups=("system:masters",))
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    log = tmp_path / "log.jsonl"
    rounds, processes = 3, 3
    async with emulator.serve() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", token="worker-token")
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for _ in range(processes):
                    command = [sys.executable, str(worker), str(kubeconfig), str(log),
                               str(rounds), kind, anyio_backend]
                    tg.start_soon(_run_worker, command)
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(entries) == 2 * rounds * processes
    tokens = []
    for enter, leave in zip(entries[::2], entries[1::2], strict=True):
        assert enter[0] == "enter"
        assert leave[0] == "exit"
        assert enter[1:] == leave[1:]  # the same process and grant: no one entered between
        tokens.append(enter[2])
    assert tokens == sorted(set(tokens))  # strictly increasing fencing tokens
    assert len({pid for _, pid, _ in entries}) == processes
