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
system calls each). Each pooled client therefore carries a semaphore of ``MAX_IN_FLIGHT``
slots that plain requests take before they reach httpx, so httpcore's own queue stays short
(only long-running watch streams use connections without a slot), and a small pool whose
connections are all kept alive, so bursts do not close and re-open connections.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Hashable

import anyio.lowlevel
import httpx

from ... import __version__
from ._auth import KubeAuth, ssl_context, token_source_for
from ._config import ClusterConfig

__all__ = ["USER_AGENT", "ClientLease", "acquire_client"]

USER_AGENT = f"trio-lease/{__version__} (python; httpx)"


#: Requests in flight per pooled client (a semaphore) and idle connections kept alive. A
#: renewal holds a connection for about a millisecond, so a few connections carry thousands of
#: leases, and every idle pooled connection costs each request system calls in httpcore's
#: ``has_expired`` check. The figures behind 4 are in benchmarks/README.md ("pool").
MAX_IN_FLIGHT = 4
MAX_KEEPALIVE = 4
#: No cap on connections: each waiting contender's watch stream holds one for minutes, and a
#: cap would let enough watchers starve the renewals (requests are capped by the semaphore).
MAX_CONNECTIONS: int | None = None


@dataclasses.dataclass
class _Entry:
    client: httpx.AsyncClient
    users: int
    slots: anyio.Semaphore = dataclasses.field(
        default_factory=lambda: anyio.Semaphore(MAX_IN_FLIGHT)
    )


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


def _build(config: ClusterConfig, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
    auth = KubeAuth(token_source_for(config), config.credentials)
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    # Requests are bounded by a cancel scope per call; this is only a backstop.
    timeout = httpx.Timeout(60.0, connect=30.0)
    if transport is not None:
        return httpx.AsyncClient(
            base_url=config.server_url, auth=auth, headers=headers, timeout=timeout,
            transport=transport,
        )
    return httpx.AsyncClient(
        base_url=config.server_url,
        auth=auth,
        headers=headers,
        timeout=timeout,
        verify=ssl_context(config) if config.server_url.startswith("https:") else True,
        proxy=config.proxy_url,
        trust_env=False,
        limits=httpx.Limits(
            max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_KEEPALIVE
        ),
    )


class ClientLease:
    """A backend's reference to a pooled client; :meth:`release` once when done."""

    def __init__(self, key: Hashable, entry: _Entry) -> None:
        self.key = key
        self._entry = entry
        self.client = entry.client
        #: Take one before each request that is not a watch stream (see the module docstring).
        self.slots = entry.slots
        self._released = False

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
                await entry.client.aclose()


def acquire_client(
    config: ClusterConfig, transport: httpx.AsyncBaseTransport | None = None
) -> ClientLease:
    """Take a reference to the shared client for ``config`` in the running event loop."""
    loop = anyio.lowlevel.current_token().native_token
    key = (config_key(config, transport), id(loop), loop)
    entry = _POOL.get(key)
    if entry is None or entry.client.is_closed:
        entry = _POOL[key] = _Entry(_build(config, transport), 0)
    entry.users += 1
    return ClientLease(key, entry)


def pool_size() -> int:
    """How many clients are open (for tests)."""
    return len(_POOL)
