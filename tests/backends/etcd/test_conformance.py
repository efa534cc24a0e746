"""The etcd backend follows the SPI against real etcd: a three-member cluster, and a section.

One member's clients pass check_backend in tests/backends/test_conformance.py (every backend).
"""

from __future__ import annotations

import anyio
import pytest

from tests.etcd_server import EtcdCluster
from trio_lease import LeaseProvider
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.testing import check_backend

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_etcd_backend_conforms_on_three_members(
    etcd_cluster3: EtcdCluster, etcd_prefix: str
) -> None:
    """Clients each talking to a different member of a three-member cluster pass check_backend."""
    endpoints = etcd_cluster3.endpoints
    turn = iter(range(1000))

    def factory() -> EtcdBackend:
        i = next(turn) % len(endpoints)
        return EtcdBackend(endpoints[i:] + endpoints[:i], prefix=etcd_prefix)

    await check_backend(factory)


async def test_provider_loads_an_etcd_section(etcd_server: EtcdCluster, etcd_prefix: str) -> None:
    """A TOML section with lease-class = "etcd" and kebab-case keys yields a working lease."""
    config = {
        "leases": {
            "jobs": {
                "lease-class": "etcd",
                "heartbeat-timeout": "4s",
                "heartbeat-interval": "500ms",
                "lease-operation-timeout": "300ms",
                "endpoints": etcd_server.endpoints,
                "prefix": etcd_prefix,
                "request-timeout": 5,
            }
        }
    }
    async with LeaseProvider(config) as provider:
        lease = provider.get_lease("nightly", "leases.jobs", "worker-1")
        assert isinstance(lease.backend, EtcdBackend)
        with anyio.fail_after(20):
            assert await lease.acquire()
            assert lease.check_lease()
            assert await lease.release()
        with anyio.fail_after(20):
            async with lease.held() as grant:
                assert grant.fencing_token == 2
