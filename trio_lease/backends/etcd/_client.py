"""A small client for etcd's v3 JSON gateway (``POST /v3/...``).

It knows endpoints, failover, authentication and TLS, and nothing about leases. Unary calls
take the lean HTTP/1.1 path (:mod:`trio_lease._http`, one keep-alive client per endpoint);
watch streams, and every call when a transport is injected (tests), go through httpx.

Failover: requests go to the current endpoint. A connection that could not be *established*
means the request was never sent, so the client moves to the next endpoint and sends it there,
even for a write. Any other failure (a timeout or reset after sending, a 5xx) makes the client
move on for the *next* call and raises :class:`BackendUnavailable`; for a write the outcome is
then unknown, and it is the core, not this client, that decides what to do (it re-reads).
Reads are idempotent, so a read also tries the remaining endpoints before giving up.

Every request carries ``Grpc-Metadata-hasleader: true`` (etcd's "require leader": a member that
has lost its leader, e.g. on the minority side of a partition, fails at once with
``no leader`` instead of waiting, and cancels watches) and, when the caller runs under an anyio
deadline, ``Grpc-Timeout`` with the time left, so the server gives up when the caller does.
"""

from __future__ import annotations

import json
import math
import ssl
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import anyio
import httpx

from ..._exceptions import BackendError, BackendUnavailable
from ..._http import LeanClient
from ..._slots import Slots
from ._codec import b64
from ._errors import describe_body, error_from_status, is_invalid_token

__all__ = ["EtcdClient"]

API = "/v3"
_CONNECT_FAILURES = (httpx.ConnectError, httpx.ConnectTimeout)
# After sending: httpx's errors, plus what httpcore lets through unmapped (ssl.SSLError when the
# server rejects our client certificate after a TLS 1.3 handshake, other socket errors).
_SEND_FAILURES = (httpx.TransportError, OSError)


def make_ssl_context(
    ca_file: str | None, cert_file: str | None, key_file: str | None
) -> ssl.SSLContext:
    """Server verification against ``ca_file`` (else the system store) plus a client cert."""
    context = ssl.create_default_context(cafile=ca_file)
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    return context


#: Unary requests in flight per client. Without a cap, a burst of acquisitions (1,000 leases
#: at 100 per second) queued inside httpcore, whose pool matching is O(queued x connections),
#: and every lease was lost (benchmarks/README.md); the Kubernetes client has the same cap.
MAX_IN_FLIGHT = 4


