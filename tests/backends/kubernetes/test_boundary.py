"""The reply boundary: every API-server answer becomes a well-formed record or a typed error.

Hostile and broken answers are scripted on top of the in-process emulator: a transport passes
requests to the emulator and rewrites the answers a test picks. Both lease kinds throughout.
"""

from __future__ import annotations

import itertools
import json
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from trio_lease import (
    BackendAuthError,
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    Lease,
    LeaseBusy,
    LeaseConfigError,
    LeaseError,
    LeaseRecord,
    LeaseSettings,
)
from trio_lease.backends.kubernetes import ClusterConfig, KubernetesBackend
from trio_lease.backends.kubernetes._errors import RequestContext, error_from, parse_status
from trio_lease.backends.kubernetes._models import AKKA, COORDINATION
from trio_lease.backends.kubernetes._pacing import FIRST_BACKOFF
from trio_lease.backends.kubernetes._watch import MAX_LINE_BYTES

from ._helpers import SERVER, emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio
KINDS = ["coordination.k8s.io/v1", "akka.io/v1"]
SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)
JSON = dict[str, Any]
#: (request, status, body) → None to pass the emulator's answer on, or (status, body bytes).
Rewrite = Callable[[httpx.Request, int, bytes], "tuple[int, bytes] | None"]


class Rewriting(httpx.AsyncBaseTransport):
    """The emulator, with the answers a test picks rewritten; records every request."""

    def __init__(self, inner: httpx.AsyncBaseTransport, rewrite: Rewrite | None = None) -> None:
        self.inner = inner
        self.rewrite = rewrite
        self.requests: list[tuple[float, str, dict[str, str]]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((anyio.current_time(), request.method, dict(request.url.params)))
        response = await self.inner.handle_async_request(request)
        if self.rewrite is None or request.url.params.get("watch") == "1":
            return response
        content = await response.aread()
        new = self.rewrite(request, response.status_code, content)
        if new is None:
            return response
        status, body = new
        return httpx.Response(status, content=body, request=request,
                              headers={"content-type": "application/json"})

    def count(self, method: str, *, watch: bool = False) -> int:
        return sum(
            1 for _, m, q in self.requests if m == method and (q.get("watch") == "1") == watch
        )


def _holder_field(kind: str) -> str:
    return "holderIdentity" if kind == COORDINATION.name else "owner"


def _on(method: str, change: Callable[[JSON], object], *, lists: bool = False) -> Rewrite:
    """Rewrite successful answers to ``method`` (item requests, or LISTs): change(obj) → body."""

    def rewrite(request: httpx.Request, status: int, content: bytes) -> tuple[int, bytes] | None:
        is_list = request.method == "GET" and request.url.path.endswith("/leases")
        if request.method != method or status >= 300 or is_list != lists:
            return None
        body = change(json.loads(content))
        return status, body if isinstance(body, bytes) else json.dumps(body).encode()

    return rewrite


async def _held_by(backend: KubernetesBackend, holder: str = "pod-a") -> LeaseRecord:
    return await backend.create(LeaseRecord("job", holder=holder, lease_duration=15,
                                            fencing_token=3))


async def _held_then_rewritten(kind: str, rewrite: Rewrite) -> tuple[Rewriting, LeaseRecord]:
    """Lease job held by pod-a on a new emulator (the record as created), and a transport to
    that emulator whose answers ``rewrite`` changes."""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport(), kind=kind) as writer:
        created = await _held_by(writer)
    return Rewriting(emulator.transport(), rewrite), created


def _holder_as_a_list(kind: str) -> Callable[[JSON], JSON]:
    """A change of a stored ``kind`` object: its holder becomes the list ["someone"]."""
    field = _holder_field(kind)

    def listify(obj: JSON) -> JSON:
        obj["spec"][field] = ["someone"]
        return obj

    return listify


