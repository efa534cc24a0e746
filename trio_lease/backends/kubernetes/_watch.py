"""Watch-based waiting: wake contenders as soon as their lease changes.

``watch_lease`` yields the current record (a LIST of the one object, whose resourceVersion is
the store's current one), then opens
``GET …/leases?watch=1&fieldSelector=metadata.name=<name>&resourceVersion=<rv>
&allowWatchBookmarks=true&timeoutSeconds=300`` and yields the record after every ADDED or
MODIFIED event and ``None`` after DELETED. BOOKMARKs only advance the resume point. When the
server ends the stream (timeoutSeconds, or its own 30-60 min limit) the watch resumes from the
last version seen; a 410 Expired (at the start or as an in-stream ERROR) re-lists and watches
again from the new version.

Pacing (:mod:`._pacing`): every reopening is paced by one backoff. A stream that ends without
a *useful* event (an ADDED, MODIFIED or DELETED of our object at a resourceVersion this cursor
has not seen lately; bookmarks, repeats and replays of older versions do not count), a failed or
unreadable LIST, a cut stream and a protocol error each wait before the next request, starting
at :data:`FIRST_BACKOFF` and doubling up to ``watch_poll_interval``, with jitter. A useful event
in a stream that lived at least :data:`FIRST_BACKOFF` resets it, so after a real change the
watch resumes at once; so does a stream that stayed open at least ``watch_poll_interval`` (the
server's normal end after ``timeoutSeconds``: reopening it at once costs at most one request per
poll interval, and an idle lease is not left unwatched). A server whose every stream ends after
a bookmark (or at once, or with garbage, or with a replayed version) therefore costs a few
requests per poll interval, and one that invents news at most one per :data:`FIRST_BACKOFF`:
never a tight loop.

Every line is read through the same checks as any other reply: at most
:data:`~trio_lease._wire.MAX_BODY_BYTES` per line (a longer line is a protocol error, not
unbounded memory), parsed by :func:`~trio_lease._wire.load_json`, ``type`` one of ADDED,
MODIFIED, DELETED, BOOKMARK, ERROR, ``object`` an object; ADDED, MODIFIED and DELETED objects
must be our object (checked by :meth:`._api.KubeApi.read_object`; they may omit
``apiVersion`` and ``kind``), a BOOKMARK must carry a resourceVersion. The LIST must be a
``LeaseList`` of our apiVersion whose ``items`` is a list of at most one object (ours) and whose
``metadata.resourceVersion`` is a non-empty string. Anything else is a
:class:`~trio_lease.BackendProtocolError`: the stream is dropped, and the watch re-lists after
the backoff.

A watch that is forbidden (403: the Role lacks ``watch`` or ``list``) falls back to polling with
a GET every ``watch_poll_interval`` seconds. A 401 that survives the credential refresh, and
configuration errors (a missing CRD or namespace, a TLS certificate that cannot be verified),
are raised. A dead holder emits no event: expiry is still judged by the core's local countdown,
never here.

``backend.watch(name)`` runs :func:`watch_lease` in a task of its own and hands out a receive
stream (``async with backend.watch(name) as records: async for record in records: ...``): the
HTTP stream, its timer and its task group never wrap the caller's loop body.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Final, NoReturn, Self

import anyio
import httpx

from ... import _wire
from ..._abc import LeaseRecord
from ..._exceptions import (
    BackendAuthError,
    BackendProtocolError,
    BackendUnavailable,
    LeaseConfigError,
)
from ..._http import body_pieces
from ..._http_errors import HTTPFailure
from ..._wire import JsonObject
from ...abc import Emit
from ._api import KubeApi, Streamed
from ._errors import RequestContext, error_for, error_from, map_transport_error
from ._pacing import FIRST_BACKOFF, Cursor, WatchBackoff
from ._reading import resource_version

__all__ = [
    "FIRST_BACKOFF",
    "WATCH_TIMEOUT_SECONDS",
    "list_page",
    "read_list_page",
    "watch_lease",
]

WATCH_TIMEOUT_SECONDS = 300
#: Longest event line accepted (one object per line; the same cap as a whole reply).
MAX_LINE_BYTES: Final = _wire.MAX_BODY_BYTES
_EVENT_TYPES: Final = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})
#: A watch stream is opened within the request timeout, then read for up to timeoutSeconds.
_STREAM_TIMEOUT: Final = httpx.Timeout(30.0, read=WATCH_TIMEOUT_SECONDS + 30.0)


class _Resync(Exception):
    """The watch cannot continue from its resume point: LIST and start again."""


class _Forbidden(Exception):
    """The Role does not allow watch (or list): poll instead."""


async def watch_lease(
    api: KubeApi,
    key: str,
    emit: Emit[LeaseRecord | None],
    *,
    watch: bool = True,
    poll_interval: float = 5.0,
    cache: bool = True,
) -> None:
    """Emit the current record of ``key``, then each change (see the module docstring).

    ``watch``: use a watch (until it is forbidden); else, and after that, poll every
    ``poll_interval`` seconds. ``cache``: keep the objects seen for the next PUT (the shared
    watch's per-name watches do not: an event may lag behind our own write).
    """
    lease = _Watched(api, key, emit, cache=cache)
    if watch:
        await lease.watch(WatchBackoff(poll_interval))
    await lease.poll(poll_interval)


class _Watched:
    """One lease being waited on: its object name, and the states read of it."""

    def __init__(
        self, api: KubeApi, key: str, emit: Emit[LeaseRecord | None], *, cache: bool = True
    ) -> None:
        self.api = api
        self.key = key
        self.emit = emit
        self.cache = cache
        self.object_name = api.objects.object_name(key)

    def state(self, obj: JsonObject | None) -> LeaseRecord | None:
        """The record in ``obj`` (kept for the next PUT if caching), or None: no object."""
        if not self.cache:
            return None if obj is None else self.api.objects.peek(self.key, obj)
        if obj is None:
            self.api.objects.forget(self.object_name)
            return None
        return self.api.objects.record(self.key, obj)

    async def poll(self, interval: float) -> None:
        """GET every ``interval`` seconds, forever (failed reads are skipped)."""
        while True:
            try:
                obj = await self.api.get_object(self.object_name)
            except BackendUnavailable:  # protocol errors too
                await anyio.sleep(interval)
                continue
            await self.emit(self.state(obj))
            await anyio.sleep(interval)

    async def watch(self, backoff: WatchBackoff) -> None:
        """LIST, then watch from the list's version, again after each resync; ends on 403."""
        while True:
            try:
                obj, version = await _list(self.api, self.object_name)
            except _Forbidden:
                return  # the Role lacks list (so watch is useless): poll from now on
            except BackendUnavailable:  # protocol errors too
                await backoff.sleep()
                continue
            await self.emit(self.state(obj))
            cursor = Cursor(version, resource_version(obj) if obj is not None else None)
            try:
                await self.follow(cursor, backoff)
            except _Forbidden:
                return  # the Role lacks watch/list: poll from now on
            except (_Resync, BackendUnavailable):  # a cut stream, a 5xx, an unreadable event
                pass
            await backoff.sleep()  # pace every re-list, even after useful events

    async def follow(self, cursor: Cursor, backoff: WatchBackoff) -> NoReturn:
        """Watch streams from the cursor, resumed after each clean end (raises to re-list)."""
        while True:
            before, opened = cursor.useful, anyio.current_time()
            await self.stream(cursor)
            # At once after news in a stream that lived, or a long healthy stream; else wait.
            await backoff.after_stream(cursor.useful > before, opened)

    async def stream(self, cursor: Cursor) -> None:
        """One watch request: emits the state after each ADDED/MODIFIED/DELETED event.

        The stream's own timer (its whole life, :meth:`._api.KubeApi.stream`) is open around
        ``emit``: it can cancel only this task's wait for the reader, and the watch then
        re-lists, so the latest state is still delivered."""
        api, object_name = self.api, self.object_name
        ctx = api.ctx("watch", object_name)
        params = {
            "watch": "1",
            "fieldSelector": f"metadata.name={object_name}",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS),
        }
        if cursor.version:
            params["resourceVersion"] = cursor.version
        path = api.collection_path()
        async with api.stream(path, params, ctx, limits=_STREAM_TIMEOUT) as response:
            await _check_opened(api, response, ctx)
            async with contextlib.aclosing(_Lines(response, ctx)) as lines:
                async for line in lines:
                    kind, obj = _event(line, ctx)
                    if kind in ("ERROR", "BOOKMARK"):
                        _control(kind, obj, cursor, ctx)
                        continue
                    obj = api.read_object(obj, object_name, ctx, listed=True)
                    cursor.moved_to(resource_version(obj))
                    await self.emit(self.state(None if kind == "DELETED" else obj))


