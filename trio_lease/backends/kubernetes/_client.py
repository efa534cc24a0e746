"""The pooled HTTP client per API server, credentials and event loop, and its unary requests.

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

Connection limits (measured in ``tools/benchmarks/``): httpcore hands a free connection to waiting
requests by scanning every queued request against every connection, so when more requests are
in flight than the pool has connections (a thousand leases acquiring or renewing at once), each
completion costs O(queued x connections) and the process spends its CPU in that scan until
renewals time out; and each request checks every pooled connection (``has_expired``: two
system calls each). Each pooled client therefore carries ``MAX_IN_FLIGHT`` slots
(:class:`trio_lease._slots.Slots`: renewals and releases first) that plain requests take before
they reach the HTTP client, so httpcore's own queue stays short
(only long-running watch streams use connections without a slot), and a small pool whose
connections are all kept alive, so bursts do not close and re-open connections.

Unary requests (everything but watch streams) go through one seam (:mod:`trio_lease._http`),
written once above it in :meth:`ClientLease.send`: the same headers and credentials, and one
retry after a 401 with a token read again. Below the seam: the lean HTTP/1.1 client
(:mod:`trio_lease._lean_http`, about a quarter of httpx's CPU per request, which is what limits
how many leases one process holds); httpx (:class:`~trio_lease._http.HttpxUnary`) when a proxy
or an injected transport is configured; or the injected transport's own seam when it carries
one (the in-process emulator's), so unit tests on the emulator run this same request code.
Every seam reads a reply through :class:`~trio_lease._http.CappedBody`: a body over
:data:`MAX_BODY` is a :class:`~trio_lease.BackendProtocolError` after reading one byte more
than the cap, never an unbounded buffer. Watch streams go the same way through
:meth:`ClientLease.open_stream` when the lean client is the seam (same headers, same retry
after a 401), else through httpx (with :class:`KubeAuth`'s flow); their error bodies are read
with :func:`read_capped`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Hashable
from typing import Any
from urllib.parse import urlencode

import anyio.lowlevel
import httpx
from pydantic_core import to_json

from ..._http import Answer, CappedBody, HttpxUnary, Unary, unary_for
from ..._http import read_capped as _read_capped
from ..._lean_http import LeanClient, LeanStream
from ..._loops import current
from ..._slots import Slots
from ..._version import __version__
from ..._wire import MAX_BODY_BYTES, JsonObject
from ._auth import KubeAuth, ssl_context, token_source_for
from ._cluster import ClusterConfig

__all__ = ["USER_AGENT", "ClientLease", "acquire_client", "encode_body", "read_capped"]

USER_AGENT = f"trio-lease/{__version__} (python; httpx)"

#: Request bodies as compact UTF-8 JSON: pydantic-core's encoder (a dependency already), the
#: same bytes as ``json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()`` for
#: what a body holds (strings, integers, finite numbers, lists, objects; a float's exponent is
#: written without padding, ``1e-7`` for ``1e-07``), about a fifth of its cost on a renewal's
#: body (tools/benchmarks/README.md, "The write by layer; bodies by pydantic-core").
_encode_json: Callable[[Any], bytes] = to_json


def encode_body(body: JsonObject) -> bytes:
    """``body`` as the JSON a request sends. A write encodes its body before it waits for a
    slot, so that a renewal waiting holds bytes, which the garbage collector does not track,
    and not the dicts of its body (tools/benchmarks/README.md)."""
    return _encode_json(body)
#: Query strings already encoded, by their parameters: a renewal's is one of a few
#: (``timeout=1s`` … ``timeout=5s``), so encoding it each time cost more than the lookup.
_QUERIES: dict[tuple[tuple[str, str], ...], str] = {}
_QUERIES_KEPT = 1024


def _target(path: str, query: dict[str, str]) -> str:
    """``path`` with ``query`` encoded after it (none: the path alone)."""
    if not query:
        return path
    key = tuple(query.items())
    encoded = _QUERIES.get(key)
    if encoded is None:
        encoded = urlencode(query)
        if len(_QUERIES) >= _QUERIES_KEPT:
            _QUERIES.clear()
        _QUERIES[key] = encoded
    return f"{path}?{encoded}"


#: Requests in flight per pooled client (its slots) and idle connections kept alive. A
#: renewal holds a connection for about a millisecond, so a few connections carry thousands of
#: leases, and every idle pooled connection costs each request system calls in httpcore's
#: ``has_expired`` check (figures: tools/benchmarks/README.md, "HTTP client options").
MAX_IN_FLIGHT = 4
MAX_KEEPALIVE = 4
#: No cap on connections: each waiting contender's watch stream holds one for minutes, and a
#: cap would let enough watchers starve the renewals (requests are capped by the slots).
MAX_CONNECTIONS: int | None = None
#: Unary requests on the lean HTTP/1.1 path (False: all on httpx; the benchmarks compare both).
LEAN = True
#: The largest unary reply body read (read when a client is built; tests lower it).
MAX_BODY = MAX_BODY_BYTES


@dataclasses.dataclass
class _Entry:
    client: httpx.AsyncClient  # watch streams, and unary requests through HttpxUnary
    auth: KubeAuth
    unary: Unary
    users: int
    slots: Slots = dataclasses.field(default_factory=lambda: Slots(MAX_IN_FLIGHT))

    @property
    def lean(self) -> LeanClient | None:
        """The lean client, when it is the seam (tests and the benchmarks read its counters)."""
        return self.unary if isinstance(self.unary, LeanClient) else None


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
    extensions = {"sni_hostname": config.tls_server_name} if config.tls_server_name else {}
    url = config.server_url
    unary: Unary
    if transport is not None:
        client = httpx.AsyncClient(
            base_url=url, auth=auth, headers=headers, timeout=timeout, transport=transport
        )
        unary = unary_for(transport, client, url, max_body=MAX_BODY, extensions=extensions)
        return _Entry(client, auth, unary, 0)
    tls = ssl_context(config) if url.startswith("https:") else None
    client = httpx.AsyncClient(
        base_url=url,
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
    if LEAN and config.proxy_url is None:
        unary = LeanClient(
            url,
            ssl_context=tls,
            tls_hostname=config.tls_server_name,
            connect_timeout=timeout.connect or 30.0,
            max_idle=MAX_KEEPALIVE,
            max_body=MAX_BODY,
        )
    else:
        unary = HttpxUnary(client, url, max_body=MAX_BODY, extensions=extensions)
    return _Entry(client, auth, unary, 0)


class ClientLease:
    """A backend's reference to a pooled client; :meth:`release` once when done."""

    key: Hashable
    #: The httpx client: watch streams (unary requests go through :meth:`send`).
    client: httpx.AsyncClient
    #: Take one before each request that is not a watch stream (see the module docstring).
    slots: Slots
    #: The loop's clock (:func:`anyio.current_time`) and the caller's effective deadline
    #: (:func:`anyio.current_effective_deadline`), from the seam of the loop the reference was
    #: taken in: each request reads both, and anyio's functions look the loop up every time.
    clock: Callable[[], float]
    effective_deadline: Callable[[], float]

    def __init__(self, key: Hashable, entry: _Entry) -> None:
        self.key = key
        self._entry = entry
        self.client = entry.client
        self.slots = entry.slots
        self._released = False
        kit = current()
        self.clock = kit.clock()
        self.effective_deadline = kit.effective_deadline

    async def send(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        body: Any,
        extensions: dict[str, Any] | None = None,
    ) -> Answer:
        """One unary request through the seam (the caller holds a slot and bounds the time).

        ``body`` goes as JSON (bytes: encoded already, see :func:`encode_body`). After a 401
        the token is read again and the request sent once more: the server refused it before
        running it, so even a write may be repeated.
        ``extensions`` is not used: the seam takes the TLS server name from the config.
        """
        del extensions
        target = _target(path, query)
        data = None
        auth = self._entry.auth
        ready = auth.headers_now()
        headers = [*_HEADERS, *(await auth.headers() if ready is None else ready)]
        if body is not None:
            data = body if type(body) is bytes else _encode_json(body)
            headers.append(("Content-Type", "application/json"))
        unary = self._entry.unary
        reply = await unary.request(method, target, headers=headers, body=data)
        if reply.status_code == 401:  # only a 401 is retried (no coroutine made for others)
            retry = await auth.headers_after(401, headers)
            if retry is not None:
                reply = await unary.request(method, target, headers=retry, body=data)
        return reply

    @property
    def lean(self) -> bool:
        """True when the lean client is the seam: streams go through :meth:`open_stream`."""
        return self._entry.lean is not None

    async def open_stream(self, path: str, query: dict[str, str]) -> LeanStream | None:
        """A streamed GET on the lean client (None when httpx is the seam); close it.

        As :meth:`send`: the same headers, and after a 401 the token is read again and the
        request sent once more. The caller bounds the time.
        """
        lean = self._entry.lean
        if lean is None:
            return None
        target = _target(path, query)
        auth = self._entry.auth
        headers = [*_HEADERS, *await auth.headers()]
        stream = await lean.open_stream("GET", target, headers=headers)
        retry = await auth.headers_after(stream.status_code, headers)
        if retry is not None:
            await stream.aclose()
            stream = await lean.open_stream("GET", target, headers=retry)
        return stream

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
                await entry.unary.aclose()
                await entry.client.aclose()


async def read_capped(
    response: httpx.Response | LeanStream, method: str, target: str
) -> Answer:
    """Read a streamed ``response`` and close it; over MAX_BODY_BYTES is BackendProtocolError.

    ``method`` and ``target`` (a path or an object's description, never server text) name the
    request in the message.
    """
    if isinstance(response, LeanStream):
        return await response.read(MAX_BODY_BYTES)
    return await _read_capped(
        response, CappedBody(MAX_BODY_BYTES, f"the answer to {method} {target}")
    )


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
