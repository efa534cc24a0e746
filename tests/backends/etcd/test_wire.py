"""The etcd backend's wire handling, against scripted gateway answers (no etcd needed)."""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.backends.etcd._mock import MockTransport
from trio_lease import (
    BackendAuthError,
    BackendUnavailable,
    ConflictError,
    LeaseConfigError,
    LeaseRecord,
)
from trio_lease._slots import urgent
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.backends.etcd._codec import encode_record
from trio_lease.backends.etcd._errors import GRPC_CODES, error_from_status

pytestmark = pytest.mark.anyio

A, B = "http://a.invalid:2379", "http://b.invalid:2379"
SECRET = "s3cr3t-pa55"
Handler = Callable[[httpx.Request], httpx.Response]


def backend(handler: Handler, **kwargs: Any) -> EtcdBackend:
    kwargs.setdefault("endpoints", [A, B])
    return EtcdBackend(transport=MockTransport(handler), **kwargs)


KEY = base64.b64encode(b"trio_lease/x").decode()  # the default prefix + the lease name


def kv(record: LeaseRecord, mod_revision: str) -> dict[str, Any]:
    value = base64.b64encode(encode_record(record)).decode()
    return {
        "key": KEY,
        "create_revision": "2",
        "mod_revision": mod_revision,
        "version": "1",
        "value": value,
    }


def ok(body: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, json={"header": {"revision": "9"}, **body})


async def test_missing_succeeded_means_the_compare_failed() -> None:
    """A txn answer without `succeeded` (proto default false, omitted) is a ConflictError."""
    async with backend(lambda request: ok({})) as b:
        with pytest.raises(ConflictError):
            await b.create(LeaseRecord(name="x", holder="me"))


async def test_versions_come_from_string_encoded_revisions() -> None:
    """64-bit integers arrive as JSON strings; the version is the mod_revision / txn revision."""
    record = LeaseRecord(name="x", holder="me", lease_duration=7.5, fencing_token=3)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v3/kv/range":
            return ok({"kvs": [kv(record, "12345678901234")], "count": "1"})
        return ok({"succeeded": True})

    async with backend(handler) as b:
        read = await b.get("x")
        assert read is not None
        assert read.version == "12345678901234"
        assert (read.holder, read.lease_duration, read.fencing_token) == ("me", 7.5, 3)
        assert (await b.create(record)).version == "9"


async def test_empty_range_omits_kvs_and_reads_as_none() -> None:
    """A range answer without `kvs` (omitted when empty) reads as a missing record."""
    async with backend(lambda request: ok({})) as b:
        assert await b.get("x") is None


async def test_update_rejects_a_non_revision_version_without_sending() -> None:
    """update() with version "0" or garbage conflicts locally (MOD == 0 would create the key)."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return ok({"succeeded": True})

    async with backend(handler) as b:
        for version in ("0", "", "abc", "-3"):
            with pytest.raises(ConflictError):
                await b.update(LeaseRecord(name="x"), version)
    assert sent == []


async def test_update_compares_mod_revision_and_create_compares_create_revision() -> None:
    """create sends CREATE == 0 and update sends MOD == expected, with base64 keys and values."""
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return ok({"succeeded": True})

    async with backend(handler, prefix="p/") as b:
        await b.create(LeaseRecord(name="x", holder="me"))
        await b.update(LeaseRecord(name="x", holder="me"), "5")
    key = base64.b64encode(b"p/x").decode()
    assert bodies[0]["compare"] == [
        {"target": "CREATE", "create_revision": "0", "key": key, "result": "EQUAL"}
    ]
    assert bodies[1]["compare"] == [
        {"target": "MOD", "mod_revision": "5", "key": key, "result": "EQUAL"}
    ]
    put = bodies[1]["success"][0]["request_put"]
    assert json.loads(base64.b64decode(put["value"]))["holder"] == "me"


async def test_connection_refused_fails_over_to_the_next_endpoint_even_for_writes() -> None:
    """A write that could not connect was never sent, so it goes to the next endpoint."""
    hosts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        if request.url.host == "a.invalid":
            raise httpx.ConnectError("refused", request=request)
        return ok({"succeeded": True})

    async with backend(handler) as b:
        await b.create(LeaseRecord(name="x"))
        await b.create(LeaseRecord(name="y"))
    assert hosts == ["a.invalid", "b.invalid", "b.invalid"]


async def test_a_write_lost_after_sending_is_unknown_and_not_retried() -> None:
    """A read timeout on a write raises BackendUnavailable (outcome unknown), one request only."""
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.host)
        raise httpx.ReadTimeout("slow", request=request)

    async with backend(handler) as b:
        with pytest.raises(BackendUnavailable, match="outcome is unknown"):
            await b.update(LeaseRecord(name="x"), "3")
    assert sent == ["a.invalid"]


async def test_tls_errors_escaping_httpx_are_unavailable() -> None:
    """An ssl.SSLError raised past httpx (rejected client cert) becomes BackendUnavailable."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise ssl.SSLError(1, "[SSL: SSLV3_ALERT_BAD_CERTIFICATE] sslv3 alert bad certificate")

    async with backend(handler) as b:
        with pytest.raises(BackendUnavailable, match="SSLError"):
            await b.update(LeaseRecord(name="x"), "3")