async def _list(api: KubeApi, object_name: str) -> tuple[JsonObject | None, str]:
    """LIST the one object by field selector: the object (or None) and the list's version.

    The list's resourceVersion is the store's current one, so a watch from it is never "too
    old" right away; an object's own resourceVersion can be (compaction runs every few minutes
    and an idle lease keeps its old version).
    """
    ctx = api.ctx("list", object_name)
    response = await api.request(
        "GET", api.collection_path(), ctx, params={"fieldSelector": f"metadata.name={object_name}"}
    )
    if response.status_code == 403:
        raise _Forbidden
    if response.status_code != 200:
        raise error_from(response, ctx)
    body = _wire.load_json(response.content, f"the answer to list of {ctx.target}")
    try:
        items, version = _list_items(api, body)
    except _wire.Malformed as exc:
        raise BackendProtocolError(
            f"the answer to list of {ctx.target} is not a {api.kind.kind}List: {exc}"
        ) from None
    if not items:
        return None, version
    return api.read_object(items[0], object_name, ctx, listed=True), version


def list_page(api: KubeApi, body: object) -> tuple[list[object], str, str]:
    """The items, resourceVersion and continue token of one LIST answer, or Malformed.

    The one reader of a LIST of our kind (this module's one-object list, and the shared
    watch's pages in :mod:`._feed`).
    """
    listing = _wire.obj(body, "")
    expected = f"{api.kind.kind}List"
    if listing.get("kind") != expected:
        raise _wire.Malformed("kind", f"expected {expected!r}")
    if listing.get("apiVersion") != api.kind.api_version:
        raise _wire.Malformed("apiVersion", f"expected {api.kind.api_version!r}")
    items = listing.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise _wire.Malformed("items", f"expected a list, got {_wire.describe(items)}")
    metadata = _wire.obj(listing.get("metadata"), "metadata")
    token = metadata.get("continue") or ""
    if not isinstance(token, str):
        raise _wire.Malformed("metadata.continue", "expected a string")
    return items, resource_version(listing), token


