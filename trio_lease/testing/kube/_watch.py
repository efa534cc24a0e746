"""Watch streams: ``GET ...?watch=1`` as one JSON event per line.

A :class:`WatchStream` is fed by the emulator on every commit that matches its filter (type,
namespace, ``fieldSelector=metadata.name=...``). It ends cleanly after ``timeoutSeconds`` (the
server default is 30 minutes: ``minRequestTimeout`` is 1800 s and the real server adds up to
as much again at random, which we leave out to stay deterministic). With
``allowWatchBookmarks=true`` it sends a BOOKMARK carrying the current resourceVersion every
``bookmark_interval`` seconds of quiet (the watch cache sends them about once a minute) and on
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

from ._resources import ResourceType
from ._status import ApiError

__all__ = ["WatchCut", "WatchStream"]

JSON = dict[str, Any]


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
    #: True once the stream ended.
    closed: bool
    #: The resourceVersion of the last event sent.
    last_rv: str
    #: How each event is written when it is sent (a Table for kubectl; None: as it is).
    present: Callable[[JSON], JSON] | None = None

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
    ) -> None:
        self.rt = rt
        self.namespace = namespace
        self.name = name
        self.token = token
        self.bookmarks = bookmarks
        self.bookmark_interval = bookmark_interval
        self._revision = current_revision
        self._deadline = anyio.current_time() + timeout
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

    def offer(self, type_: str, obj: JSON) -> None:
        """Queue one event (the object is already a private copy)."""
        obj["apiVersion"] = self.rt.api_version
        self.last_rv = obj["metadata"].get("resourceVersion", self.last_rv)
        self._push("event", {"type": type_, "object": obj})

    def bookmark(self) -> None:
        if self.bookmarks:
            self._push("event", self._bookmark_event())

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
            if self.bookmarks:
                wait = min(wait, self.bookmark_interval)
            item: tuple[str, Any] | None = None
            with anyio.move_on_after(wait):
                item = await self._receive.receive()
            if item is None:
                if anyio.current_time() < self._deadline and self.bookmarks:
                    return encode(self._bookmark_event())
                continue
            kind, payload = item
            if kind == "event":
                return encode(payload if self.present is None else self.present(payload))
            await self.aclose()
            if kind == "cut":
                raise WatchCut
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop the stream and release its buffer."""
        self.closed = True
        self._send.close()
        self._receive.close()
