"""Fixtures for tests against a real etcd: a shared single member and a three-member cluster.

Tests here run on real time (etcd's clock is real), on asyncio and trio. Without an etcd
binary they skip with the reason printed in the summary, unless ``TRIO_LEASE_REQUIRE_ETCD`` is
set (CI sets it), in which case they fail: CI must never skip them silently.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator

import pytest

from tests.etcd_server import MISSING_REASON, EtcdCluster, etcd_binary, etcd_cluster
from trio_lease.backends.etcd import EtcdBackend


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both anyio backends on real time: a real server does not follow a virtual clock."""
    backend: str = request.param
    return backend


def require_etcd() -> None:
    """Skip (or, with TRIO_LEASE_REQUIRE_ETCD set, fail) when there is no etcd binary."""
    if etcd_binary() is None:
        if os.environ.get("TRIO_LEASE_REQUIRE_ETCD"):
            pytest.fail(MISSING_REASON)
        pytest.skip(MISSING_REASON)


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdCluster]:
    """One etcd member for the whole session; tests keep apart by using their own prefix."""
    require_etcd()
    with etcd_cluster(size=1) as cluster:
        yield cluster


@pytest.fixture
def etcd_cluster3() -> Iterator[EtcdCluster]:
    """A fresh three-member cluster per test, for tests that kill members."""
    require_etcd()
    with etcd_cluster(size=3) as cluster:
        yield cluster


@pytest.fixture
def etcd_prefix() -> str:
    """A key prefix no other test uses."""
    return f"test-{secrets.token_hex(4)}/"


@pytest.fixture
def etcd_backend_factory(etcd_server: EtcdCluster, etcd_prefix: str) -> Callable[[], EtcdBackend]:
    """Makes new clients of the shared etcd member, all under this test's own prefix."""
    return lambda: EtcdBackend(etcd_server.endpoints, prefix=etcd_prefix)