async def test_unavailable_write_is_not_retried_but_reads_try_every_endpoint() -> None:
    """A 503 fails a write at once; a read tries the other endpoints before giving up."""
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(f"{request.url.host}{request.url.path}")
        body = {"error": "etcdserver: no leader", "message": "etcdserver: no leader", "code": 14}
        return httpx.Response(503, json=body)

    async with backend(handler) as b:
        with pytest.raises(BackendUnavailable, match="no leader"):
            await b.create(LeaseRecord(name="x"))
        assert sent == ["a.invalid/v3/kv/txn"]
        sent.clear()
        with pytest.raises(BackendUnavailable, match="no endpoint answered"):
            await b.get("x")
        assert sorted(sent) == ["a.invalid/v3/kv/range", "b.invalid/v3/kv/range"]


async def test_requests_carry_require_leader_and_the_callers_deadline() -> None:
    """Requests ask for a leader and pass the time left under the caller's deadline."""
    headers: list[httpx.Headers] = []

    def handler(request: httpx.Request) -> httpx.Response:
        headers.append(request.headers)
        return ok({})

    async with backend(handler) as b:
        with anyio.fail_after(3):
            await b.get("x")
    assert headers[0]["grpc-metadata-hasleader"] == "true"
    assert 0 < int(headers[0]["grpc-timeout"].removesuffix("m")) <= 3000


async def test_expired_token_is_renewed_once_and_the_password_never_leaks() -> None:
    """An invalid-token answer re-authenticates and resends; errors and repr omit the password."""
    tokens = iter(["tok1", "tok2"])
    log: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        log.append(f"{path} {request.headers.get('authorization')}")
        if path == "/v3/auth/authenticate":
            assert json.loads(request.content) == {"name": "u", "password": SECRET}
            return ok({"token": next(tokens)})
        if request.headers.get("authorization") == "tok1":
            body = {
                "error": "etcdserver: invalid auth token",
                "code": 16,
                "message": "etcdserver: invalid auth token",
            }
            return httpx.Response(401, json=body)
        return ok({})

    async with backend(handler, username="u", password=SECRET) as b:
        assert await b.get("x") is None
        assert SECRET not in repr(b)
    assert log == [
        "/v3/auth/authenticate None",
        "/v3/kv/range tok1",
        "/v3/auth/authenticate None",
        "/v3/kv/range tok2",
    ]

    def refuse(request: httpx.Request) -> httpx.Response:
        message = "etcdserver: authentication failed, invalid user ID or password"
        return httpx.Response(400, json={"error": message, "message": message, "code": 3})

    async with backend(refuse, username="u", password=SECRET) as b:
        with pytest.raises(BackendAuthError) as info:
            await b.get("x")
    assert SECRET not in str(info.value)
    assert "password" in str(info.value)


def test_every_grpc_code_maps_to_a_backend_error() -> None:
    """Each gRPC status code 0-16 has a mapping, and transient ones are BackendUnavailable."""
    assert sorted(GRPC_CODES) == list(range(17))
    for code, (_, kind) in GRPC_CODES.items():
        error = error_from_status(
            500, {"code": code, "message": "m"}, operation="kv/txn", endpoint=A, prefix="p/"
        )
        assert type(error) is kind
    transient = {code for code, (_, kind) in GRPC_CODES.items() if kind is BackendUnavailable}
    assert transient == {1, 2, 4, 8, 10, 13, 14}
    assert isinstance(
        error_from_status(502, None, operation="x", endpoint=A, prefix="p/"), BackendUnavailable
    )
    denied = error_from_status(
        403,
        {"code": 7, "message": "etcdserver: permission denied"},
        operation="kv/txn",
        endpoint=A,
        prefix="jobs/",
    )
    assert isinstance(denied, BackendAuthError)
    assert "readwrite" in str(denied)
    assert "jobs/" in str(denied)


def test_foreign_data_under_the_prefix_reads_as_an_unreadable_record() -> None:
    """A value that is not a trio_lease record is held by an unknown holder, token -1."""
    from trio_lease.backends.etcd._codec import decode_record

    record = decode_record("x", b"hello", "4")
    assert (record.holder, record.fencing_token, record.version) == ("", -1, "4")
    assert "prefix" in record.unreadable
    assert not record.is_free