# -- unreadable records: never free ------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_holder_that_is_not_a_string_reads_as_unreadable_not_free(kind: str) -> None:
    """A holder ["someone"] (read as FREE before) is an unreadable record at the real version."""
    field = _holder_field(kind)
    transport, created = await _held_then_rewritten(kind, _on("GET", _holder_as_a_list(kind)))
    async with make_backend(transport, kind=kind) as reader:
        record = await reader.get("job")
    assert record is not None
    assert record.unreadable == f"spec.{field}: expected a string, got a list"
    assert (record.holder, record.is_free) == ("", False)
    assert record.fencing_token == 3
    assert record.version == created.version


@pytest.mark.parametrize("kind", KINDS)
async def test_contender_does_not_take_a_lease_whose_holder_is_unreadable(kind: str) -> None:
    """try_held() on a live lease whose holder is a list is LeaseBusy, not an instant takeover."""
    transport, _ = await _held_then_rewritten(kind, _on("GET", _holder_as_a_list(kind)))
    async with make_backend(transport, kind=kind) as backend:
        lease = Lease("job", "contender", backend, SETTINGS)
        with pytest.raises(LeaseBusy):
            async with lease.try_held():
                pytest.fail("took a lease whose holder could not be read")
    assert transport.count("PUT") == 0


# -- answers that are not our Lease: BackendProtocolError ----------------------------------------


def _status_body(status: str, code: int) -> JSON:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status,
            "message": "whatever", "code": code}


def _deep(obj: JSON) -> bytes:
    return json.dumps(obj).encode()[:-1] + b',"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def _set_metadata(**fields: Any) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        for key, value in fields.items():
            if value is _DROP:
                obj["metadata"].pop(key, None)
            else:
                obj["metadata"][key] = value
        return obj

    return change


_DROP = object()
NOT_A_LEASE: dict[str, Callable[[JSON], object]] = {
    "status-failure": lambda obj: _status_body("Failure", 500),
    "status-success": lambda obj: _status_body("Success", 200),
    "lease-list": lambda obj: {"kind": "LeaseList", "apiVersion": obj["apiVersion"],
                               "metadata": {"resourceVersion": "9"}, "items": [obj]},
    "empty-object": lambda obj: {},
    "other-kind": lambda obj: {**obj, "kind": "ConfigMap", "apiVersion": "v1"},
    "other-api-version": lambda obj: {**obj, "apiVersion": obj["apiVersion"] + "beta1"},
    "no-kind": lambda obj: {k: v for k, v in obj.items() if k != "kind"},
    "json-list": lambda obj: [obj],
    "json-null": lambda obj: None,
    "not-json": lambda obj: b"<html><body>502 Bad Gateway</body></html>",
    "truncated": lambda obj: json.dumps(obj).encode()[:-5],
    "metadata-list": lambda obj: {**obj, "metadata": [obj["metadata"]]},
    "metadata-string": lambda obj: {**obj, "metadata": "x"},
    "other-name": _set_metadata(name="someone-else"),
    "other-namespace": _set_metadata(namespace="kube-system"),
    "no-resource-version": _set_metadata(resourceVersion=_DROP),
    "empty-resource-version": _set_metadata(resourceVersion=""),
    "int-resource-version": _set_metadata(resourceVersion=12),
    "no-uid": _set_metadata(uid=_DROP),
    "nan": lambda obj: json.dumps(obj).encode()[:-1] + b',"x":NaN}',
    # 1e999 is valid JSON that reads as infinity, which no JSON writer can send back (a PUT
    # built from the object would fail in the encoder, untyped)
    "out-of-range-float": lambda obj: json.dumps(obj).encode()[:-1] + b',"x":1e999}',
    "400-digit-duration": lambda obj: json.dumps({**obj, "spec": {}}).encode().replace(
        b'"spec": {}', b'"spec": {"leaseDurationSeconds": ' + b"9" * 400 + b"}"),
    "deeply-nested": _deep,
    "over-4-mib": lambda obj: json.dumps({**obj, "pad": "x" * (4 * 1024 * 1024)}).encode(),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(NOT_A_LEASE))
