"""HTTP/1.1 for the lean client (:mod:`._lean_http`), sans I/O: a reply read by llhttp, a
request checked by h11.

Reply: :class:`ReplyReader` feeds the bytes to ``httptools`` (llhttp, the parser of Node.js and
uvicorn) in the task that reads them, and keeps the few rules of its own that a client needs
on top: the framing a lease client accepts, the bound on a reply's head, what happens when the
server closes the connection, and whether the connection may carry another request. Measured
on one Kubernetes Lease reply (tools/benchmarks/README.md, "Parsing"), llhttp reads it several
times faster than the hand-written parser it replaced, and h11 several times slower.

A reply is input (docs/design.md §4.8): anything llhttp refuses, and anything below, is a
:class:`ReplyError` naming the rule that failed, never the bytes:

- another HTTP major version, a status under 100, or 101 (never asked for); informational
  replies (1xx but 101) are skipped;
- lines that do not end in CRLF, obs-fold, header names that are not tokens, values with
  control characters (llhttp's strict mode);
- ``Transfer-Encoding`` other than ``chunked`` alone, or given twice; ``Content-Length`` with
  ``Transfer-Encoding``, twice, or not a number (llhttp);
- a head, a chunk size line or a trailer section over ``MAX_HEAD`` bytes;
- a reply cut short by the end of the connection;
- a TLS record where the status line belongs (a plain-HTTP request reached a TLS server): the
  error says so (``_connect.TLS_REPLY``), and the backends' messages say "use https://".

Framing: 204 and 304 have no body; chunked (extensions and trailers dropped);
``Content-Length``; else the body runs to the connection's end (not reused).

Request: :func:`encode_request` has h11 check the request line and every header field (h11's
rules for what HTTP/1.1 can carry), then writes the bytes as h11 writes them. A field checked
once is remembered encoded (the same few go with every request); credentials never are.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence
from typing import Final, cast

import h11
import httptools

from ._connect import NO_REPLY, TLS_REPLY

__all__ = [
    "END",
    "MAX_HEAD",
    "NEED_DATA",
    "EncodeError",
    "Head",
    "ReplyError",
    "ReplyReader",
    "encode_request",
]

#: Longest head, chunk size line or trailer section accepted (bytes).
MAX_HEAD: Final = 65536
#: Header fields already checked and encoded. Credentials are never kept here.
_FIELDS: dict[tuple[str, str], bytes] = {}
_FIELDS_KEPT: Final = 1024
#: Request lines (method, target) already checked and encoded: a holder sends the same few
#: targets again and again.
_LINES: dict[tuple[str, str], bytes] = {}
_LINES_KEPT: Final = 4096
_SECRET_FIELDS: Final = frozenset({"authorization", "proxy-authorization", "cookie"})
#: The last credential field sent, checked and encoded, by its lower-case name.
_CREDENTIALS: dict[str, tuple[tuple[str, str], bytes]] = {}
#: llhttp's reason for refusing a reply, kept if it is plain words (it never quotes the bytes,
#: and this makes sure).
#: A reason phrase (RFC 9112: tabs, spaces, visible characters and obs-text; llhttp lets more
#: through, such as NUL).
_REASON: Final = re.compile(rb"[\t \x21-\x7e\x80-\xff]*")
_PLAIN: Final = re.compile(r"[A-Za-z][A-Za-z ,/'-]{0,79}")
#: CR and LF: llhttp skips them between messages.
_LINE_END: Final = frozenset(b"\r\n")


class ReplyError(Exception):
    """The reply breaks HTTP/1.1; the message names the rule, never the bytes."""


class EncodeError(ValueError):
    """A request that HTTP/1.1 cannot carry (a header value with a line break, non-ASCII)."""


class Head:
    """A reply's status and header fields (names lower-cased, values as sent)."""

    __slots__ = ("headers", "status_code")

    def __init__(self, status_code: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = status_code
        self.headers = headers


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: :meth:`ReplyReader.next_event`: more bytes are needed.
NEED_DATA: Final = _Sentinel("NEED_DATA")
#: :meth:`ReplyReader.next_event`: the reply is complete.
END: Final = _Sentinel("END")


def encode_request(
    method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes | None
) -> bytes:
    """The request's bytes; :class:`EncodeError` (naming no value) if HTTP cannot carry it.

    h11 checks the request line and each field the first time they are sent; both are kept
    encoded for the next request (bounded, emptied when full). Of a credential (an
    ``Authorization``, ``Proxy-Authorization`` or ``Cookie`` field) only the last one sent is
    kept, which its client holds anyway: a rotated token is checked anew and the old one let go.
    """
    line = _LINES.get((method, target))
    fields: list[bytes | None] = [_kept(field) for field in headers]
    if line is None or None in fields:
        unchecked = [field for field, kept in zip(headers, fields, strict=True) if kept is None]
        if not any(name.lower() == "host" for name, _ in unchecked):
            unchecked.append(("Host", "h"))  # h11 requires one in HTTP/1.1 (ours is remembered)
        try:
            # h11 checks the method, the target and the fields not checked before.
            h11.Request(method=method, target=target, headers=unchecked)
            line = b"%s %s HTTP/1.1\r\n" % (method.encode("ascii"), target.encode("ascii"))
            for index, (name, value) in enumerate(headers):
                if fields[index] is None:
                    fields[index] = _encode_field(name, value)
        except (h11.LocalProtocolError, UnicodeEncodeError):
            raise EncodeError("the method, the target or a header is not valid HTTP") from None
        _remember(_LINES, _LINES_KEPT, (method, target), line)
    return b"".join([line, *cast("list[bytes]", fields), b"\r\n", body or b""])


def _encode_field(name: str, value: str) -> bytes:
    """A field h11 has just checked, encoded and kept (a credential only until the next)."""
    encoded = b"%s: %s\r\n" % (name.encode("ascii"), value.encode("ascii"))
    lowered = name.lower()
    if lowered in _SECRET_FIELDS:
        _CREDENTIALS[lowered] = ((name, value), encoded)
    else:
        _remember(_FIELDS, _FIELDS_KEPT, (name, value), encoded)
    return encoded


def _kept(field: tuple[str, str]) -> bytes | None:
    """The field's bytes if it was checked and kept (None: h11 has to check it)."""
    encoded = _FIELDS.get(field)
    if encoded is None:
        last = _CREDENTIALS.get(field[0].lower())
        if last is not None and last[0] == field:
            return last[1]
    return encoded


def _remember(
    kept: dict[tuple[str, str], bytes], most: int, key: tuple[str, str], encoded: bytes
) -> None:
    """Keep ``encoded`` under ``key``; a memory that holds ``most`` already is emptied first."""
    if len(kept) >= most:
        kept.clear()
    kept[key] = encoded


def _not_a_reply(first: bytes) -> str | None:
    """Why the first bytes of a reply cannot begin one (None: they may)."""
    if first[:1] in (b"\x15", b"\x16") and first[1:2] in (b"", b"\x03"):
        # A TLS record (an alert, a handshake) where a status line belongs: a plain-HTTP
        # request reached a TLS server.
        return TLS_REPLY
    if first[:1] != b"H":  # llhttp skips leading line ends; h11 does not
        return "the reply does not start with an HTTP/1.x status line"
    return None


class ReplyReader:
    """One reply, read from the bytes given to :meth:`receive_data` (sans I/O).

    :meth:`next_event` returns :data:`NEED_DATA`, the reply's :class:`Head` (once), body bytes
    (any number of times), then :data:`END`. Afterwards :attr:`reusable` tells whether the
    connection may carry another request (not if the server sent anything beyond the reply).
    Every byte is parsed by :meth:`receive_data`, in the caller's task.
    """

    __slots__ = (
        "_chunked",
        "_codings",
        "_ended",
        "_error",
        "_events",
        "_headers",
        "_http11",
        "_in_head",
        "_length",
        "_parser",
        "_seen",
        "_since_progress",
        "_state",
        "_status",
        "keep_alive",
        "trailing",
    )

    def __init__(self) -> None:
        #: llhttp's parser, whose callbacks are this reader's methods: a reference cycle,
        #: broken (the parser let go) once nothing is left to parse, so that a reply read to
        #: its end is freed at once and not left to the garbage collector.
        #: Made with the reply's first bytes (receive_data), not before: a request waiting for
        #: its reply holds no parser and none of its bound callbacks, about half of what a
        #: renewal in flight keeps for the garbage collector's count of new objects.
        self._parser: httptools.HttpResponseParser | None = None
        self._events: collections.deque[Head | bytes | _Sentinel] = collections.deque()
        self._headers: list[tuple[bytes, bytes]] = []
        self._codings = 0  # Transfer-Encoding fields seen
        self._length = False  # a Content-Length field seen
        self._chunked = False
        self._status = 0
        self._in_head = True  # reading a head (not a body)
        self._state = "head"  # head, body, to_close, done
        self._ended = False  # the server closed its side
        self._seen = False  # any byte received
        self._since_progress = 0
        #: The reply broke a rule: raised once the events before it were taken.
        self._error: ReplyError | None = None
        #: HTTP/1.1 without ``Connection: close`` and a framing that ends on its own.
        self.keep_alive = True
        #: The server sent bytes beyond the reply.
        self.trailing = False

    @property
    def reusable(self) -> bool:
        """The reply is complete, the server keeps the connection, and nothing followed."""
        return self._state == "done" and self.keep_alive and not self.trailing and not self._ended

    def receive_data(self, data: bytes) -> None:
        """Bytes from the server (parsed here); ``b""`` when it closed the connection."""
        if not data:
            self._closed()
            return
        if self._state == "done":
            self.trailing = True
            return
        if self._error is not None:
            return
        if not self._seen:
            refused = _not_a_reply(data)
            if refused is not None:
                self._error = ReplyError(refused)
                self._parser = None
                return
            # The first message's version, read from its status line's own bytes when they
            # are all here (llhttp parses these very bytes): see on_headers_complete.
            self._http11 = data.startswith(b"HTTP/1.1 ")
            if not self._ended:  # (bytes after the end of the connection are not parsed)
                self._parser = httptools.HttpResponseParser(self)
        self._seen = True
        before = len(self._events)
        self._feed(data)
        self._note_progress(len(self._events) > before, len(data))

    def _closed(self) -> None:
        self._ended = True
        self._parser = None  # nothing more comes
        if self._state == "to_close":
            self._state = "done"
            self._events.append(END)

    def _feed(self, data: bytes) -> None:
        """Parse ``data``, keeping llhttp's and the callbacks' refusals as :attr:`_error`."""
        parser = self._parser
        if parser is None:  # the end of the connection came first (no byte follows it)
            return
        try:
            if data[-1] in _LINE_END:
                # llhttp skips line ends after a reply without a callback: the last byte is
                # fed alone, so one that came after the reply is known to be beyond it.
                parser.feed_data(memoryview(data)[:-1])
                if self._state == "done":
                    self.trailing = True
                else:
                    parser.feed_data(data[-1:])
            else:
                parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._error = ReplyError(f"a {self._status} reply was not asked for")
        except httptools.HttpParserError as exc:
            ours = exc.__context__
            if isinstance(ours, ReplyError):  # raised by a callback below
                self._error = ReplyError(str(ours))
            elif self._state != "done":
                self._error = ReplyError(_llhttp_says(exc))
            else:
                self.trailing = True  # bytes after the reply that are not a reply: not reused
        if self._state == "done" or self._error is not None:
            # Later bytes are only counted as trailing (receive_data): the cycle is broken.
            self._parser = None

    def _note_progress(self, progressed: bool, size: int) -> None:
        """Refuse a head, chunk framing or trailer that grows past MAX_HEAD with no event."""
        if progressed or self._state not in ("head", "body"):
            self._since_progress = 0
            return
        self._since_progress += size
        if self._since_progress > MAX_HEAD and self._error is None:
            what = "head" if self._in_head else "chunk framing or trailer section"
            self._error = ReplyError(f"the reply's {what} is over {MAX_HEAD:,} bytes")

    def next_event(self) -> Head | bytes | _Sentinel:
        """The next piece of the reply (see the class docstring); :class:`ReplyError`."""
        if self._events:
            return self._events.popleft()
        if self._error is not None:
            raise ReplyError(str(self._error))  # a new one each time: no traceback kept
        if self._state == "done":
            return END
        if self._ended:
            if not self._seen:
                raise ReplyError(NO_REPLY)
            if self._in_head:
                raise ReplyError(
                    "the server closed the connection in the middle of the reply's head"
                )
            raise ReplyError("the server closed the connection before the reply's end")
        return NEED_DATA

    # -- llhttp's callbacks, run inside feed_data (in the reading task) -----------------------

    def on_message_begin(self) -> None:
        if self._state == "done":
            self.trailing = True  # a second reply: not ours to read
            return
        self._headers = []
        self._codings = 0
        self._length = False
        self._in_head = True

    def on_status(self, reason: bytes) -> None:
        if _REASON.fullmatch(reason) is None:
            raise ReplyError("the reply's status line is not valid HTTP/1.1")

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._in_head or self._state == "done":
            return  # a trailer field (checked by llhttp, dropped)
        name = name.lower()
        if name == b"transfer-encoding":
            # Exactly "chunked": llhttp frames "chunked" followed by a tab as no coding at all.
            self._codings += 1
            self._chunked = value.lower() == b"chunked"
        elif name == b"content-length":
            # Noted here, not searched for once the head is complete: any() over a generator
            # that stops early leaves it to be closed (an exception and a traceback per reply).
            self._length = True
        value = value.rstrip(b" \t")  # llhttp keeps the trailing whitespace (not the value's)
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._state == "done":
            return
        parser = cast(httptools.HttpResponseParser, self._parser)  # parsing: still there
        status = self._status = parser.get_status_code()
        if status < 100 or status == 101:
            raise ReplyError(f"a {status} reply was not asked for")
        # get_http_version() formats a new string at each call (about 1 % of a renewal's
        # instructions): not asked when the status line read "HTTP/1.1 " (receive_data).
        version = "1.1" if self._http11 else parser.get_http_version()
        if version[:2] != "1.":
            raise ReplyError("the reply does not start with an HTTP/1.x status line")
        self._in_head = False
        if status < 200:
            self._http11 = False  # the reply's own status line follows: the parser says
            return  # informational: the reply follows
        if self._codings > 1:
            raise ReplyError("the reply has Transfer-Encoding twice")
        if self._codings and not self._chunked:
            raise ReplyError("the reply's Transfer-Encoding is not chunked alone")
        # HTTP/1.0 never (llhttp honours its keep-alive header; h11 and this client do not).
        self.keep_alive = parser.should_keep_alive() and version == "1.1"
        framed = self._codings or self._length or status in (204, 304)
        if not framed:
            self.keep_alive = False
            self._state = "to_close"
        else:
            self._state = "body"
        self._events.append(Head(status, self._headers))

    def on_body(self, body: bytes) -> None:
        if self._state != "done":
            self._events.append(body)

    def on_message_complete(self) -> None:
        if self._state == "done" or self._status < 200:
            return
        self._state = "done"
        self._events.append(END)


def _llhttp_says(exc: Exception) -> str:
    reason = str(exc).strip().rstrip(".")
    said = f" ({reason})" if _PLAIN.fullmatch(reason) else ""
    return f"the reply is not valid HTTP/1.1{said}"