def test_from_config_takes_kebab_case_keys(tmp_path: Path) -> None:
    """from_config maps kebab-case keys, reads password-file, and ignores the core's keys."""
    secret = tmp_path / "pw"
    secret.write_text(SECRET + "\n")
    b = EtcdBackend.from_config(
        {
            "lease-class": "etcd",
            "heartbeat-timeout": "20s",
            "endpoints": [A, B],
            "prefix": "jobs/",
            "username": "u",
            "password-file": str(secret),
            "connect-timeout": 1,
            "request-timeout": 4.5,
        }
    )
    assert b.endpoints == (A, B)
    assert b.prefix == "jobs/"
    assert SECRET not in repr(b)
    assert EtcdBackend.from_config({"endpoints": f"{A}, {B}"}).endpoints == (A, B)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"endpoint": [A]}, "endpoint"),
        ({"endpoints": []}, "endpoints"),
        ({"endpoints": ["a.invalid:2379"]}, "endpoints"),
        ({"endpoints": [A], "prefix": 3}, "prefix"),
        ({"username": "u"}, "password"),
        ({"key-file": "k.pem"}, "cert-file"),
        ({"ca-file": "/nonexistent/ca.pem"}, "ca-file"),
        ({"request-timeout": 0}, "request-timeout"),
        ({"password-file": "/nonexistent/pw"}, "password-file"),
    ],
)
def test_from_config_rejects_bad_keys_by_name(config: dict[str, Any], named: str) -> None:
    """A bad or unknown configuration key raises LeaseConfigError naming it."""
    with pytest.raises(LeaseConfigError, match=named):
        EtcdBackend.from_config(config)


async def test_watch_decodes_events_and_rereads_after_an_error_line() -> None:
    """watch yields the read, then PUT (type omitted) and DELETE events; an error line re-reads."""
    first = LeaseRecord(name="x", holder="a")
    watches: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v3/kv/range":
            return httpx.Response(200, json={"header": {"revision": "5"}, "kvs": [kv(first, "5")]})
        watches.append(json.loads(request.content))
        lines = [
            {"result": {"header": {"revision": "5"}, "created": True}},
            {"result": {"events": [{"kv": kv(dataclasses.replace(first, holder="b"), "6")}]}},
            {
                "result": {
                    "events": [{"type": "DELETE", "kv": {"key": KEY, "mod_revision": "7"}}]
                }
            },
            {"error": {"grpc_code": 14, "http_code": 503, "message": "etcdserver: no leader"}},
        ]
        return httpx.Response(200, content=b"\n".join(json.dumps(x).encode() for x in lines))

    seen: list[tuple[str, str] | None] = []
    async with backend(handler) as b:
        with anyio.fail_after(5):
            async with b.watch("x") as records:
                async for state in records:
                    seen.append(None if state is None else (state.holder, state.version))
                    if len(seen) == 4:
                        break
    assert seen == [("a", "5"), ("b", "6"), None, ("a", "5")]
    assert watches[0]["create_request"]["start_revision"] == "6"


async def test_at_most_four_unary_requests_are_in_flight() -> None:
    """A burst of calls queues in the client, not in httpcore's pool (the benchmarks README, 5)."""
    in_flight = peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await anyio.sleep(0.01)
        in_flight -= 1
        return ok({"header": {"revision": "1"}})

    client = backend(handler)  # type: ignore[arg-type]
    results: list[LeaseRecord | None] = []

    async def read(i: int) -> None:
        results.append(await client.get(f"job-{i}"))

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(read, i)
    assert results == [None] * 20
    assert peak == 4


async def test_an_urgent_call_overtakes_queued_ones() -> None:
    """Renewals (marked urgent by the core) go before calls already waiting for a slot."""
    arrivals: list[str] = []
    answer = anyio.Event()  # the server answers nothing until every call is in place

    async def handler(request: httpx.Request) -> httpx.Response:
        arrivals.append(base64.b64decode(json.loads(request.content)["key"]).decode())
        await answer.wait()
        return ok({"header": {"revision": "1"}})

    client = backend(handler)  # type: ignore[arg-type]

    async def read(name: str, *, marked: bool = False) -> None:
        if marked:
            with urgent():
                await client.get(name)
        else:
            await client.get(name)

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(read, f"acquire-{i}")
        await anyio.wait_all_tasks_blocked()  # 4 in flight, 16 waiting for a slot
        assert len(arrivals) == 4, arrivals
        tg.start_soon(functools.partial(read, "renewal", marked=True))
        await anyio.wait_all_tasks_blocked()  # the renewal waits for a slot too
        answer.set()
    renewal = next(i for i, key in enumerate(arrivals) if key.endswith("renewal"))
    # Among the four handed a slot when the first four finish (the loop may run those in any
    # order), not behind the sixteen that were waiting before it.
    assert 4 <= renewal < 8, arrivals
