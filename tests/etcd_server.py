"""Start real etcd members for tests: one server, or a cluster, on free loopback ports.

Usage (plain context managers, usable from sync fixtures and from any test)::

    with etcd_cluster(size=3) as cluster:
        backend = EtcdBackend(cluster.endpoints)
        cluster.leader().kill()              # SIGKILL the current raft leader
        cluster.wait_for_leader()

Every member listens on 127.0.0.1 only, keeps its data in a fresh temporary directory, and is
stopped (SIGKILL if SIGTERM is not enough) when the ``with`` block exits; on Linux it is also
killed if the test process dies (``PR_SET_PDEATHSIG``), so no etcd outlives a test run.

The binary is ``$TRIO_LEASE_ETCD_BINARY`` or ``etcd`` on ``PATH`` (Debian: ``etcd-server``).
:func:`etcd_binary` returns None when there is none; :data:`MISSING_REASON` says how to fix it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

__all__ = [
    "MISSING_REASON",
    "EtcdCluster",
    "EtcdMember",
    "EtcdStartError",
    "etcd_binary",
    "etcd_cluster",
    "free_ports",
]

MISSING_REASON = (
    "etcd binary not found: install it (Debian/Ubuntu: `apt-get install etcd-server`) or set "
    "TRIO_LEASE_ETCD_BINARY to its path"
)


class EtcdStartError(RuntimeError):
    """An etcd member did not become ready; the message carries the tail of its log."""


def etcd_binary() -> str | None:
    """Path of the etcd binary to test against, or None if there is none."""
    configured = os.environ.get("TRIO_LEASE_ETCD_BINARY")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("etcd")


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held open together while choosing)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


# Looked up in the parent: the child, between fork and exec, must not load libraries or take
# locks another thread may have held at fork time.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: killed when the test process dies


@dataclass
class EtcdMember:
    """One etcd process; ``start``/``kill``/``stop`` may be called repeatedly."""

    name: str
    client_url: str
    peer_url: str
    data_dir: Path
    log_path: Path
    args: list[str]
    process: subprocess.Popen[bytes] | None = None
    started_once: bool = False

    def start(self) -> None:
        """Start the process (after a stop or kill it rejoins with its data directory)."""
        if self.alive:
            return
        args = list(self.args)
        if self.started_once:  # rejoining: the cluster exists already
            args[args.index("--initial-cluster-state") + 1] = "existing"
        log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        self.started_once = True

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the member (a crash: no goodbye to its peers) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait()

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the member's log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class EtcdCluster:
    """Members of one cluster, plus helpers to find the leader and wait for health."""

    members: list[EtcdMember]
    directory: Path
    verify: ssl.SSLContext | bool = True
    _ids: dict[str, EtcdMember] = field(default_factory=dict)

    @property
    def endpoints(self) -> list[str]:
        """Client URLs of all members (alive or not), in member order."""
        return [m.client_url for m in self.members]

    def status(self, member: EtcdMember, timeout: float = 1.0) -> dict[str, Any] | None:
        """The member's ``/v3/maintenance/status`` answer, or None if it does not answer."""
        if not member.alive:
            return None
        try:
            with httpx.Client(verify=self.verify, timeout=timeout) as client:
                response = client.post(f"{member.client_url}/v3/maintenance/status", json={})
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        answer: dict[str, Any] = response.json()
        member_id = answer.get("header", {}).get("member_id")
        if member_id:
            self._ids[member_id] = member
        return answer

    def leader(self, timeout: float = 20.0) -> EtcdMember:
        """The member that alive members agree is the raft leader (waits for one)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(m.alive for m in self.members):
                raise EtcdStartError(f"every etcd member has exited\n{self._logs()}")
            statuses = [(m, self.status(m)) for m in self.members if m.alive]
            leaders = {s.get("leader") for _, s in statuses if s is not None}
            answered = [s for _, s in statuses if s is not None]
            if len(leaders) == 1 and answered:
                (leader_id,) = leaders
                if leader_id and leader_id in self._ids and self._ids[leader_id].alive:
                    return self._ids[leader_id]
            time.sleep(0.05)
        raise EtcdStartError(f"no agreed etcd leader within {timeout} s\n{self._logs()}")

    def wait_for_leader(self, timeout: float = 20.0) -> EtcdMember:
        """Wait until the alive members have elected a leader; return it."""
        return self.leader(timeout)

    def stop(self) -> None:
        """Stop every member."""
        for member in self.members:
            member.stop()

    def _logs(self) -> str:
        return "\n".join(f"--- {m.name} ---\n{m.log_tail()}" for m in self.members)


def _build(
    binary: str,
    size: int,
    directory: Path,
    scheme: str,
    extra_args: Sequence[str],
) -> EtcdCluster:
    ports = free_ports(2 * size)
    names = [f"m{i}" for i in range(size)]
    peers = [f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(size)]
    initial = ",".join(f"{n}={p}" for n, p in zip(names, peers, strict=True))
    token = f"trio-lease-test-{secrets.token_hex(4)}"
    members = []
    for i, name in enumerate(names):
        client = f"{scheme}://127.0.0.1:{ports[2 * i]}"
        args = [
            binary,
            "--name",
            name,
            "--data-dir",
            str(directory / name),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peers[i],
            "--initial-advertise-peer-urls",
            peers[i],
            "--initial-cluster",
            initial,
            "--initial-cluster-token",
            token,
            "--initial-cluster-state",
            "new",
            *extra_args,
        ]
        members.append(
            EtcdMember(name, client, peers[i], directory / name, directory / f"{name}.log", args)
        )
    return EtcdCluster(members, directory)


@contextlib.contextmanager
def etcd_cluster(
    size: int = 1,
    *,
    scheme: str = "http",
    extra_args: Sequence[str] = (),
    verify: ssl.SSLContext | bool = True,
    startup_timeout: float = 30.0,
) -> Iterator[EtcdCluster]:
    """Run a ``size``-member etcd cluster on 127.0.0.1 in a temporary directory.

    ``scheme="https"`` with ``extra_args`` carrying ``--cert-file`` etc. serves clients over TLS
    (``verify`` is then the context the helpers use to talk to it). Yields once a leader is
    elected; stops every member and removes the directory on exit. Raises
    :class:`EtcdStartError` with the members' logs if the cluster does not come up (after
    retrying twice on fresh ports, in case another process took one).
    """
    binary = etcd_binary()
    if binary is None:
        raise EtcdStartError(MISSING_REASON)
    directory = Path(tempfile.mkdtemp(prefix="trio-lease-etcd-"))
    cluster: EtcdCluster | None = None
    try:
        for attempt in range(3):
            cluster = _build(binary, size, directory / f"try{attempt}", scheme, extra_args)
            cluster.verify = verify
            for member in cluster.members:
                member.data_dir.parent.mkdir(parents=True, exist_ok=True)
                member.start()
            try:
                cluster.wait_for_leader(startup_timeout)
                break
            except EtcdStartError:
                cluster.stop()
                if attempt == 2:
                    raise
        assert cluster is not None
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)
