"""The etcd backend's trust boundary: hostile gateway answers become records or typed errors.

Scripted answers (httpx.MockTransport on virtual time, and a scripted HTTP server on loopback
for the lean HTTP path) that a well-behaved etcd never sends: the backend must turn each into a
well-formed record, an unreadable record (held by an unknown holder), or a LeaseError, never
into a conflict, a free lease, a tight retry loop or a foreign exception.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import itertools
import json
import ssl
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from tests.backends.etcd._mock import MockTransport
from trio_lease import (
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    Lease,
    LeaseConfigError,
    LeaseError,
    LeaseRecord,
)
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.etcd._client import MAX_WATCH_LINE
from trio_lease.backends.etcd._codec import decode_record, encode_record
from trio_lease.backends.etcd._replies import (
    read_answer,
    read_range,
    read_txn,
    read_watch_result,
)
from trio_lease.testing import virtual_time_backends

pytestmark = pytest.mark.anyio

A, B = "http://a.invalid:2379", "http://b.invalid:2379"
KEY = b"trio_lease/x"  # the default prefix + the lease name
Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Both loops on virtual time (the etcd folder's default is real time, for real servers)."""
    specs = dict(virtual_time_backends())
    name: str = request.param
    return name, specs[name]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def value_of(**fields: Any) -> bytes:
    """A stored record value: a valid one for lease x, with ``fields`` replaced or added."""
    record = json.loads(
        encode_record(LeaseRecord(name="x", holder="h", lease_duration=5, fencing_token=3))
    )
    record.update(fields)
    return json.dumps(record).encode()


def kv(value: bytes | None = None, **fields: Any) -> dict[str, Any]:
    """A KeyValue of our key at mod_revision 7 holding ``value`` (a valid record by default)."""
    pair: dict[str, Any] = {
        "key": b64(KEY),
        "create_revision": "2",
        "mod_revision": "7",
        "version": "3",
        "value": b64(value_of() if value is None else value),
    }
    pair.update(fields)
    return pair