def read_list_page(
    api: KubeApi, content: bytes, ctx: RequestContext
) -> tuple[list[object], str, str]:
    """:func:`list_page` of a LIST answer's body, one that is not such a page an error."""
    body = _wire.load_json(content, f"the answer to list of {ctx.target}")
    try:
        return list_page(api, body)
    except _wire.Malformed as exc:
        raise BackendProtocolError(
            f"the answer to list of {ctx.target} is not a {api.kind.kind}List: {exc}"
        ) from None


def _list_items(api: KubeApi, body: object) -> tuple[list[object], str]:
    """The items and the resourceVersion of a one-object LIST answer, or Malformed."""
    items, version, _ = list_page(api, body)
    if len(items) > 1:
        raise _wire.Malformed("items", "expected at most one object (the field selector names one)")
    return items, version


async def _check_opened(api: KubeApi, response: Streamed, ctx: RequestContext) -> None:
    """Raise unless the watch opened: 410 re-lists, 403 polls, configuration errors raise."""
    if response.status_code == 410:
        raise _Resync
    if response.status_code == 200:
        return
    status = await api.failure(response, ctx)
    if status.code == 403:
        raise _Forbidden
    error = error_for(status, ctx)
    if isinstance(error, LeaseConfigError | BackendAuthError):
        raise error
    raise BackendUnavailable(f"watch of {ctx.target} failed with {status.code}")


