"""akka.io/v1 interop: objects written by Akka nodes (whole-object PUTs without annotations)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from trio_lease import Lease, LeaseSettings

from ._helpers import SERVER, emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio
PATH = "/apis/akka.io/v1/namespaces/default/leases/shard-1"
SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)


async def _akka_put(client: httpx.AsyncClient, owner: str) -> dict[str, Any]:
    """What Akka's KubernetesApiImpl does: GET, then PUT name + resourceVersion + spec only."""
    current = (await client.get(PATH)).json()
    body = {
        "apiVersion": "akka.io/v1",
        "kind": "Lease",
        "metadata": {"name": "shard-1", "resourceVersion": current["metadata"]["resourceVersion"]},
        "spec": {"owner": owner, "time": 1_700_000_000_000},
    }
    response = await client.put(PATH, json=body)
    assert response.status_code == 200
    result: dict[str, Any] = response.json()
    return result


async def test_fencing_tokens_keep_increasing_across_akka_grants() -> None:
    """Tokens of trio_lease grants stay strictly increasing around an Akka node's grant."""
    emulator = emulator_with_crd()
    transport = emulator.transport()
    tokens: list[int] = []
    async with make_backend(transport, kind="akka.io/v1") as backend, httpx.AsyncClient(
        transport=transport, base_url=SERVER
    ) as akka:
        lease = Lease("shard-1", "trio-a", backend, SETTINGS)
        for _ in range(2):
            async with lease.held() as grant:
                tokens.append(grant.fencing_token)
        taken = await _akka_put(akka, "akka-system@10.0.0.5:25520")
        assert "annotations" not in taken["metadata"]  # Akka's PUT dropped ours
        record = await backend.get("shard-1")
        assert record is not None
        assert record.holder == "akka-system@10.0.0.5:25520"
        assert record.fencing_token == taken["metadata"]["generation"]
        assert record.fencing_token > tokens[-1]
        await _akka_put(akka, "")  # Akka releases
        async with lease.held() as grant:
            tokens.append(grant.fencing_token)
    assert tokens == sorted(set(tokens))
    assert tokens[-1] > record.fencing_token


async def test_our_objects_read_as_akka_leases() -> None:
    """What we write has spec.owner and spec.time (epoch ms), as Akka reads them."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport(), kind="akka.io/v1") as backend:
        lease = Lease("shard-1", "trio-a", backend, SETTINGS)
        async with lease.held() as grant:
            obj = emulator.get("akka.io/v1", "leases", "shard-1", "default")
            assert obj is not None
            assert obj["spec"]["owner"] == grant.identity
            assert isinstance(obj["spec"]["time"], int)
            assert obj["spec"]["time"] > 1_600_000_000_000
        released = emulator.get("akka.io/v1", "leases", "shard-1", "default")
        assert released is not None
        assert released["spec"]["owner"] == ""