def range_answer(*kvs: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = {"header": {"revision": "9"}}
    if kvs:
        answer.update(kvs=list(kvs), count=str(len(kvs)))
    return answer


def respond(body: object, status: int = 200) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.Response(status, content=content)


def backend(handler: Handler, **kwargs: Any) -> EtcdBackend:
    kwargs.setdefault("endpoints", [A])
    return EtcdBackend(transport=MockTransport(handler), **kwargs)


# -- txn answers ---------------------------------------------------------------------------

UNREADABLE_TXN = {
    "succeeded as a string": {"header": {"revision": "4"}, "succeeded": "true"},
    "succeeded 'false'": {"header": {"revision": "4"}, "succeeded": "false"},
    "succeeded 1": {"header": {"revision": "4"}, "succeeded": 1},
    "succeeded null": {"header": {"revision": "4"}, "succeeded": None},
    "succeeded a list": {"header": {"revision": "4"}, "succeeded": [True]},
    "no header": {"succeeded": True},
    "header a list": {"header": [], "succeeded": True},
    "revision 0": {"header": {"revision": "0"}, "succeeded": True},
    "revision negative": {"header": {"revision": "-4"}, "succeeded": True},
    "revision not a number": {"header": {"revision": "four"}, "succeeded": True},
    "revision a float": {"header": {"revision": 4.0}, "succeeded": True},
    "revision over int64": {"header": {"revision": str(2**63)}, "succeeded": True},
    "responses a string": {"header": {"revision": "4"}, "succeeded": True, "responses": "x"},
    "a list": [{"succeeded": True}],
    "a string": "succeeded",
    "not JSON": b"<html>Bad Gateway</html>",
    "deep nesting": b"[" * 100 + b"]" * 100,
}


@pytest.mark.parametrize("answer", UNREADABLE_TXN.values(), ids=UNREADABLE_TXN.keys())
async def test_an_unreadable_txn_answer_is_an_unknown_outcome_never_a_conflict(
    answer: object,
) -> None:
    """A txn answer that cannot be read raises BackendProtocolError (unknown), not Conflict."""
    async with backend(lambda request: respond(answer)) as b:
        with pytest.raises(BackendProtocolError, match="outcome is unknown"):
            await b.create(LeaseRecord(name="x", holder="me"))
        with pytest.raises(BackendProtocolError):
            await b.update(LeaseRecord(name="x", holder="me"), "3")


async def test_readable_txn_answers_are_versions_or_conflicts() -> None:
    """succeeded absent or false is a conflict; true gives the header revision (int or string)."""
    answers = iter(
        [
            {"header": {"revision": "4"}},
            {"header": {"revision": "4"}, "succeeded": False},
            {"header": {"revision": 5}, "succeeded": True, "responses": []},
        ]
    )
    async with backend(lambda request: respond(next(answers))) as b:
        for _ in range(2):
            with pytest.raises(ConflictError):
                await b.create(LeaseRecord(name="x"))
        assert (await b.create(LeaseRecord(name="x"))).version == "5"


@pytest.mark.parametrize("revision", ["2", "3"])
async def test_an_update_answered_success_at_or_below_the_compared_revision_is_unknown(
    revision: str,
) -> None:
    """A txn that writes makes a new revision: a success at or below the mod_revision it
    compared (3) was not applied as answered, an unknown outcome; above it is the version."""
    answers = iter([
        {"header": {"revision": revision}, "succeeded": True},
        {"header": {"revision": "4"}, "succeeded": True},
    ])
    async with backend(lambda request: respond(next(answers))) as b:
        with pytest.raises(BackendProtocolError, match="not above the compared revision 3"):
            await b.update(LeaseRecord(name="x", holder="me"), "3")
        assert (await b.update(LeaseRecord(name="x", holder="me"), "3")).version == "4"


async def test_try_held_does_not_spin_on_an_unreadable_txn_answer() -> None:
    """A txn answered `"succeeded": "true"` ends try_held with one write, not a retry loop."""
    requests: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.path)
        if requests.count("/v3/kv/txn") > 50:  # stops the old retry loop, which never paused
            return respond({"code": 3, "message": "enough"}, status=400)
        if request.url.path == "/v3/kv/range":
            return respond(range_answer())
        return respond({"header": {"revision": "4"}, "succeeded": "true"})

    async with backend(handler) as b:
        with pytest.raises(BackendProtocolError):
            async with Lease("x", "me", b).try_held():
                pytest.fail("granted on an unreadable answer")
    assert requests.count("/v3/kv/txn") == 1
    assert requests.count("/v3/kv/range") <= 2  # the attempt's read and the re-read


# -- range answers -------------------------------------------------------------------------

UNREADABLE_RANGE = {
    "not JSON": b"<html></html>",
    "a list": [],
    "no header": {"kvs": [kv()], "count": "1"},
    "header revision 0": {"header": {"revision": "0"}},
    "header revision a bool": {"header": {"revision": True}},
    "kvs an object": {"header": {"revision": "9"}, "kvs": kv()},
    "kvs null": {"header": {"revision": "9"}, "kvs": None},
    "two kvs": range_answer(kv(), kv()),
    "kvs[0] a string": {"header": {"revision": "9"}, "kvs": ["x"], "count": "1"},
    "count without kvs": {"header": {"revision": "9"}, "count": "1"},
    "count not a number": {"header": {"revision": "9"}, "count": "one"},
    "another key": range_answer(kv(key=b64(b"trio_lease/y"))),
    "key not base64": range_answer(kv(key="%%%")),
    "key missing": range_answer(kv(key=None)),
    "key a number": range_answer(kv(key=5)),
    "mod_revision missing": range_answer(kv(mod_revision=None)),
    "mod_revision 0": range_answer(kv(mod_revision="0")),
    "mod_revision negative": range_answer(kv(mod_revision=-7)),
    "mod_revision a float": range_answer(kv(mod_revision=7.5)),
    "mod_revision a bool": range_answer(kv(mod_revision=True)),
    "mod_revision over int64": range_answer(kv(mod_revision=str(2**64))),
    "mod_revision absurdly long": range_answer(kv(mod_revision="9" * 5000)),
    "create_revision 0": range_answer(kv(create_revision="0")),
    "version missing": range_answer(kv(version=None)),
}


