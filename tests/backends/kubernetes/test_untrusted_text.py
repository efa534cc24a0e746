"""Server text that must not travel: our own token quoted back, and strings that are not text.

A Status (or a proxy's echo) may quote our bearer token in any form: after ``Bearer`` with a
quote, a ``+`` or a ``:``, or bare. Messages, exception chains and log records never carry it
(``_errors.clean_text`` cuts every token sent by value, ``_tokens.remember_sent``). A reply with
a lone surrogate escape is refused where it is parsed (``_wire.load_json``), so it never
becomes the base of a PUT whose body cannot be encoded.
On the in-process emulator (or a fake server), on virtual time, asyncio and trio.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from tests._chained import chained_texts
from tests.hostile._server import HostileTransport, Reply, Request
from trio_lease import (
    BackendProtocolError,
    Lease,
    LeaseConfigError,
    LeaseError,
    LeaseRecord,
    LeaseSettings,
)
from trio_lease.backends.kubernetes import KubernetesEvents
from trio_lease.backends.kubernetes._errors import clean_text

from ._helpers import emulator_with_crd, make_backend

pytestmark = pytest.mark.anyio
SETTINGS = LeaseSettings(heartbeat_timeout=15, heartbeat_interval=1.5, lease_operation_timeout=0.5)
#: One with the characters a token may have, one of letters only (it fits a Status ``reason``).
TOKENS = ["s3cr3t-t0ken.ABC_xyz~42/+=", "QuietlySecretLettersOnly"]
QUOTED = [
    'the request carried Authorization: Bearer "{t}"',
    "Authorization: Bearer+{t}",
    "authorization=Bearer:{t}",
    "authorization: bearer%20{t}",
    "token {t} is not allowed to get leases",
    "x{t}y",
    "{t}",
]


def _status(code: int, text: str) -> dict[str, Any]:
    """A Status whose every quoted field carries ``text`` (the reason too, when it is a word)."""
    return {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
        "message": text, "reason": text if text.isalpha() else "Forbidden",
        "details": {"name": text, "kind": text,
                    "causes": [{"field": text, "message": text, "reason": "FieldValueInvalid"}]},
    }


class Quoting(httpx.AsyncBaseTransport):
    """The emulator (knowing ``token``), except that requests ``refuse`` picks get a Status
    quoting ``text``."""

    def __init__(
        self, token: str, refuse: Callable[[httpx.Request], int | None], text: str
    ) -> None:
        emulator = emulator_with_crd()
        emulator.add_token(token, "u", groups=("system:masters",))
        self.inner = emulator.transport()
        self.refuse = refuse
        self.text = text

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        code = self.refuse(request)
        if code is None:
            return await self.inner.handle_async_request(request)
        return httpx.Response(code, json=_status(code, self.text))


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        f"{record.getMessage()} {record.args!r} {record.exc_text or ''}"
        for record in caplog.records
    ) + caplog.text


@pytest.mark.parametrize("code", [403, 409, 422, 429, 500, 418])
@pytest.mark.parametrize("template", QUOTED)
@pytest.mark.parametrize("token", TOKENS, ids=["symbols", "letters"])
async def test_our_token_quoted_by_a_status_never_reaches_the_error(
    token: str, template: str, code: int
) -> None:
    """However a Status quotes our token, no message, repr, arg or chained exception holds it."""
    transport = Quoting(token, lambda request: code, template.format(t=token))
    async with make_backend(transport, token=token, request_timeout=2) as backend:
        with pytest.raises(LeaseError) as info:
            await backend.get("job")
    for text in chained_texts(info.value):
        assert token not in text
    if code in (403, 422, 500):  # these quote the server's text: cut, not dropped
        assert "[redacted]" in str(info.value)


async def test_a_failing_watch_logs_and_raises_no_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Watches refused with a 422 quoting our token: the shared watch's warnings and the
    lease watch's error are without it."""
    token = TOKENS[0]
    caplog.set_level(logging.DEBUG)
    transport = Quoting(
        token,
        lambda request: 422 if request.url.params.get("watch") == "1" else None,
        f"Authorization: Bearer:{token}; {token}",
    )
    async with make_backend(transport, token=token) as backend:
        await backend.create(LeaseRecord("job", holder="other", lease_duration=3600))
        with anyio.move_on_after(10):
            async with Lease("job", "me", backend, SETTINGS).held():
                pass
        with pytest.raises(LeaseConfigError) as info:
            async with backend.watch("job") as states:
                async for _ in states:
                    pass
    assert any("shared watch" in record.getMessage() for record in caplog.records)
    assert token not in _logged(caplog)
    for text in chained_texts(info.value):
        assert token not in text


async def test_a_refused_event_logs_no_token(caplog: pytest.LogCaptureFixture) -> None:
    """An Event POST refused with a Status quoting our token is logged without it."""
    token = TOKENS[1]
    caplog.set_level(logging.DEBUG)
    transport = Quoting(
        token,
        lambda request: 403 if "/events" in request.url.path else None,
        f"token {token} may not create events (Bearer:{token})",
    )
    async with make_backend(transport, token=token) as backend:
        events = KubernetesEvents(backend)
        async with events, Lease("job", "me", backend, SETTINGS, observers=[events]).held():
            pass
    assert events.failed == 2
    assert any("Event not sent" in record.getMessage() for record in caplog.records)
    assert token not in _logged(caplog)


@pytest.mark.parametrize("text", [
    'Bearer "other-credential"', "Bearer+other-credential", "bearer:other-credential",
    "Authorization=Bearer%3Aother-credential", "BASIC 'other-credential'",
    "(bearer) other-credential",
])
def test_credentials_of_others_are_redacted_by_pattern(text: str) -> None:
    """``Bearer``/``Basic`` followed by any separator or quote hides the value after it."""
    cleaned = clean_text(f"the request carried {text}.")
    assert "other-credential" not in cleaned
    assert cleaned.startswith("the request carried ")


@pytest.mark.parametrize("where", ["annotation", "unmodelled field", "key"])
async def test_a_lone_surrogate_in_a_reply_is_a_protocol_error_not_a_put(where: str) -> None:
    """A reply holding "\\ud800" is a BackendProtocolError on get and update; no PUT is sent."""
    obj: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "job", "namespace": "default", "uid": "u1", "resourceVersion": "10",
                     "annotations": {"example.com/note": "SURR"}},
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 15, "strategy": "SURR"},
    }
    if where == "key":
        obj["spec"]["SURR"] = 1
    body = json.dumps(obj).replace("SURR", "\\ud800" if where != "key" else "\\udc00").encode()
    if where == "annotation":
        body = body.replace(b'"strategy": "\\ud800"', b'"strategy": "x"')
    methods: list[str] = []

    async def handler(request: Request, *, socket: bool) -> Reply:
        methods.append(request.method)
        return Reply(200, body, [("Content-Type", "application/json")])

    async with make_backend(HostileTransport(handler)) as backend:
        with pytest.raises(BackendProtocolError, match="surrogate"):
            await backend.get("job")
        record = LeaseRecord("job", holder="me", lease_duration=15, fencing_token=1)
        with pytest.raises(BackendProtocolError, match="surrogate"):
            await backend.update(record, "10")
    assert "PUT" not in methods
