"""Fixtures for tests against a real etcd: a three-member cluster, prefixes, backends.

The single member shared by the whole session (``etcd_server``) and ``require_etcd`` live in
tests/conftest.py, so one member serves every etcd test of a run.

Tests here run on real time (etcd's clock is real), on asyncio, uvloop and trio. Without an etcd
binary they skip with the reason printed in the summary, unless ``TRIO_LEASE_REQUIRE_ETCD`` is
set (CI sets it), in which case they fail: CI must never skip them silently.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import REAL_LOOPS, require_etcd
from tests.etcd_server import EtcdCluster, etcd_cluster
from trio_lease.backends.etcd import EtcdBackend


@pytest.fixture(params=REAL_LOOPS)
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    """Real time (a real server does not follow a virtual clock) on asyncio, asyncio on uvloop,
    and trio."""
    backend: str | tuple[str, dict[str, Any]] = request.param
    return backend


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