@pytest.mark.parametrize("answer", UNREADABLE_RANGE.values(), ids=UNREADABLE_RANGE.keys())
async def test_an_unreadable_range_answer_is_a_protocol_error(answer: object) -> None:
    """A range answer whose shape, key or version cannot be read raises BackendProtocolError."""
    async with backend(lambda request: respond(answer)) as b:
        with pytest.raises(BackendProtocolError, match="kv/range for lease 'x'"):
            await b.get("x")


UNREADABLE_VALUES: dict[str, tuple[object, int, float, str]] = {
    # stored value: (kv "value" field, fencing token, duration, what `unreadable` names)
    "foreign text": (b64(b"hello"), -1, 0.0, "not a trio_lease record"),
    "empty value": (None, -1, 0.0, "not a trio_lease record"),
    "not base64": ("@@@", -1, 0.0, "base64"),
    "value a number": (5, -1, 0.0, "base64 string"),
    "invalid UTF-8": (b64(b'{"format": 1, "name": "x\xff"}'), -1, 0.0, "UTF-8"),
    "NaN": (b64(value_of(lease_duration=float("nan"))), -1, 0.0, "NaN"),
    "deep nesting": (b64(b"[" * 100 + b"]" * 100), -1, 0.0, "deeper"),
    "a JSON list": (b64(b"[1, 2]"), -1, 0.0, "a list"),
    "object without format": (b64(b'{"holder": "h"}'), -1, 0.0, "without `format`"),
    "format 2": (b64(value_of(format=2)), -1, 0.0, "value.format"),
    "format true": (b64(value_of(format=True)), -1, 0.0, "value.format"),
    "format 1.0": (b64(value_of(format=1.0)), -1, 0.0, "value.format"),
    "another lease's record": (b64(value_of(name="y")), -1, 0.0, "another lease"),
    "name missing": (b64(value_of(name=None)), -1, 0.0, "another lease"),
    "token a string": (b64(value_of(fencing_token="3")), -1, 5.0, "value.fencing_token"),
    "token a bool": (b64(value_of(fencing_token=True)), -1, 5.0, "value.fencing_token"),
    "token a float": (b64(value_of(fencing_token=3.0)), -1, 5.0, "value.fencing_token"),
    "token negative": (b64(value_of(fencing_token=-2)), -1, 5.0, "value.fencing_token"),
    "token over int64": (b64(value_of(fencing_token=2**63)), -1, 5.0, "value.fencing_token"),
    "token missing": (b64(value_of(fencing_token=None)), -1, 5.0, "value.fencing_token"),
    "holder a list": (b64(value_of(holder=["h"])), 3, 5.0, "value.holder"),
    "holder missing": (b64(value_of(holder=None)), 3, 5.0, "value.holder"),
    "duration a string": (b64(value_of(lease_duration="5")), 3, 0.0, "value.lease_duration"),
    "duration negative": (b64(value_of(lease_duration=-1)), 3, 0.0, "value.lease_duration"),
    "duration huge": (b64(value_of(lease_duration=1e300)), 3, 0.0, "value.lease_duration"),
    "duration a bool": (b64(value_of(lease_duration=True)), 3, 0.0, "value.lease_duration"),
}


@pytest.mark.parametrize(
    ("value", "token", "duration", "named"),
    UNREADABLE_VALUES.values(),
    ids=UNREADABLE_VALUES.keys(),
)
async def test_a_bad_stored_value_reads_as_an_unreadable_record(
    value: object, token: int, duration: float, named: str
) -> None:
    """Our key holding a bad value is a record held by an unknown holder, at its real version."""
    pair = kv()
    if value is None:
        del pair["value"]  # etcd omits an empty value
    else:
        pair["value"] = value
    async with backend(lambda request: respond(range_answer(pair))) as b:
        record = await b.get("x")
    assert record is not None
    assert named in record.unreadable
    assert (record.holder, record.fencing_token, record.lease_duration) == ("", token, duration)
    assert record.version == "7"
    assert not record.is_free


