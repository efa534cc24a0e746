"""Watch streams: ``GET ...?watch=1`` as one JSON event per line.

A :class:`WatchStream` is fed by the emulator on every commit that matches its filter (type,
namespace, ``labelSelector`` and ``fieldSelector``). With a selector, a change that moves an
object into the selection is sent as ADDED and one that moves it out as DELETED (the previous
object at the new resourceVersion), as the watch cache's ``cacheWatcher.convertToWatchEvent``
does. It ends cleanly after ``timeoutSeconds`` (the server default is 30 minutes:
``minRequestTimeout`` is 1800 s and the real server adds up to as much again at random, which
we leave out to stay deterministic). With ``allowWatchBookmarks=true`` it sends a BOOKMARK
carrying the current resourceVersion every ``bookmark_interval`` seconds from the watch's
start, whatever else it sent, and one 2 seconds before ``timeoutSeconds`` ends (the cacher's
``cacheWatcher.nextBookmarkTime``: ``bookmarkFrequency`` is one minute), and on
:meth:`KubeEmulator.send_bookmarks`. A BOOKMARK of a built-in type carries Go's zero values
(``"creationTimestamp": null``, ``"spec": {}``); a custom resource's carries only metadata.

A watch from a resourceVersion older than the retained history gets HTTP 200 and then a single
``ERROR`` event with a 410 ``Expired`` Status (the watch cache's ``newErrWatcher``: "once we have
passed authn/authz/admission ... errors must fail with a watch event of type ERROR"), then the
stream ends. ``KubeEmulator(watch_expired_status=True)`` answers HTTP 410 instead, as a watch
served straight from etcd can.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._events import as_core_event
from ._resources import ResourceType
from ._selectors import Selection
from ._status import JSON, ApiError

__all__ = ["WatchCut", "WatchStream"]


class WatchCut(Exception):
    """The stream was cut: the connection must be dropped without a clean end."""


def encode(event: JSON) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


class WatchStream:
    """One open watch; iterate it for encoded event lines (bytes)."""

    #: The watched type, and the namespace and name it is narrowed to (None: all).
    rt: ResourceType
    namespace: str | None
    name: str | None
    #: The watching client's bearer token (to cut one client's watches).
    token: str | None
    #: Whether the client allowed BOOKMARK events, and the quiet time between them.
    bookmarks: bool
    bookmark_interval: float
    #: The label and field selection beyond name and namespace (None: everything).
    selection: Selection | None
    #: True once the stream ended.
    closed: bool
    #: The resourceVersion of the last event sent.
    last_rv: str
    #: How each event is written when it is sent (a Table for kubectl; None: as it is).
    present: Callable[[JSON], JSON] | None = None
    #: Only events with a resourceVersion above this one are sent (a watch from a version the
    #: store has not reached yet).
    after: int = 0

    def __init__(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str | None,
        token: str | None,
        *,
        bookmarks: bool,
        timeout: float,
        bookmark_interval: float,
        current_revision: Callable[[], int],
        selection: Selection | None = None,
    ) -> None:
        self.rt = rt
        self.selection = selection if selection is not None and not selection.empty else None
        self.namespace = namespace
        self.name = name
        self.token = token
        self.bookmarks = bookmarks
        self.bookmark_interval = bookmark_interval
        self._revision = current_revision
        started = anyio.current_time()
        self._deadline = started + timeout
        self._next_bookmark = self._bookmark_after(started)
        self._send: MemoryObjectSendStream[tuple[str, Any]]
        self._receive: MemoryObjectReceiveStream[tuple[str, Any]]
        self._send, self._receive = anyio.create_memory_object_stream[tuple[str, Any]](math.inf)
        self.closed = False
        self.last_rv = str(current_revision())

    def matches(self, storage_key: tuple[str, str], namespace: str, name: str) -> bool:
        return (
            storage_key == self.rt.storage_key
            and (self.namespace is None or self.namespace == namespace)
            and (self.name is None or self.name == name)
        )

    def offer(self, type_: str, obj: JSON, prev: JSON | None = None) -> None:
        """Queue one event (``obj`` is already a private copy; ``prev`` is read-only)."""
        if self.after and int(obj["metadata"].get("resourceVersion") or 0) <= self.after:
            return
        if self.selection is not None:
            seen = _as_selected(self.selection, type_, obj, prev)
            if seen is None:
                return
            type_, obj = seen
        obj["apiVersion"] = self.rt.api_version
        if self.rt.legacy_event:
            obj = as_core_event(obj)
        self.last_rv = obj["metadata"].get("resourceVersion", self.last_rv)
        self._push("event", {"type": type_, "object": obj})

    def bookmark(self) -> None:
        if self.bookmarks:
            self._push("event", self._bookmark_event())

    def initial_events_end(self) -> None:
        """The watch-list's BOOKMARK after the initial events, annotated
        ``k8s.io/initial-events-end: "true"``, at the revision they were read at."""
        event = self._bookmark_event()
        event["object"]["metadata"]["annotations"] = {"k8s.io/initial-events-end": "true"}
        self._push("event", event)

    def expire(self, message: str) -> None:
        """Send an in-stream 410 Expired ERROR event, then end the stream."""
        status = ApiError.expired(message).body
        self._push("event", {"type": "ERROR", "object": status})
        self._push("end", None)

    def cut(self, *, abrupt: bool = True) -> None:
        """End the stream: ``abrupt`` drops the connection, else it ends cleanly."""
        self._push("cut" if abrupt else "end", None)

    def _push(self, kind: str, payload: Any) -> None:
        if not self.closed:
            self._send.send_nowait((kind, payload))

    def _bookmark_after(self, now: float) -> float | None:
        """``nextBookmarkTime``: a minute on, but no later than 2 s before the deadline."""
        due = min(now + self.bookmark_interval, self._deadline - 2.0)
        return due if due > now else None

    def _bookmark_event(self) -> JSON:
        obj: JSON = {"kind": self.rt.kind, "apiVersion": self.rt.api_version}
        if self.rt.custom:
            obj["metadata"] = {"resourceVersion": str(self._revision())}
        else:
            obj["metadata"] = {"resourceVersion": str(self._revision()), "creationTimestamp": None}
            obj["spec"] = {}
        return {"type": "BOOKMARK", "object": obj}

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> bytes:
        while not self.closed:
            now = anyio.current_time()
            if now >= self._deadline:
                await self.aclose()
                break
            wait = self._deadline - now
            if self.bookmarks and self._next_bookmark is not None:
                if now >= self._next_bookmark:
                    self._next_bookmark = self._bookmark_after(now)
                    return encode(self._bookmark_event())
                wait = min(wait, self._next_bookmark - now)
            item: tuple[str, Any] | None = None
            with anyio.move_on_after(wait):
                item = await self._receive.receive()
            if item is None:
                continue
            kind, payload = item
            if kind == "event":
                return encode(payload if self.present is None else self.present(payload))
            await self.aclose()
            if kind == "cut":
                raise WatchCut
        raise StopAsyncIteration

    def close(self) -> None:
        """Stop the stream and release its buffer (what :meth:`aclose` does, without awaiting:
        for a stream that is never served)."""
        self.closed = True
        self._send.close()
        self._receive.close()

    async def aclose(self) -> None:
        """Stop the stream and release its buffer."""
        self.close()


def _as_selected(
    selection: Selection, type_: str, obj: JSON, prev: JSON | None
) -> tuple[str, JSON] | None:
    """An event as a watch with a selector sees it: an object that enters the selection is
    ADDED, one that leaves it DELETED (as it was, at the new resourceVersion); None for an
    event outside the selection before and after."""
    now_in = type_ != "DELETED" and selection.matches(obj)
    if type_ == "DELETED":
        was_in = selection.matches(obj)
    else:
        was_in = prev is not None and selection.matches(prev)
    if not now_in and not was_in:
        return None
    if not was_in:  # so now in
        return "ADDED", obj
    if not now_in and type_ != "DELETED":  # was in
        rv = obj["metadata"].get("resourceVersion")
        obj = json.loads(json.dumps(prev))
        obj["metadata"]["resourceVersion"] = rv
        return "DELETED", obj
    return type_, obj