async def test_get_answered_with_something_else_is_a_protocol_error(kind: str, case: str) -> None:
    """A 200 to a GET that is not our Lease (Status, list, {}, another object…) raises."""
    transport, _ = await _held_then_rewritten(kind, _on("GET", NOT_A_LEASE[case]))
    async with make_backend(transport, kind=kind) as backend:
        with pytest.raises(BackendProtocolError) as info:
            await backend.get("job")
    assert "job" in str(info.value)
    assert "whatever" not in str(info.value)  # never quotes the body


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", ["status-failure", "empty-object", "other-name", "no-uid",
                                  "no-resource-version", "deeply-nested", "not-json"])
async def test_create_answered_with_something_else_is_an_unknown_outcome(
    kind: str, case: str
) -> None:
    """A 201 {} or a 200 Status to a POST is BackendProtocolError saying the outcome is unknown."""
    transport = Rewriting(emulator_with_crd().transport(), _on("POST", NOT_A_LEASE[case]))
    async with make_backend(transport, kind=kind) as backend:
        with pytest.raises(BackendProtocolError, match="unknown"):
            await _held_by(backend)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", ["status-failure", "empty-object", "other-name", "lease-list",
                                  "int-resource-version", "nan"])
async def test_update_answered_with_something_else_is_an_unknown_outcome(
    kind: str, case: str
) -> None:
    """A 200 to a PUT that is not our Lease raises, and the next update re-reads first."""
    transport = Rewriting(emulator_with_crd().transport())
    async with make_backend(transport, kind=kind) as backend:
        record = await _held_by(backend)
        transport.rewrite = _on("PUT", NOT_A_LEASE[case])
        with pytest.raises(BackendProtocolError, match="unknown"):
            await backend.update(record, record.version)
        transport.rewrite = None
        transport.requests.clear()
        with pytest.raises(ConflictError):  # the write landed: our version is stale
            await backend.update(record, record.version)
        assert [m for _, m, _ in transport.requests] == ["GET"]


@pytest.mark.parametrize("kind", KINDS)
async def test_update_answered_with_another_uid_is_an_unknown_outcome(kind: str) -> None:
    """A 200 to a PUT whose object has another uid than the one sent is a protocol error."""
    transport = Rewriting(emulator_with_crd().transport())
    async with make_backend(transport, kind=kind) as backend:
        record = await _held_by(backend)
        transport.rewrite = _on("PUT", _set_metadata(uid="another-object"))
        with pytest.raises(BackendProtocolError, match="uid"):
            await backend.update(record, record.version)


@pytest.mark.parametrize("kind", KINDS)
async def test_create_answered_with_another_holder_is_returned_as_answered(kind: str) -> None:
    """A well-formed 201 showing another holder is returned as is, for the core to compare."""
    field = _holder_field(kind)

    def other(obj: JSON) -> JSON:
        obj["spec"][field] = "someone-else"
        return obj

    transport = Rewriting(emulator_with_crd().transport(), _on("POST", other))
    async with make_backend(transport, kind=kind) as backend:
        echo = await _held_by(backend, holder="me")
    assert (echo.holder, echo.unreadable) == ("someone-else", "")


# -- 429 and Retry-After -----------------------------------------------------------------------


class TooMany(httpx.AsyncBaseTransport):
    """Answers the first GET with a 429 carrying the given header and body, then the emulator."""

    def __init__(self, inner: httpx.AsyncBaseTransport, headers: dict[str, str], body: bytes):
        self.inner, self.headers, self.body = inner, headers, body
        self.times: list[float] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.times.append(anyio.current_time())
        if len(self.times) == 1:
            return httpx.Response(429, headers=self.headers, content=self.body, request=request)
        return await self.inner.handle_async_request(request)


def _retry_status(seconds: object) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": "TooManyRequests", "code": 429,
                       "details": {"retryAfterSeconds": seconds}}).encode()


