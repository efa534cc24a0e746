"""The etcd backend's password and auth token, quoted back by a server, in no error or log.

A gateway or a proxy may echo our request (the authenticate body with the password, the
``Authorization`` header with the token) in any form; the client remembers both as it sends
them (trio_lease._secrets), and etcd's message is quoted with them cut out. Scripted gateway
answers (httpx.MockTransport), virtual time, asyncio and trio.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from typing import Any

import anyio
import httpx
import pytest

from tests._chained import chained_texts
from tests.backends.etcd._mock import MockTransport
from trio_lease import BackendAuthError, BackendError, LeaseRecord
from trio_lease._abc import Watched
from trio_lease.backends.etcd import EtcdBackend
from trio_lease.testing import virtual_time_backends

pytestmark = pytest.mark.anyio

A, B = "http://a.invalid:2379", "http://b.invalid:2379"
#: Non-ASCII, a quote, a slash and a space: each form of it differs; its ends mark every form.
PASSWORD = 'Pw4-p\u00e4"ss/w\u00f6rd kQ2'
#: Visible ASCII as etcd's tokens, with characters that percent-encoding changes.
TOKEN = "Tk8zRfJq/WmNp+Ls.117"
PASSWORD_FORMS = {
    "json": json.dumps({"name": "u", "password": PASSWORD}, separators=(",", ":")),  # echoed
    "percent": "password=" + urllib.parse.quote(PASSWORD, safe=""),
    "upper": f"PASSWORD {PASSWORD.upper()}!",
    "in-a-word": f"x{PASSWORD}y",
    "zero-width": PASSWORD.replace("ss", "s\u200bs"),  # reads whole in a terminal
}
TOKEN_FORMS = {
    "header": f"Authorization: {TOKEN}",
    "quoted": f'token "{TOKEN}" is not valid',
    "percent": "t=" + urllib.parse.quote(TOKEN, safe=""),
    "lower": TOKEN.lower(),
    "in-a-word": f"x{TOKEN}y",
}


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Both loops on virtual time (the etcd folder's default is real time, for real servers)."""
    name: str = request.param
    return name, dict(virtual_time_backends())[name]


def _hidden(text: str) -> bool:
    """Neither secret shows in any form: the ends of each, in any case."""
    lowered = text.lower()
    return not any(mark in lowered for mark in ("pw4-p", "kq2", "tk8zrfjq", "ls.117"))


def _error(status: int, code: int, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": message, "message": message, "code": code})


def _authenticated(
    refuse: httpx.Response | None, *, authenticate: httpx.Response | None = None
) -> MockTransport:
    """A gateway that hands out TOKEN, answers authenticate with ``authenticate`` if given, and
    every other call with ``refuse``."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v3/auth/authenticate":
            assert json.loads(request.content)["password"] == PASSWORD
            if authenticate is not None:
                return authenticate
            return httpx.Response(200, json={"header": {"revision": "1"}, "token": TOKEN})
        assert request.headers["authorization"] == TOKEN
        assert refuse is not None
        return refuse

    return MockTransport(handler)


def _backend(transport: MockTransport) -> EtcdBackend:
    return EtcdBackend([A, B], username="u", password=PASSWORD, transport=transport)


@pytest.mark.parametrize("form", PASSWORD_FORMS.values(), ids=PASSWORD_FORMS.keys())
async def test_the_password_quoted_by_a_failing_authenticate_is_in_no_error(form: str) -> None:
    """An authenticate refused with a message echoing the password: the error (tried on both
    endpoints) quotes etcd's message without it, in its str, repr, args and chain."""
    refused = _error(500, 13, f"etcdserver: cannot read request {form}")
    async with _backend(_authenticated(None, authenticate=refused)) as backend:
        with pytest.raises(BackendError) as info:
            await backend.get("x")
    assert "[redacted]" in str(info.value)
    assert all(_hidden(text) for text in chained_texts(info.value))


@pytest.mark.parametrize("status", [403, 503])
@pytest.mark.parametrize("form", TOKEN_FORMS.values(), ids=TOKEN_FORMS.keys())
async def test_the_token_quoted_by_a_failing_call_is_in_no_error(form: str, status: int) -> None:
    """A call refused (permission denied, unavailable) with a message echoing our auth token:
    the error quotes etcd's message without it."""
    refused = _error(status, 7 if status == 403 else 14, f"etcdserver: bad request {form}")
    async with _backend(_authenticated(refused)) as backend:
        with pytest.raises(BackendError) as info:
            await backend.create(LeaseRecord(name="x"))
    assert "[redacted]" in str(info.value)
    assert all(_hidden(text) for text in chained_texts(info.value))


async def test_a_watch_error_quoting_the_token_is_logged_and_raised_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Watch streams ending in an error line that echoes the token: the shared watch's log
    lines while it retries, and the error that ends it, are without it."""
    caplog.set_level(logging.DEBUG)
    lines = iter([(14, "etcdserver: no leader"), (14, "leader lost"), (7, "denied")])

    def watch_answer() -> httpx.Response:
        code, said = next(lines)
        line = {"error": {"grpc_code": code, "message": f"{said}; {TOKEN_FORMS['header']}"}}
        return httpx.Response(200, content=json.dumps(line).encode() + b"\n")

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v3/auth/authenticate":
            return httpx.Response(200, json={"header": {"revision": "1"}, "token": TOKEN})
        if request.url.path == "/v3/kv/range":
            return httpx.Response(200, json={"header": {"revision": "10"}})
        return watch_answer()

    backend = EtcdBackend(
        [A],
        prefix="leases/",
        username="u",
        password=PASSWORD,
        transport=MockTransport(handler),
    )
    async with backend:
        watched = Watched()
        watched.add("job")
        with anyio.fail_after(60), pytest.raises(BackendAuthError) as info:
            await backend.watch_feed().run(watched, lambda name, state: None)
    logged = [record.getMessage() for record in caplog.records]
    assert sum("opening it again" in message for message in logged) == 2
    assert any("[redacted]" in message for message in logged)
    assert all(_hidden(message) for message in logged)
    assert _hidden(caplog.text)
    assert all(_hidden(text) for text in chained_texts(info.value))
