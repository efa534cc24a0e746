"""Shared helpers for the Kubernetes API emulator tests."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from trio_lease.testing.kube import KubeEmulator, KubeServer

NS = "default"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
AKKA = f"/apis/akka.io/v1/namespaces/{NS}/leases"
LEASE_YML = Path(__file__).resolve().parents[2] / "lease.yml"

JSON = dict[str, Any]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both backends on real time: these tests use real sockets (a test module takes this
    fixture by importing it)."""
    backend: str = request.param
    return backend


def client(emulator: KubeEmulator, token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
    """An httpx client talking to ``emulator`` in-process, with a bearer token if given."""
    headers = dict(kwargs.pop("headers", {}))
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.AsyncClient(
        transport=emulator.transport(), base_url="https://kube.test", headers=headers, **kwargs
    )


def lease(name: str, **spec: Any) -> JSON:
    """A Lease body with ``spec`` fields."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": spec,
    }


def akka_lease(name: str, **spec: Any) -> JSON:
    """An akka.io/v1 Lease body (the custom resource of lease.yml) with ``spec`` fields."""
    return {"apiVersion": "akka.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": spec}


def with_akka_crd() -> KubeEmulator:
    """An emulator serving the akka.io/v1 Lease custom resource (lease.yml applied)."""
    emulator = KubeEmulator()
    emulator.apply(LEASE_YML.read_text())
    return emulator


async def create(http: httpx.AsyncClient, name: str, **spec: Any) -> JSON:
    """POST a Lease and return the created object (asserting 201)."""
    response = await http.post(LEASES, json=lease(name, **spec))
    assert response.status_code == 201, response.text
    created: JSON = response.json()
    return created


@asynccontextmanager
async def served(
    emulator: KubeEmulator, token: str | None = None, **headers: str
) -> AsyncIterator[tuple[KubeServer, httpx.AsyncClient]]:
    """``emulator`` on a real loopback HTTPS socket, and an httpx client that trusts its CA."""
    async with emulator.serve() as server:
        sent = dict(headers)
        if token:
            sent["Authorization"] = f"Bearer {token}"
        verify = ssl.create_default_context(cadata=server.ca_pem.decode())
        async with httpx.AsyncClient(
            base_url=server.url, verify=verify, headers=sent, timeout=30
        ) as http:
            yield server, http


async def run_kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run kubectl with ``kubeconfig`` (in a worker thread, so the server keeps serving).

    Its discovery and OpenAPI cache lives next to the kubeconfig: kubectl keys the cache by
    host and port, and a port is reused by later emulators that serve other types.
    """
    cache = kubeconfig.parent / "kubectl-cache"

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), *args],
            input=stdin, capture_output=True, text=True, timeout=60, check=False,
        )

    return await anyio.to_thread.run_sync(run)


#: Tests that run kubectl skip, with the reason, only where it is not installed (CI has it).
needs_kubectl = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl is not installed (CI installs it)"
)