@pytest.mark.parametrize(
    ("header", "body", "wait"),
    [
        ("2", b"", 2.0),
        ("0", b"", 0.05),
        ("0.001", b"", 0.05),
        ("-5", b"", 1.0),
        ("NaN", b"", 1.0),
        ("nan", b"", 1.0),
        ("inf", b"", 1.0),
        ("1e999", b"", 1.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", b"", 1.0),
        ("", b"", 1.0),
        ("1, 2", b"", 1.0),
        ("\x00", b"", 1.0),
        (None, _retry_status(3), 3.0),
        (None, _retry_status("3"), 1.0),
        (None, _retry_status(2.5), 1.0),
        (None, _retry_status(True), 1.0),
        (None, _retry_status(-3), 1.0),
        (None, _retry_status([3]), 1.0),
        (None, _retry_status(10**30), 1.0),
    ],
)
async def test_odd_retry_after_values_wait_a_finite_clamped_time(
    header: str | None, body: bytes, wait: float
) -> None:
    """Retry-After is honoured when it is delay-seconds (at least 0.05 s); otherwise 1 s."""
    headers = {"Retry-After": header} if header is not None else {}
    transport = TooMany(emulator_with_crd().transport(), headers, body)
    async with make_backend(transport, request_timeout=5) as backend:
        assert await backend.get("job") is None
    assert len(transport.times) == 2
    assert transport.times[1] - transport.times[0] == pytest.approx(wait)


@pytest.mark.parametrize("header", ["5", "999999999", "9" * 30])
async def test_retry_after_past_the_request_bound_fails_at_once(header: str) -> None:
    """A Retry-After that would end past the request bound is BackendUnavailable, no sleep."""
    transport = TooMany(emulator_with_crd().transport(), {"Retry-After": header}, b"")
    async with make_backend(transport, request_timeout=5) as backend:
        start = anyio.current_time()
        with pytest.raises(BackendUnavailable, match="429"):
            await backend.get("job")
        assert anyio.current_time() == start
    assert len(transport.times) == 1


# -- failure bodies: parsed whatever they hold, quoted only when safe -------------------------

CTX = RequestContext("update", COORDINATION, "jobs", "nightly")


def _answer(code: int, body: object, content_type: str = "application/json") -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.Response(code, content=content, headers={"content-type": content_type})


def _shaped(http_code: int, /, **fields: Any) -> JSON:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "code": http_code, **fields}


@pytest.mark.parametrize("code", [400, 403, 404, 409, 422, 429, 500, 418])
@pytest.mark.parametrize(
    "fields",
    [
        {"details": ["x"]},
        {"details": {"causes": 5}},
        {"details": {"causes": ["x", 5, None, {"field": [1], "message": {"a": 1}}]}},
        {"details": {"name": ["x"], "kind": {"a": 1}, "retryAfterSeconds": "soon"}},
        {"code": "x", "message": {"a": 1}, "reason": ["Conflict"]},
        {"code": None, "status": 5, "metadata": 5, "apiVersion": ["v1"]},
        {"message": None, "reason": 5, "details": None},
        {"reason": "Not A Word!", "message": 10**30},
    ],
)
def test_status_with_fields_of_the_wrong_type_is_still_mapped(code: int, fields: JSON) -> None:
    """A Status with fields of the wrong types (causes 5 was a TypeError) maps to a LeaseError."""
    response = _answer(code, _shaped(code, **fields))
    status = parse_status(response)
    exc = error_from(response, CTX)
    assert isinstance(exc, LeaseError)
    assert status.retry_after is None
    for text in (str(exc), status.reason, status.message, *status.causes):
        assert "{" not in text
        assert "[1]" not in text
        assert "['" not in text


def test_non_status_bodies_are_described_never_quoted() -> None:
    """A text or HTML failure body (a proxy echoing our Authorization header) is never quoted."""
    echo = b"GET /apis/... Authorization: Bearer s3cr3t-token-value\n" * 10
    for content_type in ("text/plain", "text/html", "application/json"):
        exc = error_from(_answer(502, echo, content_type), CTX)
        assert isinstance(exc, BackendUnavailable)
        assert "s3cr3t" not in str(exc)
        assert "Authorization" not in str(exc)
        assert f"a {content_type} body of {len(echo):,} bytes" in str(exc)
    odd = error_from(_answer(500, b"x", "text/plain\r\nX-Injected: yes"), CTX)
    assert "Injected" not in str(odd)
    assert "an empty body" in str(error_from(_answer(503, b""), CTX))


