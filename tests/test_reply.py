"""The lean client's HTTP/1.1 (trio_lease/_reply.py: llhttp and the client's own rules)
against h11.

Replies are generated (Hypothesis) from the grammar the reader accepts: status lines,
informational replies before the real one, header fields at the edges of what RFC 9110 allows,
every framing (Content-Length, chunked with extensions and trailers, to the connection's end,
204/304), delivered in arbitrary pieces. Then damaged: bytes flipped, inserted, dropped, or the
reply cut short. The rule: a reply the reader accepts, h11 reads the same way (status, headers,
body), and a connection the reader would reuse, h11 would too. The reader may refuse more
than h11 (a bare LF line end, obs-fold, a Content-Length list, a Transfer-Encoding with a
Content-Length), never less safely; every valid generated reply it must accept. The one thing
it reads that h11 refuses: empty lines after an informational reply (llhttp skips them; a 1xx
reply has no body, so the framing is the same), compared with h11's reading without them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import h11
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trio_lease import _reply
from trio_lease._http import request_head
from trio_lease._http_errors import NotEncodable
from trio_lease._reply import (
    END,
    MAX_HEAD,
    NEED_DATA,
    EncodeError,
    Head,
    ReplyError,
    ReplyReader,
    encode_request,
)


@dataclass
class Read:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    reusable: bool


def ours(pieces: list[bytes]) -> Read | str:
    """The reader's reading of a reply delivered in ``pieces`` (then the end), or its error."""
    reader = ReplyReader()
    feed = iter([*pieces, b""])
    head: Head | None = None
    body = b""
    try:
        while True:
            event = reader.next_event()
            if event is NEED_DATA:
                reader.receive_data(next(feed))
            elif isinstance(event, Head):
                head = event
            elif isinstance(event, bytes):
                body += event
            else:
                assert event is END and head is not None
                # What the client checks before reuse: no bytes beyond the reply.
                return Read(head.status_code, head.headers, body, reader.reusable)
    except ReplyError as exc:
        return f"error: {exc}"
    except StopIteration:
        return "error: asked for data after the end"


