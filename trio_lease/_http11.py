"""HTTP/1.1 for the lean client (:mod:`._lean_http`), sans I/O: requests out, replies in.

Why not h11: the renewal's request path spent about a third of its CPU in h11's event and
state machinery (header normalization twice per exchange, a state machine for both sides, an
event object per step), for a client that only ever sends one small request and reads one reply
per exchange (tools/benchmarks/README.md, "Design measurements"). This module does just that,
as strictly as h11 or more so: ``tests/test_http11.py`` checks it against h11 on generated and
damaged replies (every reply it accepts, h11 reads the same way), and ``tests/test_http.py``
runs the client on every framing over real sockets.

A reply is input (docs/design.md §4.8): every byte is checked against the grammar of
RFC 9112 before it counts, every buffer is bounded, and anything else is a
:class:`ReplyError` naming the rule that failed, never the bytes. Accepted:

- a status line ``HTTP/1.x NNN reason`` (lines end in CRLF or a bare LF, as h11 allows);
  informational replies (1xx but 101) are skipped;
- header fields ``name: value`` (token names, visible or obs-text values, no NUL, no obs-fold);
- framing: 204 and 304 have no body; ``Transfer-Encoding: chunked`` (the only coding; with a
  Content-Length too, chunked wins and the connection is not reused, RFC 9112 §6.3);
  ``Content-Length`` (one value, repeated identically at most); else the body runs to the
  connection's end (not reused);
- chunks: a hex size of at most 16 digits and extensions (ignored) on a line ending in CRLF,
  data, CRLF; trailers checked and dropped.

Refused: another HTTP major version, a head over ``max_head`` bytes, conflicting lengths, other
transfer codings, 101, bytes that break the grammar, and a reply cut short.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from ._connect import NO_REPLY, TLS_REPLY

__all__ = ["END", "NEED_DATA", "EncodeError", "Head", "ReplyError", "ReplyReader", "encode_request"]

#: Header names, methods: RFC 9110 token.
_TOKEN: Final = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
#: A field value (RFC 9110 field-value: visible characters and obs-text, inner spaces and tabs).
_VALUE: Final = re.compile(rb"(?:[^\x00\s](?:[ \t]*[^\x00\s])*)?")
#: A request target: visible ASCII only (no spaces, no controls).
_TARGET: Final = re.compile(rb"[\x21-\x7e]+")
_STATUS_LINE: Final = re.compile(rb"HTTP/1\.([0-9]) ([0-9]{3})(?: (?:[ \t]|[^\x00\s])*)?")
#: A header field line: a token, a colon, optional whitespace, a field value, optional
#: whitespace (one match, not a split then a check per part: every reply has several).
_HEADER_LINE: Final = re.compile(
    rb"(" + _TOKEN.pattern + rb"):[ \t]*(" + _VALUE.pattern + rb")[ \t]*"
)
#: Header fields already checked and encoded: the same few are sent with every request.
#: Credentials are never kept here (they are checked and encoded each time).
_FIELDS: dict[tuple[str, str], bytes] = {}
_FIELDS_KEPT: Final = 1024
_SECRET_FIELDS: Final = frozenset({"authorization", "proxy-authorization", "cookie"})
_CHUNK_SIZE: Final = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;[^\x00\r]*)?[ \t]*")
_DIGITS: Final = re.compile(rb"[0-9]{1,20}")
#: The end of the head: a line's LF, then an empty line. The last line keeps its own CR, so a
#: stray CR before its CRLF ("chunked \r\r\n") stays in the line and is refused with it.
_BLANK_LINE: Final = re.compile(rb"\n\r?\n")
#: Longest chunk-size line, trailer section line, or head accepted (bytes).
MAX_HEAD: Final = 65536


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

_HEAD, _LENGTH, _CHUNK_HEADER, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _TO_CLOSE, _DONE = range(8)


def encode_request(
    method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes | None
) -> bytes:
    """The request's bytes; :class:`EncodeError` (naming no value) if HTTP cannot carry it."""
    try:
        raw_method = method.encode("ascii")
        raw_target = target.encode("ascii")
        parts = [raw_method, b" ", raw_target, b" HTTP/1.1\r\n"]
        if _TOKEN.fullmatch(raw_method) is None or _TARGET.fullmatch(raw_target) is None:
            raise EncodeError("the method or the target is not valid HTTP")
        for field in headers:
            line = _FIELDS.get(field)
            if line is None:
                name, value = field
                raw_name = name.encode("ascii")
                raw_value = value.encode("ascii")
                if _TOKEN.fullmatch(raw_name) is None or _VALUE.fullmatch(raw_value) is None:
                    raise EncodeError("a header name or value is not valid HTTP")
                line = b"%s: %s\r\n" % (raw_name, raw_value)
                if name.lower() not in _SECRET_FIELDS:
                    if len(_FIELDS) >= _FIELDS_KEPT:
                        _FIELDS.clear()
                    _FIELDS[field] = line
            parts.append(line)
    except UnicodeEncodeError:
        raise EncodeError("the request has a character outside ASCII") from None
    parts.append(b"\r\n")
    if body:
        parts.append(body)
    return b"".join(parts)