def test_status_messages_are_cleaned_before_they_are_quoted() -> None:
    """Status.message is quoted without control characters or credentials, and bounded."""
    message = ("denied for Authorization: Bearer s3cr3t-token\x1b[31m\r\nbasic dXNlcjpwYXNz "
               "jwt eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln \u202e" + "x" * 5000)
    exc = error_from(_answer(403, _shaped(403, message=message, reason="Forbidden")), CTX)
    text = str(exc)
    for secret in ("s3cr3t", "dXNlcjpwYXNz", "eyJhbGci", "\x1b", "\r", "\n", "\u202e"):
        assert secret not in text
    assert "[redacted]" in text
    assert len(text) < 1200
    assert "x" * 301 not in text


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (_shaped(404, reason="NotFound", message="the server could not find the requested "
                 "resource", details={}), "application/json"),
        (b"404 page not found\n", "text/plain; charset=utf-8"),
        (b"", "text/plain"),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
async def test_missing_crd_is_recognised_whatever_the_404_body(
    kind: str, body: object, content_type: str
) -> None:
    """A 404 for the URL (Status, text/plain '404 page not found', or empty) is a config error."""

    def missing(request: httpx.Request, status: int, content: bytes) -> tuple[int, bytes]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return 404, raw

    class Missing(Rewriting):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            status, raw = missing(request, 0, b"")
            return httpx.Response(status, content=raw, headers={"content-type": content_type})

    async with make_backend(Missing(emulator_with_crd().transport()), kind=kind) as backend:
        fix = "trio-lease manifests" if kind == AKKA.name else "serve"
        with pytest.raises(LeaseConfigError, match=fix):
            await backend.get("job")


# -- TLS ---------------------------------------------------------------------------------------


class UntrustedCertificate(httpx.AsyncBaseTransport):
    """Every connection fails certificate verification (the CA is wrong)."""

    attempts = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        try:
            raise ssl.SSLCertVerificationError(1, "certificate verify failed: self-signed")
        except ssl.SSLError as exc:
            raise httpx.ConnectError("TLS handshake failed") from exc


@pytest.mark.parametrize("with_ca_file", [False, True])
async def test_tls_verification_failure_is_a_configuration_error(
    tmp_path: Path, with_ca_file: bool
) -> None:
    """A certificate that does not verify (after one CA-file re-read) is a LeaseConfigError."""
    ca_file = tmp_path / "ca.crt"
    ca_file.write_text("not used by the injected transport")
    config = ClusterConfig(server=SERVER, ca_file=ca_file if with_ca_file else None)
    transport = UntrustedCertificate()
    async with KubernetesBackend(config, transport=transport) as backend:
        with pytest.raises(LeaseConfigError, match="tls-server-name") as info:
            await backend.get("job")
    assert "retrying cannot fix" in str(info.value)
    assert transport.attempts == (2 if with_ca_file else 1)


# -- the watch -----------------------------------------------------------------------------------