class _Lines:
    """The non-empty lines of a watch stream; a line over MAX_LINE_BYTES is a protocol error.

    An iterator object, not an async generator: one abandoned mid-stream (its reader cancelled,
    an error in the loop) holds nothing a finalizer must run. Its owner closes it
    (``contextlib.aclosing``), which closes the body's iterator (httpx's is an async generator).
    """

    __slots__ = ("_buffer", "_chunks", "_ctx", "_ended", "_searched")

    def __init__(self, response: Streamed, ctx: RequestContext) -> None:
        self._buffer = bytearray()
        self._chunks: AsyncIterator[bytes]
        if isinstance(response, httpx.Response):
            self._chunks = body_pieces(response)
        else:
            self._chunks = response.aiter_bytes()
        self._ctx = ctx
        self._searched = 0  # the buffer before this holds no newline
        self._ended = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        buffer = self._buffer
        while True:
            while 0 <= (end := buffer.find(b"\n", self._searched)) <= MAX_LINE_BYTES:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                self._searched = 0
                if line and not line.isspace():  # not blank (without a stripped copy)
                    return line
            self._searched = len(buffer)
            if len(buffer) > MAX_LINE_BYTES:
                raise BackendProtocolError(
                    f"watch of {self._ctx.target} sent an event line over {MAX_LINE_BYTES:,} bytes"
                )
            if self._ended:
                line = bytes(buffer)
                buffer.clear()
                if line and not line.isspace():
                    return line
                raise StopAsyncIteration
            # The body's next piece, read here rather than by a coroutine of its own (one per
            # event: most events come one to a piece); a transport error mapped to ours.
            try:
                piece = await anext(self._chunks)
            except StopAsyncIteration:
                self._ended = True
                continue
            except (httpx.HTTPError, HTTPFailure) as exc:
                failure = map_transport_error(exc, self._ctx)
            else:
                last = len(piece) - 1
                if not buffer and piece.find(b"\n") == last and last <= MAX_LINE_BYTES:
                    # One whole line, as the server writes each event: taken without the
                    # buffer (one copy, not four).
                    if last > 0 and not piece.isspace():
                        return piece[:last]
                    continue
                buffer += piece
                continue
            # Raised outside the handler: httpx's error (through h11's, the raw bytes of a
            # malformed chunk, which may quote our token) must not stay as its __context__.
            raise failure from None

    async def aclose(self) -> None:
        """Close the body's iterator (an async generator on httpx's path)."""
        if isinstance(self._chunks, AsyncGenerator):
            await self._chunks.aclose()


def _event(line: bytes, ctx: RequestContext) -> tuple[str, JsonObject]:
    """One event line as (type, object), or BackendProtocolError."""
    what = f"an event of the watch of {ctx.target}"
    try:
        event = _wire.obj(_wire.load_json(line, what), "")
        kind = event.get("type")
        if not isinstance(kind, str) or kind not in _EVENT_TYPES:
            raise _wire.Malformed("type", "expected ADDED, MODIFIED, DELETED, BOOKMARK or ERROR")
        return kind, _wire.obj(event.get("object"), "object")
    except _wire.Malformed as exc:
        raise BackendProtocolError(f"{what} is unreadable: {exc}") from None


def _control(kind: str, obj: JsonObject, cursor: Cursor, ctx: RequestContext) -> None:
    """An ERROR event ends the stream (410: re-list); a BOOKMARK moves the resume point."""
    if kind == "ERROR":
        code = obj.get("code")
        if type(code) is int and code == 410:
            raise _Resync
        raise BackendUnavailable(f"watch of {ctx.target} ended with an error event")
    try:
        cursor.version = resource_version(obj)
    except _wire.Malformed as exc:
        raise BackendProtocolError(
            f"a BOOKMARK of the watch of {ctx.target} is unreadable: {exc}"
        ) from None
