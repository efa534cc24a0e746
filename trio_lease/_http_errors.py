"""The errors of the unary request seam (:mod:`trio_lease._http`), and the one place where
foreign errors become them.

Every implementation of the seam raises these, whatever carries the request (the lean
client on asyncio or trio, httpx for proxies and injected transports, the emulator's in-process
seam); the backends' error mapping reads only these. :func:`translate` is the only place a
foreign error (httpx's, the socket's, TLS's, the event loop's, the reply parser's) becomes one;
``tests/test_http_errors.py`` fails when an httpx error type has no entry here.

The tree, by what the caller may conclude::

    HTTPFailure                  a request failed; never quotes what the server sent
    ├── NotSent                  nothing reached the server: safe to retry
    │   ├── ConnectFailed        no connection (refused, DNS, TLS handshake, proxy refusal)
    │   │   └── ConnectTimedOut  no connection within connect_timeout
    │   └── NotEncodable         the request cannot be written in HTTP/1.1 (no value quoted)
    └── OutcomeUnknown           the request may have reached the server
        ├── SendFailed           writing the request failed
        ├── ReceiveFailed        reading the reply failed (the connection broke, or timed out)
        └── MalformedReply       the reply breaks HTTP/1.1
            └── UndecodableBody  its body's Content-Encoding cannot be decoded

A translated error keeps the foreign one as its ``__cause__`` only when its message cannot
quote the wire (a socket's or TLS's error: ``tls_verification_failed`` reads the chain); a
parser's or httpx's protocol error is dropped entirely (its text may quote the reply's bytes,
and a reply may echo our token).
"""

from __future__ import annotations

import re
from typing import Final, Literal

import httpx

__all__ = [
    "ConnectFailed",
    "ConnectTimedOut",
    "HTTPFailure",
    "MalformedReply",
    "NotEncodable",
    "NotSent",
    "OutcomeUnknown",
    "ReceiveFailed",
    "SendFailed",
    "UndecodableBody",
    "translate",
]


class HTTPFailure(Exception):
    """A request through the seam failed (see the module for the tree)."""


class NotSent(HTTPFailure):
    """Nothing of the request reached the server."""


class ConnectFailed(NotSent):
    """No connection to the server could be made."""


class ConnectTimedOut(ConnectFailed):
    """No connection within the connect timeout."""


class NotEncodable(NotSent):
    """The request cannot be written in HTTP/1.1; the message quotes none of it."""


class OutcomeUnknown(HTTPFailure):
    """The request may have reached the server: a write's outcome is unknown."""


class SendFailed(OutcomeUnknown):
    """Sending the request failed."""


class ReceiveFailed(OutcomeUnknown):
    """Reading the reply failed."""


class MalformedReply(OutcomeUnknown):
    """The reply breaks HTTP/1.1."""


class UndecodableBody(MalformedReply):
    """The reply's body cannot be decoded (its Content-Encoding)."""


#: Each httpx error type, and what it becomes. Ordered most specific first; every concrete
#: class of httpx's tree is listed (a test checks), so a new one is a failing test, not a
#: silent fallback.
_HTTPX: Final[tuple[tuple[type[Exception], type[HTTPFailure]], ...]] = (
    (httpx.ConnectTimeout, ConnectTimedOut),
    (httpx.ConnectError, ConnectFailed),
    (httpx.ProxyError, ConnectFailed),
    (httpx.UnsupportedProtocol, ConnectFailed),
    (httpx.PoolTimeout, ConnectTimedOut),
    (httpx.LocalProtocolError, NotEncodable),
    (httpx.WriteTimeout, SendFailed),
    (httpx.WriteError, SendFailed),
    (httpx.ReadTimeout, ReceiveFailed),
    (httpx.ReadError, ReceiveFailed),
    (httpx.CloseError, ReceiveFailed),
    (httpx.RemoteProtocolError, MalformedReply),
    (httpx.DecodingError, UndecodableBody),
    (httpx.TooManyRedirects, MalformedReply),
    (httpx.HTTPStatusError, MalformedReply),
    (httpx.TimeoutException, ReceiveFailed),
    (httpx.NetworkError, ReceiveFailed),
    (httpx.ProtocolError, MalformedReply),
    (httpx.TransportError, ReceiveFailed),
    (httpx.RequestError, ReceiveFailed),
    (httpx.HTTPError, ReceiveFailed),
)
#: httpx errors whose message may quote the wire (h11's parse errors quote the reply's bytes,
#: a decoder's its input, a proxy's refusal its reason phrase): only their leading words stay.
_QUOTES_THE_WIRE: Final = (httpx.ProtocolError, httpx.DecodingError, httpx.ProxyError)
_OWN_WORDS: Final = re.compile(r"[A-Za-z][A-Za-z ]{0,79}")

Stage = Literal["connect", "send", "receive"]


def translate(exc: BaseException, stage: Stage = "receive") -> HTTPFailure:
    """The seam's error for ``exc``, raised at ``stage`` of a request.

    ``exc``: an httpx error (any stage: httpx says which), a socket, TLS or event-loop error
    (the stage says what it means), or a :class:`~trio_lease._reply.ReplyError` /
    :class:`~trio_lease._reply.EncodeError` (their messages are the library's own). Raise the
    result *outside* the ``except`` clause that caught ``exc`` when ``exc`` may quote the wire
    (Python would make it the ``__context__``), or ``from`` the returned ``__cause__``.
    """
    from ._reply import EncodeError, ReplyError  # the reply parser is a leaf; no cycle

    if isinstance(exc, HTTPFailure):
        return exc
    if isinstance(exc, httpx.HTTPError):
        return _from_httpx(exc)
    if isinstance(exc, ReplyError):
        return MalformedReply(f"malformed response: {exc}")
    if isinstance(exc, EncodeError):
        return NotEncodable(str(exc))
    name = type(exc).__name__
    if isinstance(exc, TimeoutError) and stage == "connect":
        error: HTTPFailure = ConnectTimedOut("connecting to the server timed out")
    elif stage == "connect":
        error = ConnectFailed(f"could not connect ({name}: {exc})")
    elif stage == "send":
        error = SendFailed(f"sending the request failed ({name})")
    else:
        error = ReceiveFailed(f"reading the reply failed ({name})")
    error.__cause__ = exc
    return error


def _from_httpx(exc: httpx.HTTPError) -> HTTPFailure:
    ours = next(seam for theirs, seam in _HTTPX if isinstance(exc, theirs))
    if not isinstance(exc, _QUOTES_THE_WIRE):
        error = ours(f"{exc}")
        error.__cause__ = exc
        return error
    words = re.split(r"[:(]", str(exc), maxsplit=1)[0].strip().rstrip(".")
    said = f" ({words})" if _OWN_WORDS.fullmatch(words) else ""
    if isinstance(exc, httpx.DecodingError):
        what = "the reply's body could not be decoded"
    elif isinstance(exc, httpx.ProxyError):
        what = "the proxy refused the connection"
    elif isinstance(exc, httpx.LocalProtocolError):
        what = "the request is not valid HTTP"
    else:
        what = "malformed reply"
    return ours(f"{what}{said}; the server's text is not quoted")