def test_timestamps_are_informational_and_a_bad_one_reads_as_none() -> None:
    """Unparseable timestamps read as None (the record stays readable); naive ones as UTC."""
    bad = decode_record("x", value_of(acquired_at="yesterday", renewed_at=5), "7")
    assert not bad.unreadable
    assert (bad.acquired_at, bad.renewed_at, bad.holder) == (None, None, "h")
    long = decode_record("x", value_of(acquired_at="2024-01-01T00:00:00" + " " * 100), "7")
    assert long.acquired_at is None
    naive = decode_record("x", value_of(renewed_at="2024-01-01T00:00:00"), "7")
    assert naive.renewed_at == datetime(2024, 1, 1, tzinfo=UTC)


HOSTILE_VALUES: list[object] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    2**63,
    -(2**63) - 1,
    "",
    "x",
    "-3",
    "1e3",
    [],
    [1],
    {},
    {"a": 1},
]


def _mutations(answer: dict[str, Any]) -> list[object]:
    """``answer`` with each field (at every depth) replaced by each hostile value, or removed."""
    results: list[object] = []

    def walk(node: object, rebuild: Callable[[object], object]) -> None:
        if isinstance(node, dict):
            for field in node:

                def put(new: object, field: str = field, node: dict[str, Any] = node) -> object:
                    return rebuild({**node, field: new})

                results.append(rebuild({k: v for k, v in node.items() if k != field}))
                for hostile in HOSTILE_VALUES:
                    results.append(put(hostile))
                walk(node[field], put)
        elif isinstance(node, list):
            for i, item in enumerate(node):

                def put_item(new: object, i: int = i, node: list[Any] = node) -> object:
                    return rebuild([*node[:i], new, *node[i + 1 :]])

                walk(item, put_item)

    walk(answer, lambda new: new)
    return results


def test_no_foreign_exception_escapes_any_mutated_answer() -> None:
    """Every field of range, txn and watch answers replaced by hostile values: LeaseError only."""
    readers: list[tuple[dict[str, Any], Callable[[dict[str, Any]], object]]] = [
        (range_answer(kv()), functools.partial(read_range, key=KEY, name="x")),
        ({"header": {"revision": "4"}, "succeeded": True, "responses": [{}]}, read_txn),
        (
            {"result": {"header": {"revision": "9"}, "events": [{"type": "PUT", "kv": kv()}]}},
            functools.partial(read_watch_result, key=KEY, name="x"),
        ),
    ]
    checked = 0
    for answer, reader in readers:
        for mutated in _mutations(answer):
            with contextlib.suppress(LeaseError):
                read_answer(json.dumps(mutated).encode(), "test", reader, write=False)
            checked += 1
    for field in ("format", "name", "holder", "lease_duration", "fencing_token", "acquired_at"):
        for hostile in HOSTILE_VALUES:
            record = decode_record("x", value_of(**{field: hostile}), "7")
            assert record.version == "7"
            checked += 1
    assert checked > 500


# -- error answers -------------------------------------------------------------------------

ERROR_BODIES = {
    # HTTP status, body, expected class (the HTTP status decides when the code is not valid)
    "code a string": (503, {"code": "14", "message": "m"}, BackendUnavailable),
    "code a bool": (400, {"code": True, "message": "m"}, BackendError),
    "code a float": (400, {"code": 14.0, "message": "m"}, BackendError),
    "code out of range": (400, {"code": 99, "message": "m"}, BackendError),
    "code huge": (400, {"code": 10**20, "message": "m"}, BackendError),
    "message a list": (503, {"code": 14, "message": ["no leader"]}, BackendUnavailable),
    "error a number": (502, {"error": 5}, BackendUnavailable),
    "an HTML page": (
        502,
        b"<html><body>Bad Gateway from the proxy</body></html>",
        BackendUnavailable,
    ),
    "a JSON string": (504, b'"timeout"', BackendUnavailable),
    "empty": (500, b"", BackendUnavailable),
}


