"""One shared :class:`httpx.AsyncClient` per API server, credentials and event loop.

Decision: a process-wide pool of clients, reference-counted, keyed by (server URL, TLS
settings, credential identity, proxy, injected transport, **running event loop**). Every
:class:`KubernetesBackend` on the same server and credentials in the same event loop shares
one client, so one connection pool serves all leases; the client closes when the last backend
using it is closed.

Why the event loop is part of the key: an ``httpx.AsyncClient`` holds connections bound to the
loop that opened them (an asyncio loop, or a trio run). A program that runs ``anyio.run`` twice,
or a test suite that alternates asyncio and trio, must not reuse a client across loops. The key
uses ``anyio.lowlevel.current_token().native_token`` (the asyncio loop or the ``TrioToken``).
A backend therefore binds to the loop of its first request; close it (``aclose()`` or
``async with``) in that same loop. A backend that is never closed leaks its reference (and the
client), like any unclosed client.

When TLS verification fails and the CA comes from a file, the backend evicts its client from
the pool and takes a freshly built one, which reads the (possibly rotated) CA file again; the
old client closes when its last user lets go.

The credential identity is a hash of the credential (never the credential itself), so two
configurations with different tokens never share a client.

Connection limits (measured in ``benchmarks/``): httpcore hands a free connection to waiting
requests by scanning every queued request against every connection, so when more requests are
in flight than the pool has connections (a thousand leases acquiring or renewing at once), each
completion costs O(queued x connections) and the process spends its CPU in that scan until
renewals time out; and each request checks every pooled connection (``has_expired``: two
system calls each). Each pooled client therefore carries ``MAX_IN_FLIGHT`` slots
(:class:`trio_lease._slots.Slots`: renewals and releases first) that plain requests take before
they reach the HTTP client, so httpcore's own queue stays short
(only long-running watch streams use connections without a slot), and a small pool whose
connections are all kept alive, so bursts do not close and re-open connections.

Unary requests (everything but watch streams) take the lean HTTP/1.1 path
(:mod:`trio_lease._http`): about a quarter of httpx's CPU per request, which is what limits how
many leases one process holds. httpx still carries watch streams, and every request when a proxy
or an injected transport (tests) is configured. Both paths send the same headers and
credentials and retry once after a 401 with a refreshed token. On the httpx path the body is
read with :func:`read_capped`: a reply over :data:`~trio_lease._wire.MAX_BODY_BYTES` is a
:class:`~trio_lease.BackendProtocolError` after reading one byte more than the cap, never an
unbounded buffer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Hashable
from typing import Any
from urllib.parse import urlencode

import anyio.lowlevel
import httpx

from ... import __version__
from ..._exceptions import BackendProtocolError
from ..._http import Answer, Headers, LeanClient, Reply
from ..._slots import Slots
from ..._wire import MAX_BODY_BYTES
from ._auth import KubeAuth, ssl_context, token_source_for
from ._config import ClusterConfig

__all__ = ["USER_AGENT", "ClientLease", "acquire_client", "read_capped"]

USER_AGENT = f"trio-lease/{__version__} (python; httpx)"


#: Requests in flight per pooled client (its slots) and idle connections kept alive. A
#: renewal holds a connection for about a millisecond, so a few connections carry thousands of
#: leases, and every idle pooled connection costs each request system calls in httpcore's
#: ``has_expired`` check. The figures behind 4 are in benchmarks/README.md ("pool").
MAX_IN_FLIGHT = 4
MAX_KEEPALIVE = 4
#: No cap on connections: each waiting contender's watch stream holds one for minutes, and a
#: cap would let enough watchers starve the renewals (requests are capped by the slots).
MAX_CONNECTIONS: int | None = None
#: Unary requests on the lean HTTP/1.1 path (False: all on httpx; the benchmarks compare both).
LEAN = True


@dataclasses.dataclass
class _Entry:
    client: httpx.AsyncClient
    auth: KubeAuth
    lean: LeanClient | None
    users: int
    slots: Slots = dataclasses.field(default_factory=lambda: Slots(MAX_IN_FLIGHT))


_POOL: dict[Hashable, _Entry] = {}


def _fingerprint(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(repr(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def config_key(config: ClusterConfig, transport: httpx.AsyncBaseTransport | None) -> Hashable:
    """The pool key of ``config`` without the loop: equal configs share a client."""
    creds = config.credentials
    return (
        config.server_url,
        config.insecure_skip_tls_verify,
        config.tls_server_name,
        config.proxy_url,
        str(config.ca_file),
        _fingerprint(config.ca_data),
        _fingerprint(
            creds.token,
            creds.token_file,
            creds.token_refresh,
            creds.client_cert_file,
            creds.client_key_file,
            creds.client_cert_data,
            creds.client_key_data,
            creds.exec,
            creds.impersonate_user,
            creds.impersonate_groups,
        ),
        id(transport) if transport is not None else None,
    )


_HEADERS = (("Accept", "application/json"), ("User-Agent", USER_AGENT))


def _build(config: ClusterConfig, transport: httpx.AsyncBaseTransport | None) -> _Entry:
    auth = KubeAuth(token_source_for(config), config.credentials)
    headers = dict(_HEADERS)
    # Requests are bounded by a cancel scope per call; this is only a backstop.
    timeout = httpx.Timeout(60.0, connect=30.0)
    if transport is not None:
        client = httpx.AsyncClient(
            base_url=config.server_url, auth=auth, headers=headers, timeout=timeout,
            transport=transport,
        )
        return _Entry(client, auth, None, 0)
    tls = ssl_context(config) if config.server_url.startswith("https:") else None
    client = httpx.AsyncClient(
        base_url=config.server_url,
        auth=auth,
        headers=headers,
        timeout=timeout,
        verify=tls if tls is not None else True,
        proxy=config.proxy_url,
        trust_env=False,
        limits=httpx.Limits(
            max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_KEEPALIVE
        ),
    )
    lean = None
    if LEAN and config.proxy_url is None:
        lean = LeanClient(
            config.server_url,
            ssl_context=tls,
            tls_hostname=config.tls_server_name,
            headers=_HEADERS,
            connect_timeout=timeout.connect or 30.0,
            max_idle=MAX_KEEPALIVE,
        )
    return _Entry(client, auth, lean, 0)


class ClientLease:
    """A backend's reference to a pooled client; :meth:`release` once when done."""

    def __init__(self, key: Hashable, entry: _Entry) -> None:
        self.key = key
        self._entry = entry
        self.client = entry.client
        #: Take one before each request that is not a watch stream (see the module docstring).
        self.slots = entry.slots
        self._released = False

    async def send(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        body: Any,
        extensions: dict[str, Any],
    ) -> Answer:
        """One unary request (the caller holds a slot): the lean path when there is one."""
        lean = self._entry.lean
        if lean is None:
            request = self.client.build_request(
                method, path, params=query, json=body, extensions=extensions
            )
            response = await self.client.send(request, stream=True)
            return await read_capped(response, method, path)
        target = f"{path}?{urlencode(query)}" if query else path
        data = None
        headers = await self._entry.auth.headers()
        if body is not None:
            data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
            headers.append(("Content-Type", "application/json"))
        reply = await lean.request(method, target, headers=headers, body=data)
        if reply.status_code == 401 and self._entry.auth.source is not None:
            # As KubeAuth's flow does on the httpx path: read the token again, retry once.
            fresh = await self._entry.auth.refreshed_authorization()
            headers = [item for item in headers if item[0] != "Authorization"]
            if fresh is not None:
                headers.append(("Authorization", fresh))
            reply = await lean.request(method, target, headers=headers, body=data)
        return reply

    def evict(self) -> None:
        """Stop handing this client to new users (its CA file changed); users keep theirs."""
        if _POOL.get(self.key) is self._entry:
            del _POOL[self.key]

    async def release(self) -> None:
        if self._released:
            return
        self._released = True
        entry = self._entry
        entry.users -= 1
        if entry.users <= 0:
            if _POOL.get(self.key) is entry:
                del _POOL[self.key]
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                if entry.lean is not None:
                    await entry.lean.aclose()
                await entry.client.aclose()


async def read_capped(response: httpx.Response, method: str, target: str) -> Answer:
    """Read a streamed ``response`` and close it; over MAX_BODY_BYTES is BackendProtocolError.

    ``method`` and ``target`` (a path or an object's description, never server text) name the
    request in the message.
    """
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise BackendProtocolError(
                    f"the answer to {method} {target} is over {MAX_BODY_BYTES:,} bytes; the "
                    "outcome is unknown"
                )
            chunks.append(chunk)
    finally:
        await response.aclose()
    return Reply(response.status_code, Headers(response.headers.raw), b"".join(chunks))


def acquire_client(
    config: ClusterConfig, transport: httpx.AsyncBaseTransport | None = None
) -> ClientLease:
    """Take a reference to the shared client for ``config`` in the running event loop."""
    loop = anyio.lowlevel.current_token().native_token
    key = (config_key(config, transport), id(loop), loop)
    entry = _POOL.get(key)
    if entry is None or entry.client.is_closed:
        entry = _POOL[key] = _build(config, transport)
    entry.users += 1
    return ClientLease(key, entry)


def pool_size() -> int:
    """How many clients are open (for tests)."""
    return len(_POOL)
