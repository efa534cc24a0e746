"""The API layer: every request to one namespace of one lease kind, and the objects they bring.

The SPI adapter (:mod:`._backend`), the watch (:mod:`._watch`) and the checker (:mod:`._check`)
talk to the API server only through :class:`KubeApi`; none of them touches the HTTP client.

- **Time-bounded requests.** Every request is bounded by min(request timeout, time left in the
  caller's cancel scope), and that bound is sent to the server as ``?timeout=Ns``. The request
  timeout is the settings' ``lease_operation_timeout`` once the backend learnt it, unless
  ``request_timeout`` was given (:data:`DEFAULT_REQUEST_TIMEOUT` before either).
- **429.** A 429 is retried after ``Retry-After`` only while that fits in the bound (a 429 is a
  request the server did not run, so retrying a write is safe), at most :data:`MAX_RETRIES`
  times a request (client-go's default); past either, it is the error. The wait is at least a
  floor that starts at :data:`MIN_RETRY_WAIT` and doubles with each retry, so a server
  answering ``Retry-After: 0`` cannot make a request repeat every few milliseconds.
- **CA reload.** When TLS verification fails and the CA comes from a file, the pooled client is
  dropped and a fresh one (which reads the file again) retries once: the handshake failed, so
  nothing was sent.
- **Credentials** (token re-reads, exec plugins, one retry after a 401 with a fresh token) are
  the pooled client's (:mod:`._client`, :mod:`._auth`). Every other answer and transport failure
  is mapped by :mod:`._errors`.
- **Streams** (watches, the checker's probes) are opened within the request timeout; the read
  timeout then bounds the whole stream (lean client) or each read (httpx); transport errors
  while reading are mapped too, and the stream is closed on exit.
- **Objects.** Every reply body is parsed with :func:`trio_lease._wire.load_json` (size and
  nesting capped), and an object is accepted in one place, :meth:`KubeApi.read_object`, with the
  checks of :mod:`._models`: the answer to a GET, POST or PUT, a LIST item or a watch event must
  be a ``Lease`` of our kind and apiVersion, named as asked, with a uid and a resourceVersion, or
  the call raises :class:`BackendProtocolError` (for a write: an unknown outcome, which the core
  resolves by reading again). The last object seen per lease is kept in :attr:`KubeApi.objects`
  (:mod:`._cache`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Final

import anyio
import httpx

from ..._exceptions import BackendProtocolError, LeaseError
from ..._http import Answer
from ..._http_errors import HTTPFailure
from ..._lean_http import LeanStream
from ..._wire import JsonObject, Malformed, load_json
from ._cache import ObjectCache
from ._client import ClientLease, acquire_client, read_capped
from ._cluster import ClusterConfig
from ._errors import (
    ApiStatus,
    RequestContext,
    error_for,
    error_from,
    map_transport_error,
    parse_status,
    tls_verification_failed,
)
from ._models import LeaseKind

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "KubeApi"]

#: The request bound before the settings' lease_operation_timeout is known.
DEFAULT_REQUEST_TIMEOUT: Final = 5.0
#: Shortest wait before the first retry of a 429 (the floor doubles with each retry, up to
#: DEFAULT_RETRY_WAIT), and the wait when it gives no usable Retry-After.
MIN_RETRY_WAIT: Final = 0.05
DEFAULT_RETRY_WAIT: Final = 1.0
#: Retries of one request answered 429, as client-go's ``Request.maxRetries`` (rest/request.go;
#: ``withRetry.IsNextRetry`` in rest/with_retry.go stops after that many): 11 requests at most.
MAX_RETRIES: Final = 10
_TRANSPORT_ERRORS = (httpx.HTTPError, HTTPFailure, TimeoutError, OSError)
#: What a stream's read raises: httpx's on an httpx stream, the seam's on a lean one.
_STREAM_ERRORS = (httpx.HTTPError, HTTPFailure)
#: The life of a lean stream opened without a read timeout (httpx's default read timeout).
DEFAULT_STREAM_READ: Final = 60.0
#: A streamed reply: httpx's, or the lean client's.
Streamed = httpx.Response | LeanStream


class KubeApi:
    """Requests to the ``kind`` objects in one namespace of the API server ``config`` names.

    ``transport``: an injected httpx transport (tests: the emulator's). ``request_timeout``: the
    bound of one request (None: :data:`DEFAULT_REQUEST_TIMEOUT` until someone sets it).
    """

    def __init__(
        self,
        config: ClusterConfig,
        kind: LeaseKind,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        request_timeout: float | None = None,
        map_names: bool = True,
    ) -> None:
        self.config: ClusterConfig = config
        self.kind: LeaseKind = kind
        self.namespace: str = config.namespace
        self.transport: httpx.AsyncBaseTransport | None = transport
        self.request_timeout: float | None = request_timeout
        #: The last object seen per lease, and the key → object name mapping.
        self.objects: ObjectCache = ObjectCache(kind, map_names=map_names)
        #: Our reference to the pooled client (None before the first request and after close).
        self.client_lease: ClientLease | None = None
        self._closed = False
        self._contexts: dict[tuple[str, str], RequestContext] = {}
        self._paths: dict[str, str] = {}
        #: Streams go through httpx, which takes the TLS server name per request.
        self._extensions: dict[str, str] = (
            {"sni_hostname": config.tls_server_name} if config.tls_server_name else {}
        )

    @property
    def timeout(self) -> float:
        """The bound of one request, or of opening a stream."""
        return self.request_timeout or DEFAULT_REQUEST_TIMEOUT

    def ctx(self, verb: str, name: str = "") -> RequestContext:
        """What a request does, for its messages (one kept per verb and object: a holder asks
        for its update's at every renewal)."""
        key = (verb, name)
        ctx = self._contexts.get(key)
        if ctx is None:
            ctx = RequestContext(
                verb=verb, kind=self.kind, namespace=self.namespace, name=name,
                server=self.config.server_url,
            )
            if len(self._contexts) >= _CONTEXTS_KEPT:
                self._contexts.clear()
            self._contexts[key] = ctx
        return ctx

    def collection_path(self) -> str:
        return self.kind.collection_path(self.namespace)

    def item_path(self, name: str) -> str:
        """The object's path (one kept per object, as its request contexts: a holder asks
        at every renewal)."""
        path = self._paths.get(name)
        if path is None:
            if len(self._paths) >= _CONTEXTS_KEPT:
                self._paths.clear()
            path = self._paths[name] = self.kind.item_path(self.namespace, name)
        return path

    # -- the client ----------------------------------------------------------------------------

    def _lease(self) -> ClientLease:
        if self._closed:
            raise RuntimeError("this KubernetesBackend is closed")
        if self.client_lease is None:
            self.client_lease = acquire_client(self.config, self.transport)
        return self.client_lease

    def client(self) -> httpx.AsyncClient:
        """The pooled httpx client (taken on first use, in the running event loop)."""
        return self._lease().client

    async def _replace_client(self) -> ClientLease:
        """Drop our pooled client (TLS verification failed) and take a freshly built one."""
        old = self.client_lease
        if old is not None:
            old.evict()
            self.client_lease = None
            await old.release()
        return self._lease()

    async def aclose(self) -> None:
        """Release the pooled client and forget every object; no request after this."""
        self._closed = True
        self.objects.clear()
        lease, self.client_lease = self.client_lease, None
        if lease is not None:
            await lease.release()

    # -- requests ------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        ctx: RequestContext,
        *,
        body: JsonObject | bytes | None = None,
        params: dict[str, str] | None = None,
    ) -> Coroutine[Any, Any, Answer]:
        """One request within the budget; 429s retried after Retry-After while it fits.

        Each attempt is bounded by what is left of the budget, sent to the server as
        ``timeout``, and waits for one of the client's slots (renewals first; no checkpoint
        when one is free). Awaited at once by the caller.
        """
        lease = self._lease()
        now = lease.clock()
        bound = lease.effective_deadline()
        if bound <= now + self.timeout:
            # The caller's own scope ends first (a renewal's bound): it cancels each attempt in
            # time, so a scope of our own would only cost a timer per request, and a coroutine
            # around the attempts one more object for each request waiting for a slot or its
            # reply (what sets off the garbage collector's young collections,
            # tools/benchmarks/README.md).
            return self._attempts(lease, method, path, ctx, body, params, now, bound)
        deadline = now + self.timeout
        attempts = self._attempts(lease, method, path, ctx, body, params, now, deadline)
        return self._bounded(attempts, self.timeout, ctx)

    async def _bounded(
        self, attempts: Coroutine[Any, Any, Answer], left: float, ctx: RequestContext
    ) -> Answer:
        """``attempts`` under a scope of their own that ends ``left`` seconds from now."""
        try:
            with anyio.fail_after(left):
                return await attempts
        except TimeoutError as exc:
            raise map_transport_error(exc, ctx) from None

    async def _attempts(
        self,
        lease: ClientLease,
        method: str,
        path: str,
        ctx: RequestContext,
        body: JsonObject | bytes | None,
        params: dict[str, str] | None,
        now: float,
        deadline: float,
    ) -> Answer:
        """The attempts of :meth:`request` from ``now`` until ``deadline`` (a scope around
        them ends it)."""
        clock = lease.clock
        reloaded_ca = False
        retries = 0
        while True:
            left = max(deadline - now, 0.0)  # -inf when the caller's scope is cancelled
            query = {**params, "timeout": _timeout(left)} if params else _timeouts(left)
            slots = lease.slots
            try:
                if not slots.try_acquire():
                    # Slots.acquire written out: no coroutine of its own while waiting.
                    waiter = slots.join()
                    try:
                        await waiter
                    except BaseException:
                        slots.leave(waiter)
                        raise
                try:
                    response = await lease.send(method, path, query, body)
                finally:
                    slots.release()
            except _TRANSPORT_ERRORS as exc:
                if reloaded_ca or not self._ca_may_have_rotated(exc):
                    raise map_transport_error(exc, ctx) from None
                # The CA file may have been rotated: a fresh client re-reads it. Nothing was
                # sent (the handshake failed), so retrying is safe.
                reloaded_ca = True
                lease = await self._replace_client()
                now = clock()
                continue
            if response.status_code != 429:
                return response
            await _wait_to_retry(parse_status(response), retries, deadline, ctx)
            retries += 1
            now = clock()

    def _ca_may_have_rotated(self, exc: BaseException) -> bool:
        return self.config.ca_file is not None and tls_verification_failed(exc)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        params: dict[str, str],
        ctx: RequestContext,
        *,
        limits: httpx.Timeout | None = None,
    ) -> AsyncIterator[Streamed]:
        """A streamed GET, opened within the request timeout; closed on exit.

        ``limits``: httpx's timeouts for the stream (default: the client's). On the lean
        client (no proxy, no injected transport) its read timeout bounds the whole stream
        instead of each read: one timer per stream, not one per event, and a server that
        keeps a watch open past its ``timeoutSeconds`` (with bookmarks, say) cannot keep it
        forever. Transport errors, while opening or while the caller reads the body, are
        mapped by :mod:`._errors`.
        """
        lease = self._lease()
        if lease.lean:
            async with self._lean_stream(lease, path, params, ctx, limits) as lean:
                yield lean
            return
        client = lease.client
        request = client.build_request(
            "GET",
            path,
            params=params,
            timeout=httpx.USE_CLIENT_DEFAULT if limits is None else limits,
            extensions=dict(self._extensions),
        )
        # Each error is raised after its handler: raised inside, httpx's error (through h11's,
        # the raw bytes of a malformed reply, which may quote our token) would stay on it as
        # its __context__ (trio_lease._http_errors.translate).
        error: LeaseError | None = None
        try:
            with anyio.fail_after(self.timeout):
                response = await client.send(request, stream=True)
        except _TRANSPORT_ERRORS as exc:
            error = map_transport_error(exc, ctx)
        if error is not None:
            raise error from None
        try:
            yield response
        except _STREAM_ERRORS as exc:
            error = map_transport_error(exc, ctx)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await response.aclose()
        if error is not None:
            raise error from None

    @contextlib.asynccontextmanager
    async def _lean_stream(
        self,
        lease: ClientLease,
        path: str,
        params: dict[str, str],
        ctx: RequestContext,
        limits: httpx.Timeout | None,
    ) -> AsyncIterator[LeanStream]:
        try:
            with anyio.fail_after(self.timeout):
                stream = await lease.open_stream(path, params)
        except _TRANSPORT_ERRORS as exc:
            raise map_transport_error(exc, ctx) from None
        assert stream is not None
        life = (limits.read if limits is not None else None) or DEFAULT_STREAM_READ
        try:
            with anyio.move_on_after(life) as scope:
                yield stream
        except _STREAM_ERRORS as exc:
            raise map_transport_error(exc, ctx) from None
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await stream.aclose()
        if scope.cancelled_caught:
            raise map_transport_error(
                httpx.ReadTimeout(f"the stream was still open after {life:g} s"), ctx
            )

    async def failure(self, response: Streamed, ctx: RequestContext) -> ApiStatus:
        """The failure answer of a stream that did not open (its body read, capped)."""
        return parse_status(await read_capped(response, "GET", ctx.target))

    # -- objects -------------------------------------------------------------------------------

    def read_object(
        self, body: object, object_name: str, ctx: RequestContext, *, listed: bool = False
    ) -> JsonObject:
        """``body`` if it is our kind's object ``object_name``, else BackendProtocolError.

        The one place where an object from the server is accepted (replies to GET, POST and
        PUT; LIST items and watch events with ``listed``).
        """
        try:
            return self.kind.check_object(body, object_name, self.namespace, listed=listed)
        except Malformed as exc:
            unknown = "; the outcome is unknown" if ctx.verb in ("create", "update") else ""
            raise BackendProtocolError(
                f"the answer to {ctx.verb} of {ctx.target} is not that {self.kind.kind} "
                f"({self.kind.api_version}): {exc}{unknown}"
            ) from None

    def read_reply(self, response: Answer, object_name: str, ctx: RequestContext) -> JsonObject:
        """The object in a reply to GET, POST or PUT (checked by :meth:`read_object`)."""
        return self.read_object(load_json(response.content, ctx.answer), object_name, ctx)

    async def get_object(self, name: str) -> JsonObject | None:
        """GET the object ``name`` (a quorum read, checked); None if it does not exist."""
        ctx = self.ctx("get", name)
        response = await self.request("GET", self.item_path(name), ctx)
        if response.status_code == 200:
            return self.read_reply(response, name, ctx)
        if response.status_code == 404:
            status = parse_status(response)
            if status.missing_resource or status.missing_namespace:
                raise error_for(status, ctx)
            return None
        raise error_from(response, ctx)


