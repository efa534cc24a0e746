"""EtcdBackend.names(): every lease under the prefix, paged, against real etcd."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import pytest

from tests.etcd_server import EtcdCluster
from trio_lease import LeaseRecord
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.etcd import _backend as etcd_backend_module
from trio_lease.backends.etcd._codec import b64

pytestmark = pytest.mark.anyio


async def test_names_lists_the_prefix_across_pages(
    etcd_server: EtcdCluster,
    etcd_prefix: str,
    etcd_backend_factory: Callable[[], EtcdBackend],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """names() lists every key under the prefix (two per page here), not the keys of another
    prefix, and skips a key that is not UTF-8 text (no lease of ours)."""
    monkeypatch.setattr(etcd_backend_module, "PAGE", 2)
    now = datetime.now(UTC)
    async with etcd_backend_factory() as backend:
        assert await backend.names() == []
        for name in ("a", "b", "c", "d", "e"):
            await backend.create(LeaseRecord(name, "me_1", 15.0, 1, now, now))
        sibling = etcd_prefix.rstrip("/") + "-other/"
        async with EtcdBackend(etcd_server.endpoints, prefix=sibling) as other:
            await other.create(LeaseRecord("elsewhere", "me_1", 15.0, 1, now, now))
        async with httpx.AsyncClient() as client:
            put = {"key": b64(etcd_prefix.encode() + b"\xff\xfe"), "value": b64(b"junk")}
            response = await client.post(f"{etcd_server.endpoints[0]}/v3/kv/put", json=put)
            assert response.status_code == 200
        assert await backend.names() == ["a", "b", "c", "d", "e"]