class EtcdClient:
    """Unary JSON calls and streaming watches against a list of etcd endpoints."""

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
        #: Per endpoint, for unary calls; None: everything on httpx (an injected transport).
        self._lean: dict[str, LeanClient] | None = {} if transport is None else None

    async def aclose(self) -> None:
        """Close the connection pools."""
        lean, self._lean = self._lean, None
        for client in (lean or {}).values():
            await client.aclose()
        await self._http.aclose()

    def _lean_client(self, endpoint: str) -> LeanClient | None:
        if self._lean is None:
            return None
        client = self._lean.get(endpoint)
        if client is None:
            context = self._ssl
            if context is None and endpoint.startswith("https:"):
                context = ssl.create_default_context()  # httpx's default: the system's CAs
            client = self._lean[endpoint] = LeanClient(
                endpoint,
                ssl_context=context,
                connect_timeout=self._connect_timeout,
                max_idle=MAX_IN_FLIGHT,
            )
        return client

    async def _send(
        self, endpoint: str, path: str, body: dict[str, Any], headers: dict[str, str],
        timeout: httpx.Timeout,
    ) -> tuple[int, object]:
        """One POST of ``body`` as JSON to ``endpoint``: status and JSON answer (or None)."""
        lean = self._lean_client(endpoint)
        if lean is None:
            response = await self._http.post(
                f"{endpoint}{API}/{path}", json=body, headers=headers, timeout=timeout
            )
            return response.status_code, _json_or_none(response.content)
        connect, read = timeout.connect or self._connect_timeout, timeout.read
        with anyio.fail_after(connect + (read if read is not None else self._request_timeout)):
            reply = await lean.request(
                "POST",
                f"{API}/{path}",
                headers=[*headers.items(), ("Content-Type", "application/json")],
                body=json.dumps(body, separators=(",", ":")).encode(),
                connect_timeout=connect,
            )
        return reply.status_code, _json_or_none(reply.content)

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

    async def call(self, path: str, body: dict[str, Any], *, write: bool) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>``; return the JSON answer or raise a mapped error.

        ``write`` says whether the request changes state: a write is sent at most once past
        the connection stage (never retried on an unknown outcome).
        """
        reauthenticated = False
        failures: list[str] = []
        attempts = 0
        while attempts < len(self.endpoints):
            endpoint = self.endpoints[self._current]
            try:
                status, answer = await self._post(endpoint, path, body)
            except _CONNECT_FAILURES as exc:
                failures.append(f"{endpoint}: {type(exc).__name__}")
                self._move_on_from(endpoint)
                attempts += 1
                continue
            except _SEND_FAILURES as exc:
                self._move_on_from(endpoint)
                outcome = "; the outcome is unknown" if write else ""
                raise BackendUnavailable(
                    f"etcd {path} at {endpoint} failed after the request was sent "
                    f"({type(exc).__name__}){outcome}"
                ) from None
            if status == 200:
                if not isinstance(answer, dict):
                    raise BackendError(
                        f"etcd {path} at {endpoint} returned {describe_body(answer)}"
                    )
                return answer
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
                status, answer, operation=path, endpoint=endpoint, prefix=self._prefix
            )
            if isinstance(error, BackendUnavailable):
                self._move_on_from(endpoint)
                if not write:
                    failures.append(f"{endpoint}: {error}")
                    attempts += 1
                    continue
            raise error
        raise BackendUnavailable(
            f"etcd {path}: no endpoint answered ({'; '.join(failures)}); check that etcd runs "
            f"and has quorum"
        )

    async def _post(self, endpoint: str, path: str, body: dict[str, Any]) -> tuple[int, object]:
        """One POST to ``endpoint``, authenticating there first if needed."""
        slots = self._slots
        await slots.acquire()  # renewals first; bounded by the caller's deadline
        try:
            timeout, headers = self._timeouts(stream=False)
            await self._authorize(endpoint, headers, timeout)
            return await self._send(endpoint, path, body, headers, timeout)
        finally:
            slots.release()

    async def _authorize(
        self, endpoint: str, headers: dict[str, str], timeout: httpx.Timeout
    ) -> None:
        """Add the auth token to ``headers``, fetching one with username/password if needed."""
        if self._username is None:
            return
        if self._token is None:
            status, answer = await self._send(
                endpoint,
                "auth/authenticate",
                {"name": self._username, "password": self._password or ""},
                headers,
                timeout,
            )
            if status != 200:
                raise error_from_status(
                    status,
                    answer,
                    operation="auth/authenticate",
                    endpoint=endpoint,
                    prefix=self._prefix,
                )
            token = answer.get("token") if isinstance(answer, dict) else None
            if not isinstance(token, str) or not token:
                raise BackendError(f"etcd auth/authenticate at {endpoint} returned no token")
            self._token = token
        headers["Authorization"] = self._token  # etcd wants the bare token, no "Bearer"

    # -- key-value helpers -----------------------------------------------------------------

    async def range(self, key: bytes) -> dict[str, Any]:
        """A linearizable read of one key (the answer's ``header.revision`` is the store's)."""
        return await self.call("kv/range", {"key": b64(key)}, write=False)

    async def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """A transaction; ``succeeded`` is absent from the answer when false."""
        body = {"compare": compare, "success": success, "failure": failure}
        return await self.call("kv/txn", body, write=True)

    # -- watch -----------------------------------------------------------------------------

    async def watch(self, key: bytes, start_revision: int) -> AsyncGenerator[dict[str, Any], None]:
        """Yield each ``result`` of a watch on ``key`` from ``start_revision`` on.

        Ends (returns) when the server closes the stream; raises :class:`BackendUnavailable`
        when it cannot connect or the stream fails, and the mapped error for an error line.
        The caller reconnects; a watch is a read, so reconnecting is always safe.
        """
        endpoint = self.endpoints[self._current]
        timeout, headers = self._timeouts(stream=True)
        body = {"create_request": {"key": b64(key), "start_revision": str(start_revision)}}
        try:
            await self._authorize(endpoint, headers, timeout)
            async with self._http.stream(
                "POST", f"{endpoint}{API}/watch", json=body, headers=headers, timeout=timeout
            ) as response:
                if response.status_code != 200:
                    answer = _json_or_none(await response.aread())
                    if is_invalid_token(response.status_code, answer):
                        self._token = None
                    raise error_from_status(
                        response.status_code,
                        answer,
                        operation="watch",
                        endpoint=endpoint,
                        prefix=self._prefix,
                    )
                async for line in response.aiter_lines():
                    result = self._watch_result(line, endpoint)
                    if result is not None:
                        yield result
        except _SEND_FAILURES as exc:
            self._move_on_from(endpoint)
            raise BackendUnavailable(
                f"etcd watch at {endpoint} failed ({type(exc).__name__})"
            ) from None
        except BackendUnavailable:
            self._move_on_from(endpoint)
            raise

    def _watch_result(self, line: str, endpoint: str) -> dict[str, Any] | None:
        """The ``result`` of one line of a watch stream; raise for an ``error`` line."""
        if not line.strip():
            return None
        message = _json_or_none(line.encode())
        if not isinstance(message, dict):
            raise BackendUnavailable(f"etcd watch at {endpoint} sent a malformed line")
        if "error" in message:
            raise error_from_status(
                200, message, operation="watch", endpoint=endpoint, prefix=self._prefix
            )
        result = message.get("result")
        return result if isinstance(result, dict) else None


def _json_or_none(content: bytes) -> object:
    try:
        result: object = json.loads(content)
    except ValueError:
        return None
    return result
