"""A small client for etcd's v3 JSON gateway (``POST /v3/...``).

It knows endpoints, failover, authentication and TLS, and nothing about leases. Unary calls
go through the request seam (:mod:`trio_lease._http`), one per endpoint: the lean HTTP/1.1
client, or, when a transport is injected (tests), that transport's seam or httpx on it; the
time bound, the authentication and the retry after a rejected token are written once, here,
above it. Watch streams go through httpx.

Replies: a successful answer's bytes (a unary body, one line of a watch stream) go to
:func:`._replies.read_answer` with the reader the caller chose, so every reply is checked in one
place; error answers go to :mod:`._errors`. A unary body is capped by the seam while it is read,
a watch line at :data:`MAX_WATCH_LINE` bytes, an error body at ``MAX_ERROR_BODY``. What a
failed exchange means (not sent, unknown outcome, untrusted) is :mod:`._failures`. The password
and the auth token are remembered as they are sent, so that :mod:`._errors` cuts them out of
any server text it quotes (:mod:`trio_lease._secrets`).

Failover: requests go to the current endpoint. A connection that could not be *established*
means the request was never sent, so the client moves to the next endpoint and sends it there,
even for a write. Any other failure (a timeout or reset after sending, a 5xx) makes the client
move on for the *next* call and raises :class:`BackendUnavailable`; for a write the outcome is
then unknown, and it is the core, not this client, that decides what to do (it re-reads).
Reads are idempotent, so a read also tries the remaining endpoints before giving up. An answer
that cannot be read (:class:`BackendProtocolError`) also moves the client on. A server
certificate that fails verification is not transient: once no endpoint answered, the call
raises :class:`LeaseConfigError` saying to check ``ca-file`` (retrying cannot fix it).

Every request carries ``Grpc-Metadata-hasleader: true`` (etcd's "require leader": a member that
has lost its leader, e.g. on the minority side of a partition, fails at once with
``no leader`` instead of waiting, and cancels watches) and, when the caller runs under an anyio
deadline, ``Grpc-Timeout`` with the time left, so the server gives up when the caller does.
"""

from __future__ import annotations

import contextlib
import json
import math
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

import anyio
import httpx

from ..._connect import connect_problem
from ..._exceptions import BackendProtocolError, BackendUnavailable, LeaseError
from ..._http import Unary, unary_for
from ..._http_errors import UndecodableBody
from ..._lean_http import LeanClient, LeanStream
from ..._secrets import remember_sent
from ..._slots import Slots
from ..._wire import JsonObject
from ._codec import b64
from ._errors import MAX_ERROR_BODY, error_body, error_from_status, is_invalid_token
from ._failures import (
    CONNECT_FAILURES,
    SEND_FAILURES,
    after_sending,
    untrusted_certificate,
    untrusted_error,
)
from ._replies import read_answer, read_token
from ._stream import MAX_WATCH_LINE, Lines, read_capped

__all__ = ["MAX_WATCH_LINE", "EtcdClient"]

T = TypeVar("T")
API = "/v3"
#: A request's JSON body, or the function that makes it once the request has a slot.
Body = dict[str, Any] | Callable[[], dict[str, Any]]


def _where(path: str, subject: str | Callable[[], str], endpoint: str) -> str:
    """The request as messages name it (``kv/txn for lease 'x' at http://...``)."""
    return f"{path}{subject() if callable(subject) else subject} at {endpoint}"


#: Unary requests in flight per client. Without a cap, a burst of acquisitions (1,000 leases
#: at 100 per second) queued inside httpcore, whose pool matching is O(queued x connections),
#: and every lease was lost (tools/benchmarks/README.md); the Kubernetes client has the same cap.
MAX_IN_FLIGHT = 4


