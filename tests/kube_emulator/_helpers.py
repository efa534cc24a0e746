"""Shared helpers for the Kubernetes API emulator tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from trio_lease.testing.kube import KubeEmulator

NS = "default"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
AKKA = f"/apis/akka.io/v1/namespaces/{NS}/leases"
LEASE_YML = Path(__file__).resolve().parents[2] / "lease.yml"

JSON = dict[str, Any]


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


async def create(http: httpx.AsyncClient, name: str, **spec: Any) -> JSON:
    """POST a Lease and return the created object (asserting 201)."""
    response = await http.post(LEASES, json=lease(name, **spec))
    assert response.status_code == 201, response.text
    created: JSON = response.json()
    return created
