"""The unary seam's own errors (trio_lease/_http_errors.py), and the one place foreign errors
become them: every httpx error type has an entry, and nothing foreign escapes the seam."""

from __future__ import annotations

import inspect
import ssl

import anyio
import httpx
import pytest
import trio

from trio_lease import _http_errors
from trio_lease._http_errors import (
    ConnectFailed,
    ConnectTimedOut,
    HTTPFailure,
    MalformedReply,
    NotEncodable,
    NotSent,
    OutcomeUnknown,
    ReceiveFailed,
    SendFailed,
    UndecodableBody,
    translate,
)
from trio_lease._reply import EncodeError, ReplyError


def _httpx_error_types() -> list[type[Exception]]:
    found: list[type[Exception]] = []
    pending: list[type[Exception]] = [httpx.HTTPError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return [cls for cls in found if cls.__module__.startswith("httpx")]


@pytest.mark.parametrize("theirs", _httpx_error_types(), ids=lambda cls: cls.__name__)
def test_every_httpx_error_type_has_its_own_entry(theirs: type[Exception]) -> None:
    """Each httpx error class (walked from httpx.HTTPError, so a new one in a later httpx is
    found) is named in the translation table itself, not caught by a parent's entry."""
    assert theirs in dict(_http_errors._HTTPX), f"{theirs.__name__} has no entry"


@pytest.mark.parametrize("theirs", _httpx_error_types(), ids=lambda cls: cls.__name__)
def test_every_httpx_error_becomes_a_seam_error_quoting_nothing_of_the_wire(
    theirs: type[Exception],
) -> None:
    """An httpx error of each type becomes the seam's error of its entry; one whose message
    may quote the wire keeps neither that text nor the original."""
    request = httpx.Request("GET", "https://kube.test/")
    text = "illegal header line: b'secret'"
    response = httpx.Response(500, request=request)
    exc: Exception
    for kwargs in ({"request": request}, {"request": request, "response": response}, {}):
        try:
            exc = theirs(text, **kwargs)
            break
        except TypeError:
            continue
    ours = translate(exc)
    assert type(ours) is dict(_http_errors._HTTPX)[theirs]
    if isinstance(exc, httpx.ProtocolError | httpx.DecodingError | httpx.ProxyError):
        assert "secret" not in str(ours) and ours.__cause__ is None


@pytest.mark.parametrize(
    ("exc", "stage", "ours"),
    [
        (ConnectionRefusedError(111, "refused"), "connect", ConnectFailed),
        (ssl.SSLCertVerificationError(1, "certificate verify failed"), "connect", ConnectFailed),
        (TimeoutError(), "connect", ConnectTimedOut),
        (anyio.BrokenResourceError(), "send", SendFailed),
        (trio.BrokenResourceError(), "send", SendFailed),
        (ConnectionResetError(104, "reset"), "receive", ReceiveFailed),
        (trio.ClosedResourceError(), "receive", ReceiveFailed),
        (ReplyError("a chunk size line is not valid HTTP/1.1"), "receive", MalformedReply),
        (EncodeError("the target is not valid HTTP"), "send", NotEncodable),
    ],
)
def test_socket_tls_loop_and_parser_errors_become_seam_errors(
    exc: Exception, stage: _http_errors.Stage, ours: type[HTTPFailure]
) -> None:
    """The lean client's foreign errors map by the stage they happened at; the socket's and
    TLS's stay as the cause (a certificate check is found through it), the parser's do not."""
    translated = translate(exc, stage)
    assert type(translated) is ours
    if isinstance(exc, ReplyError | EncodeError):
        assert translated.__cause__ is None
    else:
        assert translated.__cause__ is exc


def test_the_tree_says_what_the_caller_may_conclude() -> None:
    """NotSent errors are safe to retry; OutcomeUnknown ones are not: the tree is as documented."""
    assert issubclass(ConnectTimedOut, ConnectFailed) and issubclass(ConnectFailed, NotSent)
    assert issubclass(NotEncodable, NotSent)
    for unknown in (SendFailed, ReceiveFailed, MalformedReply, UndecodableBody):
        assert issubclass(unknown, OutcomeUnknown)
    public = {
        name
        for name, obj in inspect.getmembers(_http_errors, inspect.isclass)
        if issubclass(obj, HTTPFailure)
    }
    assert all(name in (_http_errors.__doc__ or "") for name in public)
    assert not any(
        issubclass(obj, httpx.HTTPError)
        for obj in vars(_http_errors).values()
        if inspect.isclass(obj) and issubclass(obj, HTTPFailure)
    )
