"""Shared helpers: backends on the in-process emulator, and a request-counting transport."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from trio_lease.backends.kubernetes import ClusterConfig, Credentials, KubernetesBackend
from trio_lease.testing.kube import KubeEmulator

LEASE_YML = Path(__file__).parents[3] / "lease.yml"
SERVER = "https://kube.test"


class HttpxOnly(httpx.AsyncBaseTransport):
    """The emulator's transport without its in-process seam: unary requests go through httpx
    (``trio_lease._http.HttpxUnary``) and so do streams, the path a proxy's requests take."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class CountingTransport(httpx.AsyncBaseTransport):
    """Wraps a transport and records (method, path, query) of every request."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(
            (request.method, request.url.path, dict(request.url.params.multi_items()))
        )
        return await self.inner.handle_async_request(request)

    def methods(self) -> list[str]:
        return [method for method, _, _ in self.requests]


def emulator_with_crd(**kwargs: Any) -> KubeEmulator:
    emulator = KubeEmulator(**kwargs)
    emulator.apply(LEASE_YML.read_text())
    return emulator


def make_backend(
    transport: httpx.AsyncBaseTransport,
    *,
    kind: str = "coordination.k8s.io/v1",
    token: str | None = None,
    token_file: Path | None = None,
    namespace: str = "default",
    **kwargs: Any,
) -> KubernetesBackend:
    config = ClusterConfig(
        server=SERVER,
        namespace=namespace,
        credentials=Credentials(token=token, token_file=token_file),
    )
    return KubernetesBackend(config, lease_kind=kind, transport=transport, **kwargs)