#: How many request contexts a backend keeps (all are dropped when it fills).
_CONTEXTS_KEPT = 65536


def _timeout(left: float) -> str:
    """The server-side ``timeout`` of an attempt with ``left`` seconds: whole seconds, at
    least one."""
    return f"{max(1, math.floor(left))}s"


#: The query of an attempt that has no other parameters, by its whole seconds (a renewal's is
#: one of a few: ``timeout=1s`` … ``timeout=5s``).
_TIMEOUT_QUERIES: dict[str, dict[str, str]] = {}


def _timeouts(left: float) -> dict[str, str]:
    """``{"timeout": _timeout(left)}``, one shared dict per value (callers only read it)."""
    value = _timeout(left)
    query = _TIMEOUT_QUERIES.get(value)
    if query is None:
        query = {"timeout": value}
        if len(_TIMEOUT_QUERIES) < 64:
            _TIMEOUT_QUERIES[value] = query
    return query


async def _wait_to_retry(
    status: ApiStatus, retries: int, deadline: float, ctx: RequestContext
) -> None:
    """Sleep before retry number ``retries + 1`` of a 429, or raise it: after MAX_RETRIES
    retries, or when the wait would end past ``deadline``."""
    wait = _retry_wait(status.retry_after, retries)
    if retries >= MAX_RETRIES or anyio.current_time() + wait >= deadline:
        raise error_for(status, ctx)
    await anyio.sleep(wait)


def _retry_wait(retry_after: float | None, retries: int = 0) -> float:
    """How long to wait before retrying a 429: Retry-After (DEFAULT_RETRY_WAIT without one),
    at least MIN_RETRY_WAIT doubled for each retry already made (up to DEFAULT_RETRY_WAIT).

    ``retry_after`` is finite or None (parse_status sees to it); this is the last guard, so a
    NaN or infinity can never reach a sleep. The caller still refuses any wait that would end
    past the request bound.
    """
    floor = min(MIN_RETRY_WAIT * (1 << min(retries, 32)), DEFAULT_RETRY_WAIT)
    if retry_after is None or not math.isfinite(retry_after):
        return DEFAULT_RETRY_WAIT
    return max(floor, retry_after)
