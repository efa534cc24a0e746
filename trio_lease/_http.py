"""The unary request seam: (method, target, headers, body) → (status, headers, body).

Every small request of the remote backends (a read, a write, a renewal: everything but a watch
stream) goes through one :class:`Unary`. What sits above the seam (the time bound, the
credentials and the retry after a 401, the reading and error mapping of the reply) is written
once, in the backend's client, and runs the same whichever implementation carries the request:

- :class:`~trio_lease._lean_http.LeanClient`: HTTP/1.1 (:mod:`._reply`) on the event loop's
  own connections (:mod:`._loops`), the production path (a fraction of httpx's CPU per request;
  see its module);
- :class:`HttpxUnary`: an ``httpx.AsyncClient``, for what the lean client does not do (proxies)
  and for injected httpx transports;
- the Kubernetes emulator's in-process seam (``KubeEmulator().transport()`` is a
  :class:`CarriesUnary`), so unit tests on virtual time run the production request code.

The contract of :meth:`Unary.request`, its first three points written once there, the rest
kept by each implementation's ``_exchange``:

- ``target`` is the path and query below the seam's URL (its path prefix is kept);
- the headers are sent as given; ``Host`` and ``Content-Length`` are added;
- a method, target or header value HTTP cannot carry raises
  :class:`~trio_lease._http_errors.NotEncodable` before anything is sent, without quoting the
  value (:func:`request_head`: it may be a token);
- a body over the cap raises :class:`~trio_lease.BackendProtocolError` while it is read, never
  buffered whole (:class:`CappedBody`: the one body cap);
- other failures are the seam's own types (:mod:`trio_lease._http_errors`, translated in one
  place, :func:`~trio_lease._http_errors.translate`): ``NotSent`` (``ConnectFailed``,
  ``ConnectTimedOut``) means nothing was sent; ``OutcomeUnknown`` (``SendFailed``,
  ``ReceiveFailed``, ``MalformedReply``) means the outcome is unknown;
- no error quotes what the server sent, in its message or anywhere in its chain of causes and
  contexts (a reply that fails to parse may quote our token): the lean client's messages are
  its own, and httpx's errors that quote the wire keep only their leading words;
- the caller's cancel scope bounds the whole exchange (``connect_timeout`` only bounds opening
  a new connection).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import httpx

from ._exceptions import BackendProtocolError
from ._http_errors import NotEncodable, translate
from ._reply import EncodeError, encode_request
from ._wire import MAX_BODY_BYTES

__all__ = [
    "Answer",
    "CappedBody",
    "CarriesUnary",
    "Headers",
    "HttpxUnary",
    "Outgoing",
    "Reply",
    "ServerURL",
    "Unary",
    "read_capped",
    "request_head",
    "unary_for",
]


class Answer(Protocol):
    """What callers read from a complete response: a :class:`Reply` or an ``httpx.Response``."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> bytes: ...

    def json(self) -> Any: ...