class ReplyReader:
    """One reply, read from the bytes given to :meth:`receive_data` (sans I/O).

    :meth:`next_event` returns :data:`NEED_DATA`, the reply's :class:`Head` (once), body bytes
    (any number of times), then :data:`END`. Afterwards :attr:`reusable` tells whether the
    connection may carry another request, and :attr:`trailing` holds bytes the server sent
    beyond the reply (a reader that finds any must not reuse the connection).
    """

    __slots__ = ("_buffer", "_chunked", "_ended", "_left", "_state", "keep_alive")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._ended = False  # the server closed its side
        self._state = _HEAD
        self._left = 0
        self._chunked = False
        #: HTTP/1.1 without ``Connection: close`` and a framing that ends on its own.
        self.keep_alive = True

    def receive_data(self, data: bytes) -> None:
        """Bytes from the server; ``b""`` when it closed the connection."""
        if data:
            self._buffer += data
        else:
            self._ended = True

    @property
    def reusable(self) -> bool:
        """The reply is complete, the server keeps the connection, and nothing followed."""
        return self._state == _DONE and self.keep_alive and not self._buffer and not self._ended

    @property
    def trailing(self) -> bytes:
        """Bytes received after the end of the reply."""
        return bytes(self._buffer) if self._state == _DONE else b""

    def at_chunk_boundary(self) -> bool:
        """A chunked body is being read, nothing is buffered, and the next byte starts a chunk."""
        return self._state == _CHUNK_HEADER and not self._buffer

    def next_event(self) -> Head | bytes | _Sentinel:
        """The next piece of the reply (see the class docstring); :class:`ReplyError`."""
        while True:
            event = _STEPS[self._state](self)
            if event is not None:
                return event

    # -- one step per state: an event, or None to take the next step at once ---------------

    def _step_head(self) -> Head | _Sentinel | None:
        head = self._head()
        if head is None:
            return NEED_DATA
        return head if head.status_code >= 200 else None  # 1xx: the reply follows

    def _step_to_close(self) -> bytes | _Sentinel:
        if self._buffer:
            data = bytes(self._buffer)
            self._buffer.clear()
            return data
        if self._ended:
            self._state = _DONE
            return END
        return NEED_DATA

    def _step_chunk_header(self) -> _Sentinel | None:
        line = self._line("a chunk size line", crlf=True)
        if line is None:
            return NEED_DATA
        found = _CHUNK_SIZE.fullmatch(line)
        if found is None:
            raise ReplyError("a chunk size line is not valid HTTP/1.1")
        self._left = int(found.group(1), 16)
        self._state = _CHUNK_DATA if self._left else _TRAILERS
        return None

    def _step_chunk_data(self) -> bytes | _Sentinel:
        data = self._piece("the server closed the connection in a chunk")
        if not self._left:
            self._state = _CHUNK_END
        return data

    def _step_chunk_end(self) -> _Sentinel | None:
        if len(self._buffer) < 2:
            if self._ended:
                raise ReplyError("the server closed the connection in a chunk")
            return NEED_DATA
        if self._buffer[:2] != b"\r\n":
            raise ReplyError("a chunk does not end with CRLF")
        del self._buffer[:2]
        self._state = _CHUNK_HEADER
        return None

    def _step_trailers(self) -> _Sentinel | None:
        line = self._line("a trailer line")
        if line is None:
            return NEED_DATA
        if line:
            if _header(line) is None:
                raise ReplyError("a trailer field is not valid HTTP/1.1")
            return None
        self._state = _DONE
        return END

    def _step_done(self) -> _Sentinel:
        return END

    # -- the pieces ------------------------------------------------------------------------

    def _head(self) -> Head | None:
        buffer = self._buffer
        if len(buffer) >= 3 and buffer[0] in (0x15, 0x16) and buffer[1] == 0x03:
            # A TLS record (an alert, a handshake) where a status line belongs: a plain-HTTP
            # request reached a TLS server.
            raise ReplyError(TLS_REPLY)
        found = _BLANK_LINE.search(buffer, 0, MAX_HEAD + 4)
        if found is None:
            if len(buffer) > MAX_HEAD:
                raise ReplyError(f"the reply's head is over {MAX_HEAD:,} bytes")
            if self._ended:
                raise ReplyError(
                    NO_REPLY if not buffer
                    else "the server closed the connection in the middle of the reply's head"
                )
            return None
        lines = bytes(buffer[: found.start()]).split(b"\n")
        del buffer[: found.end()]
        status = _STATUS_LINE.fullmatch(_crlf(lines[0]))
        if status is None:
            raise ReplyError("the reply does not start with an HTTP/1.x status line")
        code = int(status.group(2))
        if code == 101 or code < 100:
            raise ReplyError(f"a {code} reply was not asked for")
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            field = _header(_crlf(line))
            if field is None:
                raise ReplyError("a header field of the reply is not valid HTTP/1.1")
            headers.append(field)
        if code >= 200:
            self._frame(code, status.group(1) == b"1", headers)
        return Head(code, headers)

    def _frame(self, code: int, http11: bool, headers: list[tuple[bytes, bytes]]) -> None:
        """Set the body's framing and whether the connection stays open (RFC 9112 §6.3)."""
        codings: list[bytes] = []
        lengths: set[bytes] = set()
        tokens: list[bytes] = []
        for name, value in headers:
            if name == b"transfer-encoding":
                if codings:
                    raise ReplyError("the reply has Transfer-Encoding twice")
                codings = [c.strip().lower() for c in value.split(b",")]
            elif name == b"content-length":
                lengths.update(v.strip() for v in value.split(b","))
            elif name == b"connection":
                tokens += (t.strip().lower() for t in value.split(b","))
        self.keep_alive = http11 and b"close" not in tokens
        if codings and codings != [b"chunked"]:
            raise ReplyError("the reply's Transfer-Encoding is not chunked alone")
        if len(lengths) > 1:
            raise ReplyError("the reply has conflicting Content-Length values")
        length = lengths.pop() if lengths else None
        if length is not None and _DIGITS.fullmatch(length) is None:
            raise ReplyError("the reply's Content-Length is not a number")
        if code in (204, 304):  # never a body, whatever the fields say (checked all the same)
            self._left = 0
            self._state = _LENGTH
        elif codings:
            if length is not None:
                self.keep_alive = False  # a smuggling attempt or a broken proxy: read, close
            self._state = _CHUNK_HEADER
        elif length is not None:
            self._left = int(length)
            self._state = _LENGTH
        else:
            self.keep_alive = False
            self._state = _TO_CLOSE

    def _counted(self) -> bytes | _Sentinel:
        if not self._left:
            self._state = _DONE
            return END
        return self._piece("the server closed the connection before the reply's end")

    def _piece(self, cut_short: str) -> bytes | _Sentinel:
        """Up to ``_left`` bytes of the body; :class:`ReplyError` if the server closed first."""
        if not self._buffer:
            if self._ended:
                raise ReplyError(cut_short)
            return NEED_DATA
        data = self._take(self._left)
        self._left -= len(data)
        return data

    def _take(self, most: int) -> bytes:
        buffer = self._buffer
        if len(buffer) <= most:
            data = bytes(buffer)
            buffer.clear()
        else:
            data = bytes(buffer[:most])
            del buffer[:most]
        return data

    def _line(self, what: str, *, crlf: bool = False) -> bytes | None:
        """The next line without its end; None if incomplete (bounded by MAX_HEAD).

        ``crlf``: the line must end in CRLF (chunk size lines: h11 refuses a bare LF there).
        """
        buffer = self._buffer
        end = buffer.find(b"\n", 0, MAX_HEAD + 1)
        if end < 0:
            if len(buffer) > MAX_HEAD:
                raise ReplyError(f"{what} is over {MAX_HEAD:,} bytes")
            if self._ended:
                raise ReplyError("the server closed the connection before the reply's end")
            return None
        line = bytes(buffer[:end])
        del buffer[: end + 1]
        if crlf and not line.endswith(b"\r"):
            raise ReplyError(f"{what} does not end with CRLF")
        return _crlf(line)


_STEPS: Final = (
    ReplyReader._step_head,
    ReplyReader._counted,
    ReplyReader._step_chunk_header,
    ReplyReader._step_chunk_data,
    ReplyReader._step_chunk_end,
    ReplyReader._step_trailers,
    ReplyReader._step_to_close,
    ReplyReader._step_done,
)


def _crlf(line: bytes) -> bytes:
    """``line`` without the CR of its CRLF end."""
    return line[:-1] if line.endswith(b"\r") else line


def _header(line: bytes) -> tuple[bytes, bytes] | None:
    """(lower-cased name, value) of a header field line, or None if it is not one."""
    found = _HEADER_LINE.fullmatch(line)
    if found is None:
        return None
    name, value = found.groups()
    return name.lower(), value