@pytest.mark.parametrize(("status", "body", "kind"), ERROR_BODIES.values(), ids=ERROR_BODIES.keys())
async def test_error_bodies_of_the_wrong_shape_map_by_http_status(
    status: int, body: object, kind: type[BackendError]
) -> None:
    """A code that is not a gRPC code is ignored; a non-JSON body is never quoted."""
    async with backend(lambda request: respond(body, status)) as b:
        with pytest.raises(BackendError) as info:
            await b.create(LeaseRecord(name="x"))
    assert type(info.value) is kind
    assert "<html" not in str(info.value)
    assert "Bad Gateway" not in str(info.value)


async def test_error_messages_quote_only_a_short_excerpt_without_control_characters() -> None:
    """etcd's message is quoted cut short, with CR, LF, ESC and bidi controls removed."""
    message = "etcdserver: no leader\r\nX-Injected: 1\x1b[31m\u202e" + "x" * 10_000
    body = {"code": 14, "message": message, "error": message}
    async with backend(lambda request: respond(body, 503)) as b:
        with pytest.raises(BackendUnavailable) as info:
            await b.create(LeaseRecord(name="x"))
    text = str(info.value)
    assert "etcdserver: no leader" in text
    assert not any(c in text for c in "\r\n\x1b\u202e")
    assert len(text) < 400


# -- auth ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token", ["tok\r\nX-Injected: 1", "tok\n", "to k", "tök", "", 5, None, "t" * 5000]
)
async def test_an_auth_token_unfit_for_a_header_is_a_protocol_error(token: object) -> None:
    """A token with control characters, spaces or non-ASCII never reaches a request header."""
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        if request.url.path == "/v3/auth/authenticate":
            return respond({"header": {"revision": "1"}, "token": token})
        return respond(range_answer())

    async with backend(handler, username="u", password="pw") as b:
        with pytest.raises(BackendProtocolError, match="token"):
            await b.get("x")
    assert paths == ["/v3/auth/authenticate"]


# -- TLS -----------------------------------------------------------------------------------


def _untrusted(request: httpx.Request) -> httpx.Response:
    """What both HTTP paths raise when the server's certificate fails verification."""
    cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] verify failed")
    raise httpx.ConnectError("certificate verify failed", request=request) from cause


async def test_an_untrusted_server_certificate_is_a_configuration_error() -> None:
    """Certificate verification failing on every endpoint raises LeaseConfigError (ca-file)."""
    hosts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        return _untrusted(request)

    async with backend(handler, endpoints=[A, B]) as b:
        with pytest.raises(LeaseConfigError, match="ca-file"):
            await b.create(LeaseRecord(name="x"))  # nothing was sent: both are tried
        assert hosts == ["a.invalid", "b.invalid"]
        with pytest.raises(LeaseConfigError, match="ca-file"):
            async with b.watch("x") as records:
                async for _ in records:
                    pass


async def test_an_untrusted_certificate_on_the_watch_stream_ends_the_watch() -> None:
    """A watch stream whose server fails verification ends with LeaseConfigError, no retries."""
    watches = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal watches
        if request.url.path == "/v3/kv/range":
            return respond(range_answer())
        watches += 1
        return _untrusted(request)

    async with backend(handler) as b:
        with anyio.fail_after(10), pytest.raises(LeaseConfigError, match="ca-file"):
            async with b.watch("x") as records:
                async for _ in records:
                    pass
    assert watches == 1


# -- watch -----------------------------------------------------------------------------------


def stream(*lines: object) -> httpx.Response:
    content = b"\n".join(x if isinstance(x, bytes) else json.dumps(x).encode() for x in lines)
    return httpx.Response(200, content=content)


CREATED = {"result": {"header": {"revision": "9"}, "created": True}}