class EtcdClient:
    """Unary JSON calls and streaming watches against a list of etcd endpoints."""

    #: The members' URLs, in the order failover tries them.
    endpoints: list[str]

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        prefix: str,
        username: str | None,
        password: str | None,
        ssl_context: ssl.SSLContext | None,
        connect_timeout: float,
        request_timeout: float,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._prefix = prefix  # only for error messages
        self._username = username
        self._password = password
        self._token: str | None = None
        self._current = 0
        self._connect_timeout = connect_timeout
        self._request_timeout = request_timeout
        self._http = httpx.AsyncClient(
            transport=transport,
            verify=ssl_context if ssl_context is not None else True,
            timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
            # Watches hold a connection each, so connections are not capped; unary calls are,
            # by the slots below.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=MAX_IN_FLIGHT),
        )
        self._slots = Slots(MAX_IN_FLIGHT)
        self._ssl = ssl_context
        self._transport = transport
        #: The unary seam per endpoint, made on first use; None once closed.
        self._unary: dict[str, Unary] | None = {}

    async def aclose(self) -> None:
        """Close the connection pools."""
        unary, self._unary = self._unary, None
        for seam in (unary or {}).values():
            await seam.aclose()
        await self._http.aclose()

    def _seam(self, endpoint: str) -> Unary:
        if self._unary is None:
            raise RuntimeError("this etcd client is closed")
        seam = self._unary.get(endpoint)
        if seam is None:
            if self._transport is not None:
                seam = unary_for(self._transport, self._http, endpoint)
            else:
                context = self._ssl
                if context is None and endpoint.startswith("https:"):
                    context = ssl.create_default_context()  # httpx's default: the system's CAs
                seam = LeanClient(
                    endpoint,
                    ssl_context=context,
                    connect_timeout=self._connect_timeout,
                    max_idle=MAX_IN_FLIGHT,
                )
            self._unary[endpoint] = seam
        return seam

    async def _send(
        self,
        endpoint: str,
        path: str,
        body: dict[str, Any],
        headers: dict[str, str],
        bounds: httpx.Timeout,
    ) -> tuple[int, bytes]:
        """One POST of ``body`` as JSON to ``endpoint``: the status and the raw answer."""
        connect, read = bounds.connect or self._connect_timeout, bounds.read
        with anyio.fail_after(connect + (read if read is not None else self._request_timeout)):
            reply = await self._seam(endpoint).request(
                "POST",
                f"{API}/{path}",
                headers=[*headers.items(), ("Content-Type", "application/json")],
                body=json.dumps(body, separators=(",", ":")).encode(),
                connect_timeout=connect,
            )
        return reply.status_code, reply.content

    # -- endpoints -------------------------------------------------------------------------

    def _move_on_from(self, endpoint: str) -> None:
        """Make the next call use the endpoint after ``endpoint`` (if no one moved already)."""
        if self.endpoints[self._current] == endpoint:
            self._current = (self._current + 1) % len(self.endpoints)

    def _timeouts(self, *, stream: bool) -> tuple[httpx.Timeout, dict[str, str]]:
        """The httpx timeout and gateway headers for a request sent now.

        Both are bounded by the caller's anyio deadline (the core's cancel scope), so neither
        the client nor the server keeps working on a request the caller has given up on.
        """
        left = anyio.current_effective_deadline() - anyio.current_time()
        read = None if stream else min(self._request_timeout, max(left, 0.001))
        headers = {"Grpc-Metadata-hasleader": "true"}
        if not stream and math.isfinite(left):
            headers["Grpc-Timeout"] = f"{max(1, int(left * 1000))}m"
        connect = min(self._connect_timeout, max(left, 0.001))
        return httpx.Timeout(read, connect=connect), headers

    # -- unary calls -----------------------------------------------------------------------

    async def call(
        self,
        path: str,
        body: Body,
        *,
        write: bool,
        read: Callable[[JsonObject], T],
        subject: str | Callable[[], str] = "",
    ) -> T:
        """POST ``body`` to ``/v3/<path>``; the answer read by ``read``, or a mapped error.

        ``write`` says whether the request changes state: a write is sent at most once past
        the connection stage (never retried on an unknown outcome). ``read`` turns the answer
        object into a checked value (see :mod:`._replies`); ``subject`` (``" for lease 'x'"``)
        goes into messages. ``body`` may be a function, called each time the request has taken
        a request slot, just before it is sent (a batch closes then, :mod:`._batch`); it must
        return the same body every time. ``subject`` may be a function, called once it has.
        """
        reauthenticated = False
        failures: list[str] = []
        untrusted: list[str] = []
        reason = ""
        attempts = 0
        while attempts < len(self.endpoints):
            endpoint = self.endpoints[self._current]
            try:
                status, content = await self._post(endpoint, path, body)
            except SEND_FAILURES as exc:
                where = _where(path, subject, endpoint)
                self._move_on_from(endpoint)
                rejected = untrusted_certificate(exc)
                if rejected is None and not isinstance(exc, CONNECT_FAILURES):
                    raise after_sending(exc, where, write=write) from None
                # Not connected, so nothing was sent: the next endpoint may take it, even a write.
                if rejected is not None:
                    untrusted.append(endpoint)
                    reason = rejected
                refused = connect_problem(exc, endpoint)
                failures.append(f"{endpoint}: {refused or type(exc).__name__}")
                attempts += 1
                continue
            except BackendProtocolError:  # an answer that cannot be read (over the body cap)
                self._move_on_from(endpoint)
                raise
            where = _where(path, subject, endpoint)
            if status == 200:
                try:
                    return read_answer(content, where, read, write=write)
                except BackendProtocolError:
                    self._move_on_from(endpoint)
                    raise
            answer = error_body(content)
            if (
                self._username is not None
                and not reauthenticated
                and is_invalid_token(status, answer)
            ):
                # Rejected before it reached raft, so sending it again is not a retried write.
                self._token = None
                reauthenticated = True
                continue
            error = error_from_status(
                status,
                answer,
                operation=path,
                endpoint=endpoint,
                prefix=self._prefix,
                content=content,
            )
            if isinstance(error, BackendUnavailable):
                self._move_on_from(endpoint)
                if not write:
                    failures.append(f"{endpoint}: {error}")
                    attempts += 1
                    continue
            raise error
        if untrusted:
            raise untrusted_error(untrusted, reason)
        raise BackendUnavailable(
            f"etcd {path}: no endpoint answered ({'; '.join(failures)}); check that etcd runs "
            f"and has quorum"
        )

    async def _post(self, endpoint: str, path: str, body: Body) -> tuple[int, bytes]:
        """One POST to ``endpoint``, authenticating there first if needed."""
        slots = self._slots
        await slots.acquire()  # renewals first; bounded by the caller's deadline
        try:
            payload = body() if callable(body) else body
            bounds, headers = self._timeouts(stream=False)
            await self._authorize(endpoint, headers, bounds)
            return await self._send(endpoint, path, payload, headers, bounds)
        finally:
            slots.release()

    async def _authorize(
        self, endpoint: str, headers: dict[str, str], bounds: httpx.Timeout
    ) -> None:
        """Add the auth token to ``headers``, fetching one with username/password if needed."""
        if self._username is None:
            return
        if self._token is None:
            remember_sent(self._password or "")  # cut out of any server text from now on
            status, content = await self._send(
                endpoint,
                "auth/authenticate",
                {"name": self._username, "password": self._password or ""},
                headers,
                bounds,
            )
            if status != 200:
                raise error_from_status(
                    status,
                    error_body(content),
                    operation="auth/authenticate",
                    endpoint=endpoint,
                    prefix=self._prefix,
                    content=content,
                )
            where = f"auth/authenticate at {endpoint}"
            self._token = read_answer(content, where, read_token, write=False)
        remember_sent(self._token)  # on every use: one in use stays among the kept ones
        headers["Authorization"] = self._token  # etcd wants the bare token, no "Bearer"

    # -- watch -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _stream(
        self, endpoint: str, body: dict[str, Any], headers: dict[str, str], bounds: httpx.Timeout
    ) -> AsyncIterator[httpx.Response | LeanStream]:
        """Open the watch stream: on the lean client's own connection (the reader unary calls
        use), or through httpx when a transport was injected. Both raise httpx's errors."""
        seam = self._seam(endpoint)
        if not isinstance(seam, LeanClient):
            async with self._http.stream(
                "POST", f"{endpoint}{API}/watch", json=body, headers=headers, timeout=bounds
            ) as response:
                yield response
            return
        stream = await seam.open_stream(
            "POST",
            f"{API}/watch",
            headers=[*headers.items(), ("Content-Type", "application/json")],
            body=json.dumps(body, separators=(",", ":")).encode(),
            connect_timeout=bounds.connect,
        )
        try:
            yield stream
        finally:
            await stream.aclose()  # not shielded: an abort, no wait

    async def watch(  # noqa: ASYNC900  internal; read by one task of ours
        self,
        key: bytes,
        start_revision: int,
        *,
        read: Callable[[JsonObject], T],
        subject: str = "",
        range_end: bytes | None = None,
        skip: Callable[[bytes], T | None] | None = None,
    ) -> AsyncGenerator[T, None]:
        """Yield each line of a watch on ``key`` from ``start_revision`` on, read by ``read``.

        ``range_end``: watch every key from ``key`` up to (not including) it instead, with
        progress notifications (a prefix watch, :mod:`._feed`). ``skip``: given each raw line
        first; what it returns (not None) is yielded instead of the decoded line.

        Ends (returns) when the server closes the stream; raises :class:`BackendUnavailable`
        when it cannot connect or the stream fails, :class:`BackendProtocolError` for a line
        that cannot be read, and the mapped error for an error line. The caller reconnects; a
        watch is a read, so reconnecting is always safe.
        """
        endpoint = self.endpoints[self._current]
        where = f"watch{subject} at {endpoint}"
        bounds, headers = self._timeouts(stream=True)
        request: dict[str, Any] = {"key": b64(key), "start_revision": str(start_revision)}
        if range_end is not None:
            request |= {"range_end": b64(range_end), "progress_notify": True}
        body = {"create_request": request}

        def read_line(message: JsonObject) -> T:
            if "error" in message:
                raise error_from_status(
                    200, message, operation="watch", endpoint=endpoint, prefix=self._prefix
                )
            return read(message)

        failure: LeaseError
        try:
            await self._authorize(endpoint, headers, bounds)
            async with self._stream(endpoint, body, headers, bounds) as response:
                if response.status_code != 200:
                    raw = await read_capped(response, MAX_ERROR_BODY)
                    answer = error_body(raw)
                    if is_invalid_token(response.status_code, answer):
                        self._token = None
                    raise error_from_status(
                        response.status_code,
                        answer,
                        operation="watch",
                        endpoint=endpoint,
                        prefix=self._prefix,
                        content=raw,
                    )
                async with contextlib.aclosing(Lines(response, where)) as lines:
                    async for line in lines:
                        skipped = None if skip is None else skip(line)
                        if skipped is not None:
                            yield skipped  # noqa: ASYNC119  an HTTP stream, no cancel scope
                        elif line.strip():
                            yield read_answer(line, where, read_line, write=False)  # noqa: ASYNC119  an HTTP stream, no cancel scope
        except SEND_FAILURES as exc:
            self._move_on_from(endpoint)
            rejected = untrusted_certificate(exc)
            if rejected is not None:
                failure = untrusted_error([endpoint], rejected)
            elif isinstance(exc, httpx.DecodingError | UndecodableBody):
                failure = after_sending(exc, where, write=False)
            else:
                failure = BackendUnavailable(f"etcd {where} failed ({type(exc).__name__})")
        except BackendUnavailable:
            self._move_on_from(endpoint)
            raise
        else:
            return
        # Raised here, outside the handler, so that httpx's error is not even its __context__:
        # h11's parse errors quote the reply's bytes, which may quote our token.
        raise failure from None
