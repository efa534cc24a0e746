"""The stores the CLI tests reach besides SQLite: `trio-lease emulate` as a process, real etcd.

:func:`start_emulator` starts `trio-lease emulate` (a real HTTPS server on a loopback port) as
one of the test's processes, so the cli fixture kills it at teardown; :class:`Emulator` also
talks to it directly over HTTPS with its admin token, to create objects no trio-lease wrote and
to read what the commands wrote.
"""

from __future__ import annotations

import base64
import dataclasses
import secrets
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from .conftest import PATIENCE, Cli, Running

ROOT = Path(__file__).resolve().parents[2]
LEASE_YML = ROOT / "trio_lease" / "manifests" / "lease.yml"
NAMESPACE = "jobs"


@dataclasses.dataclass
class Emulator:
    """A running `trio-lease emulate`: its kubeconfig, URL and admin token."""

    process: Running
    kubeconfig: Path
    url: str
    token: str

    def client(self) -> httpx.Client:
        """An HTTPS client trusting the emulator's CA, authenticated as its admin."""
        document = yaml.safe_load(self.kubeconfig.read_text())
        ca = base64.b64decode(document["clusters"][0]["cluster"]["certificate-authority-data"])
        context = ssl.create_default_context(cadata=ca.decode())
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=self.url, verify=context, headers=headers, timeout=10)

    def lease(self, name: str, group: str = "coordination.k8s.io") -> dict[str, Any] | None:
        """The lease object ``name`` in the namespace, None if there is none."""
        with self.client() as client:
            response = client.get(f"/apis/{group}/v1/namespaces/{NAMESPACE}/leases/{name}")
        if response.status_code == 404:
            return None
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def create_foreign_lease(self, name: str, holder: str) -> None:
        """A Lease as another program's leader election writes it (no trio-lease label)."""
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": 15,
                "acquireTime": "2026-01-01T00:00:00.000000Z",
                "renewTime": "2026-01-01T00:00:10.000000Z",
                "leaseTransitions": 3,
            },
        }
        with self.client() as client:
            response = client.post(
                f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases", json=body
            )
        assert response.status_code == 201, response.text

    def kubeconfig_with(
        self, path: Path, *, server: str | None = None, ca: bytes | None = None
    ) -> Path:
        """A copy of the kubeconfig at ``path`` with another server URL or CA."""
        document = yaml.safe_load(self.kubeconfig.read_text())
        cluster = document["clusters"][0]["cluster"]
        if server is not None:
            cluster["server"] = server
        if ca is not None:
            cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
        path.write_text(yaml.safe_dump(document))
        return path


def start_emulator(
    cli: Cli, *extra: str, token: str | None = None, apply: bool = True
) -> Emulator:
    """`trio-lease emulate` with lease.yml applied (unless ``apply`` is false) and namespace
    ``jobs``, once it serves (``extra``: more options, such as ``--plain-http`` or ``--port``)."""
    kubeconfig = cli.tmp / "emulator.kubeconfig"
    token = token or secrets.token_hex(16)
    manifests = ["--apply", str(LEASE_YML)] if apply else []
    process = cli.start(
        "emulate", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE, "--token", token,
        *manifests, *extra,
    )
    deadline = time.monotonic() + PATIENCE
    while "Press Ctrl-C" not in process.stdout():
        if process.process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"trio-lease emulate did not start: {process.stderr()}")
        time.sleep(0.05)
    url = process.stdout().split("serving at ", 1)[1].split()[0]
    return Emulator(process, kubeconfig, url, token)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