async def _watch_requests(handler: Handler, seconds: float) -> list[float]:
    """Times at which the watch opened a stream, following it for ``seconds`` (virtual)."""
    opened: list[float] = []

    def counting(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v3/watch":
            opened.append(anyio.current_time())
        return handler(request)

    async with backend(counting) as b:
        with anyio.move_on_after(seconds):
            async with b.watch("x") as records:
                async for _ in records:
                    pass
    return opened


async def test_a_watch_stream_that_ends_without_events_is_reopened_with_growing_pauses() -> None:
    """Streams that deliver nothing are reopened after pauses doubling up to 2 s, not 20/s."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v3/kv/range":
            return respond(range_answer())
        return stream(CREATED)  # one useless result, then the stream ends

    opened = await _watch_requests(handler, 20)
    gaps = [later - earlier for earlier, later in itertools.pairwise(opened)]
    assert 6 <= len(opened) <= 30  # 20 s: 1.6-3.2 s to reach the cap, then one per 1-2 s
    assert max(gaps) <= 2.0 + 1e-6
    assert gaps[-1] >= 1.0  # capped at 2 s, jittered by x 0.5-1


@pytest.mark.parametrize(
    "ending",
    [
        {"result": {"header": {"revision": "9"}, "canceled": True}},
        {"result": {"header": {"revision": "9"}, "compact_revision": "5"}},
        {"error": {"grpc_code": 14, "message": "etcdserver: no leader"}},
        b"not JSON",
        {"result": {"events": [{"type": "MODIFY", "kv": kv()}]}},
    ],
)
async def test_a_stream_ended_by_the_server_backs_off_too(ending: object) -> None:
    """Canceled, compacted, error and unreadable lines reopen the watch after growing pauses."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v3/kv/range":
            return respond(range_answer())
        return stream(CREATED, ending)

    opened = await _watch_requests(handler, 20)
    assert 6 <= len(opened) <= 30


async def test_a_watch_that_delivers_events_resets_its_pause() -> None:
    """A stream that delivers an event of the key is reopened after the first short pause."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v3/kv/range":
            return respond(range_answer())
        return stream(CREATED, {"result": {"events": [{"kv": kv()}]}})

    opened = await _watch_requests(handler, 2)
    assert len(opened) >= 30  # a pause of 0.025-0.05 s each time


UNREADABLE_LINES = {
    "not JSON": b"{result",
    "result a list": {"result": []},
    "no result": {"header": {}},
    "events an object": {"result": {"events": {"kv": kv()}}},
    "event a string": {"result": {"events": ["PUT"]}},
    "type MODIFY": {"result": {"events": [{"type": "MODIFY", "kv": kv()}]}},
    "type a number": {"result": {"events": [{"type": 0, "kv": kv()}]}},
    "event without kv": {"result": {"events": [{"type": "PUT"}]}},
    "another key": {"result": {"events": [{"kv": kv(key=b64(b"trio_lease/y"))}]}},
    "delete of another key": {
        "result": {"events": [{"type": "DELETE", "kv": {"key": b64(b"y"), "mod_revision": "8"}}]}
    },
    "delete without mod_revision": {
        "result": {"events": [{"type": "DELETE", "kv": {"key": b64(KEY)}}]}
    },
    "canceled a string": {"result": {"canceled": "yes"}},
    "compact_revision a word": {"result": {"compact_revision": "five"}},
    "header revision a list": {"result": {"header": {"revision": []}}},
    "too long a line": b'{"result": {"x": "' + b"a" * (MAX_WATCH_LINE + 10),
}


@pytest.mark.parametrize("line", UNREADABLE_LINES.values(), ids=UNREADABLE_LINES.keys())
async def test_an_unreadable_watch_line_is_a_protocol_error_and_never_a_state(
    line: object,
) -> None:
    """A bad watch line raises BackendProtocolError in the client; the watch re-reads instead."""
    ranges = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal ranges
        if request.url.path == "/v3/kv/range":
            ranges += 1
            return respond(range_answer(kv()))
        return stream(CREATED, line)

    b = backend(handler)
    async with b:
        read = functools.partial(read_watch_result, key=KEY, name="x")
        with pytest.raises(BackendProtocolError, match="answer to watch at"):
            async with contextlib.aclosing(b._client.watch(KEY, 10, read=read)) as batches:
                async for _ in batches:
                    pass
        seen: list[LeaseRecord | None] = []
        with anyio.fail_after(30):
            async with b.watch("x") as records:
                async for state in records:
                    seen.append(state)
                    if len(seen) == 2:
                        break
    assert ranges == 2  # the second state comes from reading again, not from the bad line
    assert seen[0] == seen[1]
    assert seen[0] is not None
    assert seen[0].version == "7"


# -- the lean HTTP path (no injected transport): a scripted server on loopback ---------------

Script = Callable[[str, bytes], bytes]


def http_reply(
    body: bytes, status: str = "200 OK", content_type: str = "application/json"
) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}"
    return head.encode() + b"\r\n\r\n" + body


async def _read_request(stream: anyio.abc.ByteStream, buffer: bytearray) -> tuple[str, bytes]:
    while b"\r\n\r\n" not in buffer:
        buffer += await stream.receive()
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    buffer[:] = rest
    lines = head.decode("latin-1").split("\r\n")
    length = next(
        (
            int(v)
            for n, _, v in (x.partition(":") for x in lines[1:])
            if n.lower() == "content-length"
        ),
        0,
    )
    while len(buffer) < length:
        buffer += await stream.receive()
    body = bytes(buffer[:length])
    del buffer[:length]
    return lines[0].split(" ")[1], body


@contextlib.asynccontextmanager
async def scripted(script: Script, paths: list[str]) -> AsyncIterator[str]:
    """An HTTP/1.1 server on 127.0.0.1 answering each request with ``script(path, body)``."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def handle(stream: anyio.abc.SocketStream) -> None:
        buffer = bytearray()
        async with stream:  # closed when the client leaves (else left to the GC)
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    path, body = await _read_request(stream, buffer)
                    paths.append(path)
                    await stream.send(script(path, body))

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield f"http://127.0.0.1:{port}"
        tg.cancel_scope.cancel()


class TestLeanPath:
    """The same checks on the lean HTTP client, which carries unary calls in production."""

    @pytest.fixture
    def anyio_backend(self, real_time_backend: str) -> str:
        """Real time on both loops: these tests use real sockets."""
        return real_time_backend

    async def test_hostile_answers_are_checked_the_same_on_the_lean_path(self) -> None:
        """Unreadable txn and range answers, HTML errors and bad tokens on real sockets."""
        answers = {
            "/v3/kv/txn": http_reply(b'{"header": {"revision": "4"}, "succeeded": "true"}'),
            "/v3/kv/range": http_reply(json.dumps(range_answer(kv(), kv())).encode()),
        }
        paths: list[str] = []
        async with scripted(lambda path, body: answers[path], paths) as url:
            async with EtcdBackend([url]) as b:
                with anyio.fail_after(10):
                    with pytest.raises(BackendProtocolError, match="outcome is unknown"):
                        await b.create(LeaseRecord(name="x"))
                    with pytest.raises(BackendProtocolError, match="kvs"):
                        await b.get("x")
            assert paths == ["/v3/kv/txn", "/v3/kv/range"]

    async def test_an_html_error_page_and_a_bad_token_on_the_lean_path(self) -> None:
        """A proxy's HTML page is not quoted; a CR/LF token is a protocol error, never sent."""
        page = b"<html><title>502 Bad Gateway</title></html>"
        token = b'{"token": "tok\\r\\nX-Injected: 1"}'

        def script(path: str, body: bytes) -> bytes:
            if path == "/v3/auth/authenticate":
                return http_reply(token)
            return http_reply(page, "502 Bad Gateway", "text/html")

        paths: list[str] = []
        async with scripted(script, paths) as url:
            async with EtcdBackend([url]) as b:
                with anyio.fail_after(10), pytest.raises(BackendUnavailable) as info:
                    await b.create(LeaseRecord(name="x"))
            assert "Bad Gateway" not in str(info.value)
            assert "HTTP 502" in str(info.value)
            async with EtcdBackend([url], username="u", password="pw") as b:
                with anyio.fail_after(10), pytest.raises(BackendProtocolError, match="token"):
                    await b.get("x")
        assert paths == ["/v3/kv/txn", "/v3/auth/authenticate"]