class Headers(Mapping[str, str]):
    """Response headers: read-only, case-insensitive names (the last value of a repeated one)."""

    __slots__ = ("_decoded", "_raw")

    def __init__(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        # Decoded on first use: most replies (a renewal's) are read without a header looked up.
        self._raw = items
        self._decoded: dict[str, str] | None = None

    @property
    def _items(self) -> dict[str, str]:
        decoded = self._decoded
        if decoded is None:
            decoded = self._decoded = {
                name.decode("latin-1").lower(): value.decode("latin-1") for name, value in self._raw
            }
        return decoded

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({sorted(self._items)!r})"  # names only: values may be sensitive


class Reply:
    """A complete response: status, headers and body."""

    __slots__ = ("content", "headers", "status_code")

    status_code: int
    headers: Headers
    content: bytes

    def __init__(self, status_code: int, headers: Headers, content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    def json(self) -> Any:
        """The body parsed as JSON (:class:`ValueError` if it is not)."""
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"<Reply {self.status_code}, {len(self.content)} bytes>"


@dataclasses.dataclass(slots=True)
class Outgoing:
    """One request as :meth:`Unary.request` checked it, for a transport to carry."""

    method: str
    #: The path and query below the seam's URL.
    target: str
    #: The caller's headers, as given.
    headers: Sequence[tuple[str, str]]
    #: Every header sent: ``Host``, the seam's own, the caller's, ``Content-Length``.
    sent: list[tuple[str, str]]
    #: The request line and :attr:`sent`, as HTTP/1.1 carries them.
    head: bytes
    body: bytes | None
    #: Overrides the seam's time to open a new connection.
    connect_timeout: float | None
    #: The server, for :attr:`what`.
    server: ServerURL

    @property
    def what(self) -> str:
        """How messages name the reply (:meth:`CappedBody.describe`); made only when a message
        needs it."""
        return CappedBody.describe(self.method, self.target, self.server.origin)


class Unary(abc.ABC):
    """One unary HTTP exchange; see the module docstring for the contract.

    :meth:`request` keeps the part of the contract every transport shares (``Host`` and
    ``Content-Length`` added, a head HTTP cannot carry refused before anything is sent, the
    reply named for the body cap); each transport carries the checked request in
    :meth:`_exchange`.
    """

    #: Where requests go: the ``Host`` header and the path prefix.
    url: ServerURL
    #: Sent with every request, after ``Host``.
    _headers: Sequence[tuple[str, str]] = ()
    #: The largest reply body read (:class:`CappedBody`).
    _max_body: int = MAX_BODY_BYTES
    #: Set by a seam's :meth:`aclose` when it refuses further requests.
    _closed: bool = False

    def request(
        self,
        method: str,
        target: str,
        *,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        connect_timeout: float | None = None,
    ) -> Coroutine[Any, Any, Reply]:
        """Send one request and read its whole reply (the body at most the seam's cap).

        The caller's cancel scope bounds it; ``connect_timeout`` overrides the seam's time to
        open a connection, if a new one is needed. Awaited at once by the caller: the request
        is checked (and refused) when called, and the exchange is the coroutine awaited, with
        none around it (one object fewer held while the reply is awaited).
        """
        return self._exchange(self._outgoing(method, target, headers, body, connect_timeout))

    def _outgoing(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | None,
        connect_timeout: float | None,
    ) -> Outgoing:
        """The request checked (:func:`request_head`), with everything a transport sends."""
        if self._closed:
            raise RuntimeError("this client is closed")
        sent = [("Host", self.url.netloc), *self._headers, *headers]
        if body is not None:
            sent.append(("Content-Length", str(len(body))))
        head = request_head(method, self.url.prefix + target, sent)
        return Outgoing(method, target, headers, sent, head, body, connect_timeout, self.url)

    @abc.abstractmethod
    async def _exchange(self, out: Outgoing) -> Reply:
        """Carry ``out`` and read its whole reply through a :class:`CappedBody`."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release what the seam holds (connections); requests in flight finish first."""


@runtime_checkable
class CarriesUnary(Protocol):
    """An injected httpx transport that also offers a :class:`Unary` of its own.

    Given one, the backends send unary requests through :meth:`unary` instead of through
    httpx (the in-process Kubernetes emulator's transport does this), so the request code above
    the seam is the production one; streams still use the transport through httpx.
    """

    def unary(self, url: str, *, max_body: int = MAX_BODY_BYTES) -> Unary:
        """A seam sending to ``url`` (its path prefix is kept) that reads at most ``max_body``."""
        ...


@dataclasses.dataclass(frozen=True)
class ServerURL:
    """A server's base URL, split: scheme, host, port (None: the scheme's) and path prefix."""

    scheme: str
    host: str
    port: int | None
    prefix: str

    @classmethod
    def parse(cls, url: str) -> ServerURL:
        """``http://`` or ``https://`` URLs only (:class:`ValueError` otherwise)."""
        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {parsed.scheme!r}: use http or https")
        prefix = parsed.raw_path.decode("ascii").split("?")[0].rstrip("/")
        return cls(parsed.scheme, parsed.host, parsed.port, prefix)

    @functools.cached_property
    def netloc(self) -> str:
        """The ``Host`` header's value: host (bracketed if IPv6) and the port if given (made
        once: every request sends it)."""
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        return netloc if self.port is None else f"{netloc}:{self.port}"

    @property
    def origin(self) -> str:
        """The server, without any user info the URL had (never shown), and the prefix."""
        return f"{self.scheme}://{self.netloc}{self.prefix}"


def request_head(method: str, target: str, headers: Sequence[tuple[str, str]]) -> bytes:
    """The request line and headers (``Host`` among them) as sent, if HTTP/1.1 can carry them.

    A last line of defence: callers check credentials where they read them (the Kubernetes
    token sources do), so a bad token never gets here. The value that fails may be part of a
    credential, so the error shows none of it, not even as the cause.
    """
    try:
        return encode_request(method, target, headers, None)
    except EncodeError:
        raise NotEncodable(
            f"the {method} request could not be encoded: a header value or the target has "
            "characters HTTP does not allow"
        ) from None


class CappedBody:
    """A reply body read piece by piece, refused as soon as it grows over ``limit`` bytes.

    A reply is input: an unbounded body is never read into memory. Over the limit,
    :meth:`add` raises :class:`~trio_lease.BackendProtocolError` (the reader closes the
    connection, which is mid-reply; for a write the outcome is unknown).
    """

    __slots__ = ("_chunks", "_size", "_what", "limit")

    limit: int

    def __init__(self, limit: int, what: str | Outgoing) -> None:
        self.limit = limit
        # "the reply to GET /x from https://host": no server text. Given the request, the
        # words are made only if a message needs them.
        self._what = what
        self._chunks: list[bytes] = []
        self._size = 0

    @property
    def what(self) -> str:
        what = self._what
        return what if isinstance(what, str) else what.what

    def add(self, chunk: bytes) -> None:
        """Append ``chunk``; BackendProtocolError once the body is over the limit."""
        self._size += len(chunk)
        if self._size > self.limit:
            raise BackendProtocolError(
                f"{self.what} is over {self.limit:,} bytes; the outcome is unknown"
            )
        self._chunks.append(chunk)

    @property
    def content(self) -> bytes:
        return b"".join(self._chunks)

    @staticmethod
    def describe(method: str, target: str, origin: str) -> str:
        """How messages name a reply: method, path (no query) and server."""
        return f"the reply to {method} {target.split('?')[0]} from {origin}"


#: No authentication flow on the seam's requests: credentials come with the headers.
_NO_AUTH = httpx.Auth()


class HttpxUnary(Unary):
    """:class:`Unary` on an ``httpx.AsyncClient`` (proxies, injected transports).

    The client's own auth flow is bypassed: credentials, and the retry after a 401, come from
    above the seam as on every other implementation. ``extensions`` go with every request
    (``sni_hostname``). The client belongs to the caller: :meth:`aclose` leaves it open.
    """

    client: httpx.AsyncClient

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        *,
        max_body: int = MAX_BODY_BYTES,
        extensions: Mapping[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.url = ServerURL.parse(url)
        self._base = url.split("?")[0].rstrip("/")
        self._max_body = max_body
        self._extensions = dict(extensions or {})

    def __repr__(self) -> str:
        return f"<HttpxUnary {self.url.origin}>"

    async def _exchange(self, out: Outgoing) -> Reply:
        """Send ``out`` through the httpx client (which adds ``Host`` and ``Content-Length``)."""
        timeout = self.client.timeout
        if out.connect_timeout is not None:
            timeout = httpx.Timeout(
                connect=out.connect_timeout,
                read=timeout.read,
                write=timeout.write,
                pool=timeout.pool,
            )
        request = self.client.build_request(
            out.method,
            self._base + out.target,
            headers=list(out.headers),
            content=out.body,
            timeout=timeout,
            extensions=self._extensions,
        )
        try:
            response = await self.client.send(request, auth=_NO_AUTH, stream=True)
        except httpx.HTTPError as exc:
            error = translate(exc)
        else:
            return await read_capped(response, CappedBody(self._max_body, out))
        # Outside the handler, with the cause translate kept (a socket's or TLS's error, which
        # the backends read: a certificate check), none when the error may quote the wire.
        raise error from error.__cause__

    async def aclose(self) -> None:
        """Nothing to release: the httpx client is its owner's to close."""


def body_pieces(response: httpx.Response) -> AsyncIterator[bytes]:
    """A streamed httpx reply's body, as ``aiter_bytes()`` gives it, in a form its reader can
    close whole (``aclose`` when it stops early).

    httpx's ``aiter_bytes()`` is an async generator iterating another (``aiter_raw()``):
    closing the first leaves the second unfinished for the garbage collector to finalize (on
    trio with a ResourceWarning). A body without a content encoding is read from the reply's
    stream directly: one generator, which closes cleanly over a transport whose stream is an
    iterator object (the in-process emulator). An encoded body goes through httpx's decoders.
    """
    encoding = response.headers.get("content-encoding", "").strip().lower()
    stream = response.stream
    if encoding in ("", "identity") and isinstance(stream, httpx.AsyncByteStream):
        return aiter(stream)
    return response.aiter_bytes()


async def read_capped(response: httpx.Response, body: CappedBody) -> Reply:
    """Read a streamed httpx ``response`` into ``body`` (its cap applies) and close it.

    httpx's errors are raised as the seam's (:func:`~trio_lease._http_errors.translate`).
    """
    try:
        chunks = body_pieces(response)
        try:
            async for chunk in chunks:
                body.add(chunk)
        finally:
            # Not shielded (this runs for every request on the httpx path): httpcore shields
            # its own release of the connection, and closing a reply never waits on the peer.
            # The body's iterator (an async generator) first, so the GC never finalizes it.
            if isinstance(chunks, AsyncGenerator):
                await chunks.aclose()
            await response.aclose()
    except httpx.HTTPError as exc:
        error = translate(exc)
    else:
        return Reply(response.status_code, Headers(response.headers.raw), body.content)
    raise error from error.__cause__  # outside the handler: see translate


def unary_for(
    transport: httpx.AsyncBaseTransport,
    client: httpx.AsyncClient,
    url: str,
    *,
    max_body: int = MAX_BODY_BYTES,
    extensions: Mapping[str, Any] | None = None,
) -> Unary:
    """The seam for unary requests through an injected ``transport`` (``client`` uses it).

    The transport's own seam if it carries one (:class:`CarriesUnary`: the emulator's), else
    ``client`` through :class:`HttpxUnary`.
    """
    if isinstance(transport, CarriesUnary):
        return transport.unary(url, max_body=max_body)
    return HttpxUnary(client, url, max_body=max_body, extensions=extensions)