def theirs(pieces: list[bytes]) -> Read | str:
    """h11's reading, as a client that sent one GET."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    feed = iter([*pieces, b""])
    status, headers, body = 0, [], b""
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(next(feed))
            elif isinstance(event, h11.Response):
                status, headers = event.status_code, list(event.headers)
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                unasked, closed = conn.trailing_data
                reusable = (
                    conn.our_state is h11.DONE
                    and conn.their_state is h11.DONE
                    and not unasked
                    and not closed
                )
                return Read(status, headers, body, reusable)
            elif isinstance(event, h11.ConnectionClosed):
                return "error: closed"
    except h11.RemoteProtocolError as exc:
        return f"error: {exc}"
    except StopIteration:
        return "error: asked for data after the end"


# -- generated replies --------------------------------------------------------------------------

_TCHAR = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
names = (
    st.text(_TCHAR, min_size=1, max_size=12)
    .filter(lambda n: n.lower() not in ("content-length", "transfer-encoding", "connection"))
    .map(str.encode)
)
values = st.one_of(
    st.just(b""),
    st.binary(min_size=1, max_size=20).map(
        lambda b: bytes(c if 0x21 <= c <= 0x7E or c >= 0x80 else 0x61 for c in b)
    ),
    st.lists(st.sampled_from([b"a", b"b c", b"\t", b" ", b"\xff", b"x\ty"]), min_size=1).map(
        lambda parts: b"q" + b"".join(parts) + b"z"
    ),
)
ows = st.sampled_from([b"", b" ", b"\t", b"  "])
eol = st.just(b"\r\n")  # llhttp refuses a bare LF (RFC 9112 lets a recipient refuse it)


@st.composite
def replies(draw: st.DrawFn) -> tuple[bytes, int, bytes]:
    """(the reply's bytes, its status, its body)."""
    out = b""
    for _ in range(draw(st.integers(0, 2))):  # informational replies first
        code = draw(st.sampled_from([100, 102, 103]))
        out += b"HTTP/1.1 %d Continue" % code + draw(eol)
        for name, value in draw(st.lists(st.tuples(names, values), max_size=2)):
            out += name + b":" + draw(ows) + value + draw(ows) + draw(eol)
        out += draw(eol)
    status = draw(st.sampled_from([200, 201, 204, 304, 404, 409, 500]))
    version = draw(st.sampled_from([b"1.1", b"1.1", b"1.0"]))
    reason = draw(st.sampled_from([b" OK", b" ", b"", b" Not \xe9 Found", b" a\tb"]))
    out += b"HTTP/" + version + b" %d" % status + reason + draw(eol)
    fields = draw(st.lists(st.tuples(names, values), max_size=4))
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    body = b"" if status in (204, 304) else draw(st.binary(max_size=300))
    if draw(st.booleans()):
        connection = draw(st.sampled_from([b"close", b"keep-alive", b"x, close"]))
        fields.append((b"Connection", connection))
    if framing == "length":
        length = b"%d" % len(body)
        fields.append((b"Content-Length", length))
    elif framing == "chunked":
        fields.append((b"Transfer-Encoding", draw(st.sampled_from([b"chunked", b"Chunked"]))))
    for name, value in draw(st.permutations(fields)):
        # No whitespace after a Transfer-Encoding: the reader takes exactly "chunked".
        after = b"" if name == b"Transfer-Encoding" else draw(ows)
        out += name + b":" + draw(ows) + value + after + draw(eol)
    out += draw(eol)
    if status in (204, 304):
        return out, status, b""
    if framing == "chunked":
        rest = body
        while rest:
            size = draw(st.integers(1, max(1, len(rest))))
            ext = draw(st.sampled_from([b"", b";a=b", b";x", b';q="1"']))
            hexsize = draw(st.sampled_from([b"%x", b"%X", b"00%x"])) % size
            out += hexsize + ext + b"\r\n" + rest[:size] + b"\r\n"
            rest = rest[size:]
        out += b"0\r\n"
        for name, value in draw(st.lists(st.tuples(names, values), max_size=2)):
            out += name + b": " + value + draw(eol)
        out += draw(eol)
    else:
        out += body
    return out, status, body


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(data[start:point])
        start = point
    pieces.append(data[start:])
    return [p for p in pieces if p]


def _normal(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Header fields as h11 reports them: ``Content-Length: 5, 5`` as ``5``, codings lower."""
    out = []
    for name, value in headers:
        if name == b"content-length":
            value = {v.strip() for v in value.split(b",")}.pop()
        elif name == b"transfer-encoding":
            value = value.lower()
        out.append((name, value))
    return out


#: An informational reply's head (the status line, its fields, the empty line).
_INFORMATIONAL = re.compile(rb"HTTP/1\.[01] 1\d\d[^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\n")


def _without_empty_lines_after_informational(data: bytes) -> bytes:
    """``data`` without the line ends llhttp skips after each leading informational reply."""
    kept, rest = b"", data
    while (head := _INFORMATIONAL.match(rest)) is not None:
        kept += head.group(0)
        rest = rest[head.end() :].lstrip(b"\r\n")
    return kept + rest


def agree(pieces: list[bytes]) -> Read | str:
    """Both readings; when the reader accepts, h11 must read exactly the same."""
    mine, h11_reading = ours(pieces), theirs(pieces)
    whole = b"".join(pieces)
    if (lenient := _without_empty_lines_after_informational(whole)) != whole:
        h11_reading = theirs([lenient])
    if isinstance(mine, Read):
        assert isinstance(h11_reading, Read), (mine, h11_reading)
        assert (mine.status, _normal(mine.headers), mine.body) == (
            h11_reading.status,
            h11_reading.headers,
            h11_reading.body,
        )
        assert not mine.reusable or h11_reading.reusable
    return mine


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reply=replies(), cuts=st.lists(st.integers(0, 2000), max_size=6))
def test_every_valid_reply_is_read_as_h11_reads_it(
    reply: tuple[bytes, int, bytes], cuts: list[int]
) -> None:
    data, status, body = reply
    reading = agree(split(data, cuts))
    assert isinstance(reading, Read), reading
    assert (reading.status, reading.body) == (status, body)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    reply=replies(),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["flip", "insert", "drop", "cut"]),
            st.integers(0, 2000),
            st.sampled_from(list(b"\r\n\x00 \t:;0aZ\x7f\xff")),
        ),
        min_size=1,
        max_size=3,
    ),
    cuts=st.lists(st.integers(0, 2000), max_size=4),
)
@example(  # an empty line after an informational reply (llhttp skips it, h11 refuses it)
    reply=(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204\r\nX: a\r\n\r\n", 204, b""),
    edits=[("insert", 25, ord("\n"))],
    cuts=[],
)
@example(  # a line end after the reply, in the same piece: not reusable
    reply=(b"HTTP/1.1 200 \r\nContent-Length:0\r\n\r\n", 200, b""),
    edits=[("insert", 35, ord("\n"))],
    cuts=[],
)
def test_a_damaged_reply_is_refused_or_read_as_h11_reads_it(
    reply: tuple[bytes, int, bytes], edits: list[tuple[str, int, int]], cuts: list[int]
) -> None:
    data = bytearray(reply[0])
    for kind, where, byte in edits:
        at = where % (len(data) + 1)
        if kind == "flip" and at < len(data):
            data[at] = byte
        elif kind == "insert":
            data[at:at] = bytes([byte])
        elif kind == "drop" and at < len(data):
            del data[at]
        elif kind == "cut":
            del data[at:]
    agree(split(bytes(data), cuts))


# -- the rules, one by one ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "rule"),
    [
        (b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n", "status line"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "101 reply was not asked for"),
        (b"HTTP/1.1 200 OK\x00\r\nContent-Length: 0\r\n\r\n", "status line"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            "Duplicate Content-Length",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "chunked alone"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nab", "chunked alone"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "Transfer-Encoding twice",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n",
            "Transfer-Encoding",
        ),
        (b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n", "not valid HTTP"),
        (b"HTTP/1.1 200 OK\r\nX : a\r\nContent-Length: 0\r\n\r\n", "header token"),
        (b"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 0\r\n\r\n", "header value"),
        (b"HTTP/1.1 200 OK\nContent-Length: 0\n\n", "CR"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
            "not valid HTTP",
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not valid HTTP"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", "before the reply's end"),
        (b"HTTP/1.1 200 OK\r\nContent-", "middle of the reply's head"),
        (b"", "without a reply"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"a" * MAX_HEAD, "head is over"),
    ],
)
def test_what_is_refused_and_the_message_names_the_rule(reply: bytes, rule: str) -> None:
    reading = ours([reply])
    assert isinstance(reading, str) and rule in reading, reading
    assert b"abc" not in reading.encode()  # no server bytes quoted


def test_a_body_to_the_connection_end_and_http10_are_never_reused() -> None:
    for reply in (
        b"HTTP/1.1 200 OK\r\n\r\nall of it",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi",
    ):
        reading = agree([reply])
        assert isinstance(reading, Read) and not reading.reusable


@pytest.mark.parametrize(
    "pieces",
    [
        # The status line's bytes split before the version is whole: the parser says 1.0.
        [b"HTTP/1.", b"0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi"],
        # An HTTP/1.1 informational reply, then an HTTP/1.0 one: the second's version counts.
        [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nConnection: keep-alive\r\n"
         b"Content-Length: 2\r\n\r\nhi"],
    ],
    ids=["split-status-line", "after-an-informational-reply"],
)
def test_http10_is_never_reused_whatever_came_before_or_however_it_is_split(
    pieces: list[bytes],
) -> None:
    """The version is read from the status line's bytes only when "HTTP/1.1 " begins the
    first piece; an HTTP/1.0 reply with keep-alive is never reused, also after a split
    status line or an HTTP/1.1 informational reply."""
    reading = agree(pieces)
    assert isinstance(reading, Read) and reading.body == b"hi" and not reading.reusable


@pytest.mark.parametrize("extra", [b"EXTRA", b"\n", b"\r\n", b"\r\n\r\n"])
@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
    ],
    ids=["length", "chunked"],
)
def test_bytes_after_the_reply_are_kept_apart_and_forbid_reuse(reply: bytes, extra: bytes) -> None:
    """Bytes beyond the reply, also bare line ends (which llhttp skips between replies), are
    never read as part of it, and the connection is not reused."""
    reader = ReplyReader()
    reader.receive_data(reply + extra)
    events = [reader.next_event() for _ in range(3)]
    assert events[1:] == [b"hi", END]
    assert (reader.trailing, reader.reusable) == (True, False)


def test_a_reply_ending_in_a_line_end_of_its_own_is_reused() -> None:
    """A reply whose last byte is its own line end, whole or in pieces, leaves the connection
    reusable."""
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nhi\n"
    for pieces in ([reply], [reply[:-1], reply[-1:]], [bytes([byte]) for byte in reply]):
        reading = agree(pieces)
        assert isinstance(reading, Read) and reading.body == b"hi\n" and reading.reusable


def test_requests_are_encoded_as_h11_encodes_them() -> None:
    headers = [
        ("Host", "example:8443"),
        ("Accept", "application/json"),
        ("X-Empty", ""),
        ("Content-Length", "2"),
    ]
    mine = encode_request("PUT", "/a/b?c=d%20e", headers, b"{}")
    conn = h11.Connection(h11.CLIENT)
    expected = conn.send(h11.Request(method="PUT", target="/a/b?c=d%20e", headers=headers))
    assert expected is not None
    assert mine == expected + b"{}"


@pytest.mark.parametrize(
    ("target", "header"),
    [
        ("/ok", ("X-Token", "abc\r\nInjected: 1")),
        ("/ok", ("X-Token", "caf\u00e9")),
        ("/a b", ("X", "y")),
        ("/ok", ("Bad Name", "y")),
        ("/ok", ("X", "secret-\x00")),
    ],
)
def test_requests_http_cannot_carry_are_refused_without_quoting_them(
    target: str, header: tuple[str, str]
) -> None:
    with pytest.raises(NotEncodable) as caught:
        request_head("GET", target, [("Host", "x"), header])
    text = str(caught.value)
    assert "secret" not in text and "Injected" not in text and "caf" not in text
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_encoded_fields_are_remembered_but_only_the_last_credential(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checked header field is kept encoded for the next request (the memory is emptied when
    full); of an Authorization or Cookie field only the last one sent is kept, so a rotated
    token is let go; a field HTTP cannot carry is refused each time it is sent."""
    monkeypatch.setattr(_reply, "_FIELDS", {})
    monkeypatch.setattr(_reply, "_FIELDS_KEPT", 2)
    monkeypatch.setattr(_reply, "_CREDENTIALS", {})
    token = ("Authorization", "Bearer secret-token")
    first = encode_request("GET", "/x", [("Accept", "a"), token, ("Cookie", "c=secret")], None)
    assert list(_reply._FIELDS) == [("Accept", "a")]
    assert [field for field, _ in _reply._CREDENTIALS.values()] == [token, ("Cookie", "c=secret")]
    again = encode_request("GET", "/x", [("Accept", "a"), token, ("Cookie", "c=secret")], None)
    assert again == first
    assert b"Authorization: Bearer secret-token\r\n" in again
    rotated = ("Authorization", "Bearer rotated-token")
    encode_request("GET", "/x", [rotated], None)
    assert _reply._CREDENTIALS["authorization"][0] == rotated  # the old token is not kept
    assert all("secret-token" not in value for value in map(repr, _reply._CREDENTIALS.values()))
    encode_request("GET", "/x", [("B", "b"), ("C", "c")], None)  # full at C: emptied, C kept
    assert list(_reply._FIELDS) == [("C", "c")]
    for _ in range(2):
        with pytest.raises(EncodeError):
            encode_request("GET", "/x", [("X", "bad\r\nInjected: 1")], None)
        with pytest.raises(EncodeError):
            encode_request("GET", "/x", [("Authorization", "Bearer bad\r\nInjected: 1")], None)
    assert list(_reply._FIELDS) == [("C", "c")]
    assert _reply._CREDENTIALS["authorization"][0] == rotated


def test_request_lines_are_checked_once_and_a_bad_one_every_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checked request line is kept for the next request with that method and target (the
    memory is emptied when full); a target HTTP cannot carry is refused each time it is sent,
    also when every field of the request was checked before."""
    monkeypatch.setattr(_reply, "_LINES", {})
    monkeypatch.setattr(_reply, "_LINES_KEPT", 2)
    checked: list[str] = []
    real = h11.Request

    def counting(**kwargs: object) -> object:
        checked.append(str(kwargs["target"]))
        return real(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(h11, "Request", counting)
    fields = [("Host", "x"), ("Accept", "a")]
    encode_request("PUT", "/a?timeout=1s", fields, None)
    assert encode_request("PUT", "/a?timeout=1s", fields, b"{}").startswith(
        b"PUT /a?timeout=1s HTTP/1.1\r\nHost: x\r\n"
    )
    assert checked == ["/a?timeout=1s"]  # the second request was not checked again
    encode_request("GET", "/a?timeout=1s", fields, None)  # another method: checked
    encode_request("PUT", "/b", fields, None)  # full at /b: emptied, /b kept
    assert list(_reply._LINES) == [("PUT", "/b")]
    for _ in range(2):
        with pytest.raises(EncodeError):
            encode_request("PUT", "/a b", fields, None)
    assert checked == ["/a?timeout=1s", "/a?timeout=1s", "/b", "/a b", "/a b"]


class _Watched(ReplyReader):
    """A reader that a weak reference can follow (ReplyReader has no ``__weakref__`` slot)."""

    __slots__ = ("__weakref__",)


@pytest.mark.parametrize(
    "pieces",
    [
        [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"],
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"],
        [b"HTTP/1.1 204 No Content\r\n\r\n", b"HTTP/1.1 200 OK\r\n"],  # bytes beyond the reply
        [b"HTTP/1.1 200 OK\r\n\r\nto the end", b""],  # framed by the connection's end
        [b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"],  # refused by llhttp
        [b"\x16\x03\x01\x00\x02\x02\x28"],  # a TLS record: refused before llhttp
        [b""],  # closed before a byte
    ],
    ids=["length", "chunked", "trailing", "to-close", "refused", "tls", "no-reply"],
)
def test_a_reader_done_with_its_reply_is_freed_without_the_garbage_collector(
    pieces: list[bytes],
) -> None:
    """llhttp's parser calls the reader's methods, so the two form a reference cycle. A reader
    that has its reply (or its error) lets go of the parser: dropped, it is freed at once.
    Left to the collector, one cycle per request was most of the garbage the steady row made
    (tools/benchmarks/README.md, "The garbage collector's share")."""
    import gc
    import weakref

    enabled = gc.isenabled()
    gc.disable()
    try:
        reader = _Watched()
        for data in pieces:
            reader.receive_data(data)
        events: list[object] = []
        try:
            while (event := reader.next_event()) is not END and event is not NEED_DATA:
                events.append(event)
        except ReplyError:
            events.append("error")
        assert events, "the reply gave neither a piece nor an error"
        gone = weakref.ref(reader)
        del reader
        assert gone() is None, "the reader outlived its last reference: a cycle is left"
    finally:
        if enabled:
            gc.enable()