class ScriptedWatch(httpx.AsyncBaseTransport):
    """The emulator for everything but watches; watch number n (from 1) answers body(n).

    A client that spins would make thousands of requests at one virtual instant; after
    ``limit`` watches the transport parks the request so that virtual time can move on and the
    test can end (and fail on the count).
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, body: Callable[[int], object],
                 limit: int = 300, life: float = 0.0) -> None:
        self.inner = inner
        self.body = body
        self.limit = limit
        self.life = life  # how long each watch stream stays open before its body
        self.watches: list[float] = []
        self.lists: list[float] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("watch") == "1":
            self.watches.append(anyio.current_time())
            if len(self.watches) > self.limit:
                await anyio.sleep(3600)
            content = self.body(len(self.watches))
            if self.life:
                return httpx.Response(200, stream=_Later(self.life, content), request=request)
            if isinstance(content, httpx.AsyncByteStream):
                return httpx.Response(200, stream=content, request=request)
            return httpx.Response(200, content=content, request=request)  # type: ignore[arg-type]
        if request.url.path.endswith("/leases"):
            self.lists.append(anyio.current_time())
        return await self.inner.handle_async_request(request)


class _Later(httpx.AsyncByteStream):
    """A stream body sent ``life`` seconds after the stream opened."""

    def __init__(self, life: float, content: object) -> None:
        self.life = life
        self.content = content

    async def __aiter__(self) -> AsyncIterator[bytes]:
        await anyio.sleep(self.life)
        assert isinstance(self.content, bytes)
        yield self.content


async def _watch_for(backend: KubernetesBackend, seconds: float) -> list[LeaseRecord | None]:
    seen: list[LeaseRecord | None] = []

    async def collect() -> None:
        async with backend.watch("job") as states:
            async for state in states:
                seen.append(state)

    async with anyio.create_task_group() as tg:
        tg.start_soon(collect)
        await anyio.sleep(seconds)
        tg.cancel_scope.cancel()
    return seen


def _line(event: object) -> bytes:
    return json.dumps(event).encode() + b"\n"


def _bookmark(kind: str, version: str) -> bytes:
    return _line({"type": "BOOKMARK", "object": {"kind": "Lease", "apiVersion": kind,
                                                  "metadata": {"resourceVersion": version}}})


@pytest.mark.parametrize("kind", KINDS)
async def test_streams_that_end_after_a_bookmark_are_reopened_with_backoff(kind: str) -> None:
    """Bookmark-only streams (~1,000 requests in 0.4 s before) reopen with a growing backoff."""
    emulator = emulator_with_crd()
    transport = ScriptedWatch(emulator.transport(),
                              lambda n: _bookmark(kind, emulator.resource_version))
    async with make_backend(transport, kind=kind, watch_poll_interval=5) as backend:
        seen = await _watch_for(backend, 60)
    assert seen == [None]
    gaps = [b - a for a, b in zip(transport.watches, transport.watches[1:], strict=False)]
    assert len(transport.watches) <= 35
    assert min(gaps) >= 0.05  # no two at one instant
    assert max(gaps) <= 5  # capped at watch_poll_interval
    assert sum(gaps[-5:]) > 10  # grown to the cap


@pytest.mark.parametrize("kind", KINDS)
async def test_useful_events_reset_the_backoff_and_repeats_do_not(kind: str) -> None:
    """A stream that lived (FIRST_BACKOFF) and brought a change reopens at once; one that
    repeated a version waits. (One that ends at once waits too: test_watch_pacing.py.)"""
    emulator = emulator_with_crd()
    async with make_backend(emulator.transport(), kind=kind) as writer:
        created = await _held_by(writer)
    current = emulator.get(kind, "leases", "job", "default")
    assert current is not None

    def body(n: int) -> bytes:
        if n > 3:
            return _bookmark(kind, emulator.resource_version)
        obj = json.loads(json.dumps(current))
        obj["metadata"]["resourceVersion"] = str(1000 + min(n, 2))  # the third repeats
        return _line({"type": "MODIFIED", "object": obj})

    transport = ScriptedWatch(emulator.transport(), body, life=FIRST_BACKOFF)
    async with make_backend(transport, kind=kind, watch_poll_interval=5) as backend:
        seen = await _watch_for(backend, 30)
    assert [s.version if s else None for s in seen[:4]] == [created.version, "1001", "1002",
                                                            "1002"]
    first, second, third, fourth = transport.watches[:4]
    # After each real change: at once, when the stream ends (it lived FIRST_BACKOFF).
    assert second - first == third - second == pytest.approx(FIRST_BACKOFF)
    assert fourth - third > FIRST_BACKOFF * 1.4  # after the repeat: a backoff (≥ 0.05 s) too


HOSTILE_STREAMS: dict[str, Callable[[str], bytes]] = {
    "not-json": lambda kind: b"not json\n",
    "unknown-type": lambda kind: _line({"type": "SYNC", "object": {}}),
    "type-list": lambda kind: _line({"type": ["ADDED"], "object": {}}),
    "object-not-an-object": lambda kind: _line({"type": "MODIFIED", "object": 5}),
    "json-list": lambda kind: _line([1, 2]),
    "nan": lambda kind: b'{"type": "MODIFIED", "object": {"x": NaN}}\n',
    "out-of-range-float": lambda kind: b'{"type": "MODIFIED", "object": {"x": -1e999}}\n',
    "deep": lambda kind: b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "bookmark-without-version": lambda kind: _line({"type": "BOOKMARK", "object": {
        "metadata": {"resourceVersion": 5}}}),
    "other-object": lambda kind: _line({"type": "MODIFIED", "object": {
        "metadata": {"name": "other", "uid": "u", "resourceVersion": "5"}, "spec": {}}}),
    "status-as-object": lambda kind: _line({"type": "ADDED", "object": {
        "kind": "Status", "metadata": {"name": "job", "uid": "u", "resourceVersion": "5"}}}),
    "error-not-410": lambda kind: _line({"type": "ERROR", "object": {"kind": "Status",
                                                                      "code": "410"}}),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(HOSTILE_STREAMS))
async def test_unreadable_watch_events_are_paced_protocol_errors(kind: str, case: str) -> None:
    """Bad event lines never escape the watch: it re-lists after a backoff, a few times a minute."""
    emulator = emulator_with_crd()
    transport = ScriptedWatch(emulator.transport(), lambda n: HOSTILE_STREAMS[case](kind))
    async with make_backend(transport, kind=kind, watch_poll_interval=5) as backend:
        seen = await _watch_for(backend, 60)
    assert len(transport.lists) <= 35
    assert len(seen) == len(transport.lists)  # each re-list yields the state it read
    assert all(state is None for state in seen)


HOSTILE_LISTS: dict[str, Callable[[JSON], object]] = {
    "items-5": lambda body: {**body, "items": 5},
    "items-of-strings": lambda body: {**body, "items": ["job"]},
    "two-items": lambda body: {**body, "items": [body["items"][0]] * 2},
    "other-name": lambda body: {**body, "items": [{**body["items"][0], "metadata": {
        **body["items"][0]["metadata"], "name": "other"}}]},
    "no-version": lambda body: {**body, "metadata": {}},
    "metadata-list": lambda body: {**body, "metadata": [1]},
    "not-a-list": lambda body: body["items"][0],
    "status": lambda body: _status_body("Failure", 500),
    "empty": lambda body: {},
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(HOSTILE_LISTS))
async def test_unreadable_lists_are_paced_protocol_errors(kind: str, case: str) -> None:
    """A LIST that is not a LeaseList of our object ("items": 5 was a TypeError) is paced."""
    transport, _ = await _held_then_rewritten(kind, _on("GET", HOSTILE_LISTS[case], lists=True))
    async with make_backend(transport, kind=kind, watch_poll_interval=5) as backend:
        seen = await _watch_for(backend, 60)
    assert seen == []
    assert 5 <= transport.count("GET") <= 35
    assert transport.count("GET", watch=True) == 0


class _EndlessLine(httpx.AsyncByteStream):
    """A body of one line that does not end (until 4 caps), counting the bytes sent; an
    iterator object, so the reader that stops early leaves nothing for the GC to finalize."""

    def __init__(self, sent: list[int]) -> None:
        self.sent = sent
        self.chunk = b'{"type":"ADDED","object":{"pad":"' + b"x" * 65536

    def __aiter__(self) -> _EndlessLine:
        return self

    async def __anext__(self) -> bytes:
        if self.sent[0] >= 4 * MAX_LINE_BYTES:
            raise StopAsyncIteration
        chunk, self.chunk = self.chunk, b"x" * 65536
        self.sent[0] += len(chunk)
        return chunk


async def test_an_endless_event_line_is_cut_at_the_cap() -> None:
    """A line that never ends is a protocol error after MAX_LINE_BYTES, not unbounded memory."""
    emulator = emulator_with_crd()
    sent = [0]
    streams = []

    def body(n: int) -> object:
        if n > 1:
            return b""
        streams.append(n)
        return _EndlessLine(sent)

    transport = ScriptedWatch(emulator.transport(), body)
    async with make_backend(transport, watch_poll_interval=5) as backend:
        await _watch_for(backend, 10)
    assert MAX_LINE_BYTES < sent[0] <= MAX_LINE_BYTES + 2 * 65536
    assert len(transport.lists) >= 2  # dropped and re-listed


@pytest.mark.parametrize("kind", KINDS)
async def test_failing_lists_are_paced(kind: str) -> None:
    """A LIST failing with 500 again and again is retried with the backoff, not in a loop."""

    def fail(request: httpx.Request, status: int, content: bytes) -> tuple[int, bytes] | None:
        if request.url.path.endswith("/leases"):
            return 500, json.dumps(_status_body("Failure", 500)).encode()
        return None

    transport = Rewriting(emulator_with_crd().transport(), fail)
    async with make_backend(transport, kind=kind, watch_poll_interval=5) as backend:
        assert await _watch_for(backend, 60) == []
    times = [t for t, _, _ in transport.requests]
    assert 5 <= len(times) <= 35
    assert all(b > a for a, b in itertools.pairwise(times))


# -- trio-lease check --------------------------------------------------------------------------


class Reviews(httpx.AsyncBaseTransport):
    """The emulator, with SelfSubjectAccessReviews answered by a scripted body."""

    def __init__(self, inner: httpx.AsyncBaseTransport, body: bytes) -> None:
        self.inner, self.body = inner, body

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/selfsubjectaccessreviews"):
            return httpx.Response(201, content=self.body, request=request)
        return await self.inner.handle_async_request(request)


def _review(status: object, kind: object = "SelfSubjectAccessReview") -> bytes:
    return json.dumps({"kind": kind, "apiVersion": "authorization.k8s.io/v1",
                       "status": status}).encode()


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"kind": "SelfSubjectAccessReview", "status": {"allowed": NaN}}',
        _review({"allowed": "yes"}),
        _review({"allowed": 1}),
        _review([{"allowed": True}]),
        _review({"allowed": True}, kind="Status"),
        b"<html>",
        b"",
    ],
)
async def test_check_survives_unreadable_access_reviews(body: bytes) -> None:
    """An unreadable SelfSubjectAccessReview answer means "reviews unavailable": probe instead."""
    async with make_backend(Reviews(emulator_with_crd().transport(), body)) as backend:
        report = await backend.check()
    assert report.ok
    assert any("not available" in note for note in report.notes)


async def test_check_reads_allowed_reviews() -> None:
    """A well-formed review that allows every verb gives no problem and no note."""
    transport = Reviews(emulator_with_crd().transport(), _review({"allowed": True}))
    async with make_backend(transport) as backend:
        report = await backend.check()
    assert (report.ok, report.notes) == (True, [])


# -- nothing untyped escapes -------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_only_lease_errors_escape_any_hostile_answer(kind: str) -> None:
    """Every hostile body on every operation gives a record or a LeaseError, nothing else."""
    emulator = emulator_with_crd()
    transport = Rewriting(emulator.transport())
    async with make_backend(transport, kind=kind) as backend:
        record = await _held_by(backend)
        for change in NOT_A_LEASE.values():
            for method in ("GET", "POST", "PUT"):
                transport.rewrite = _on(method, change)
                try:
                    if method == "GET":
                        await backend.get("job")
                    elif method == "POST":
                        await backend.create(LeaseRecord("other", holder="me", lease_duration=15))
                    else:
                        await backend.update(record, record.version)
                except (BackendAuthError, LeaseConfigError):
                    raise
                except LeaseError:
                    pass
                transport.rewrite = None
                fresh = await backend.get("job")
                assert fresh is not None
                record = fresh
            emulator.delete(kind, "leases", "other", "default")


async def test_a_stream_that_stayed_open_long_is_reopened_at_once() -> None:
    """A quiet stream ended by the server after timeoutSeconds resumes at once (no backoff)."""
    transport = Rewriting(emulator_with_crd().transport())
    async with make_backend(transport, watch_poll_interval=5) as backend:
        await _watch_for(backend, 1000)
    opened = [t for t, _, q in transport.requests if q.get("watch") == "1"]
    assert [round(b - a) for a, b in itertools.pairwise(opened)] == [300, 300, 300]
