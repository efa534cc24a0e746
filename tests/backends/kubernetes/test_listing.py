"""KubernetesBackend.names() and foreign_names(): every Lease of the namespace, paged."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from trio_lease import LeaseRecord
from trio_lease.backends.kubernetes import _listing
from trio_lease.testing.kube import KubeEmulator

from ._helpers import make_backend

pytestmark = pytest.mark.anyio


def _record(name: str) -> LeaseRecord:
    now = datetime.now(UTC)
    return LeaseRecord(name, "me_1", 15.0, 1, now, now)


async def test_names_lists_every_lease_and_marks_other_programs_leases(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ours by their key (a mapped name by its annotation), another program's by its object
    name and marked foreign, across pages; another namespace's are not listed."""
    monkeypatch.setattr(_listing, "PAGE_SIZE", 1)  # every object on its own page
    emulator = KubeEmulator(namespaces=["default", "other"])
    backend = make_backend(emulator.transport())
    elsewhere = make_backend(emulator.transport(), namespace="other")
    for name in ("job", "Mapped_Key"):
        await backend.create(_record(name))
    await elsewhere.create(_record("not-here"))
    await emulator.transport().handle_async_request(_foreign_lease_request())
    assert await backend.names() == ["Mapped_Key", "job", "kube-scheduler"]
    assert await backend.foreign_names() == ["kube-scheduler"]
    assert (await backend.get("kube-scheduler")) is not None
    pages = [r for r in emulator.requests if r.method == "GET" and r.query.get("limit") == "1"]
    assert sum(1 for r in pages if "continue" in r.query) >= 4  # 3 leases + 3 again, paged


def _foreign_lease_request() -> httpx.Request:
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "kube-scheduler", "namespace": "default"},
        "spec": {"holderIdentity": "scheduler-1", "leaseDurationSeconds": 15},
    }
    return httpx.Request(
        "POST", "https://kube.test/apis/coordination.k8s.io/v1/namespaces/default/leases",
        json=body,
    )
