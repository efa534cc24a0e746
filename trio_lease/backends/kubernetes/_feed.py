"""The shared watch of a namespace: one watch by label for every lease the process follows.

:class:`KubernetesFeed` is what :meth:`KubernetesBackend.watch_feed` returns (see
:mod:`trio_lease._feed` for the contract). It follows the objects the backend created, which
carry the label :data:`~._names.MANAGED_BY_LABEL` (``app.kubernetes.io/managed-by:
trio-lease``), with one stream:

- LIST ``…/leases?labelSelector=app.kubernetes.io/managed-by=trio-lease&limit=500`` (paged
  with ``continue``), publishing the state of every watched lease in it, and ``None`` for each
  watched lease that was in the labelled set before and is not now (deleted while we were not
  watching);
- WATCH from the list's resourceVersion (``allowWatchBookmarks``, ``timeoutSeconds``),
  publishing the record after each ADDED or MODIFIED event and ``None`` after DELETED (deleted,
  or its label removed: the object left the selection). A stream that ends cleanly is resumed
  from the last resourceVersion seen; a 410 Expired (HTTP or an ERROR event) and an unreadable
  event re-list; a cut stream or a 5xx resumes. The resume point and the labelled set are kept
  on the feed object, so when the hub runs the feed again it resumes without listing.

Every line goes through the checks of :mod:`._watch` (line cap, event types, BOOKMARK versions)
and every object through :meth:`._api.KubeApi.read_object` (our kind, namespace, a uid and a
resourceVersion), named by its own ``metadata.name``; object names map back to the watched
lease keys with the backend's name mapping, and an object whose key annotation names another
lease is published as an ``unreadable`` record (so the waiter's next read reports the name
collision). Reopening is paced as in :mod:`._watch` (:mod:`._pacing`): a stream without a useful
event (one at a resourceVersion not seen lately) waits a backoff that doubles up to
``watch_poll_interval``, so a server that only sends bookmarks, garbage or replays costs a few
requests per poll interval, never a tight loop.

Fallbacks, run in the feed's task group and started and stopped as the watched set changes:

- a watched lease that is not in the labelled set (its object was created by client-go, Akka
  or kubectl, or does not exist yet) gets its own field-selector watch (:func:`watch_lease`),
  which stops once the lease shows up in the labelled stream;
- when the label LIST or WATCH is forbidden (403: a Role that grants ``list``/``watch`` only
  with ``resourceNames``), every watched lease gets its own watch (which polls in turn where
  even that is forbidden); the label LIST is tried again every :data:`FORBIDDEN_RETRY` s.

The feed never writes the object cache (:mod:`._cache`): a watch event may lag behind our own
PUT, and caching it would make the next renewal GET first. States are hints; a holder confirms
a foreign one with a read, which does refresh the cache.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from typing import Final

import anyio
import anyio.lowlevel
import httpx

from ..._abc import LeaseRecord, Publish, Watched, WatchFeed
from ..._exceptions import BackendProtocolError, BackendUnavailable, LeaseConfigError
from ..._wire import JsonObject
from ._api import KubeApi
from ._errors import RequestContext, error_from
from ._names import MANAGED_BY_SELECTOR, is_valid_name
from ._pacing import Cursor, WatchBackoff
from ._reading import resource_version
from ._watch import (
    WATCH_TIMEOUT_SECONDS,
    _check_opened,
    _control,
    _event,
    _Forbidden,
    _Lines,
    _Resync,
    read_list_page,
    watch_lease,
)

__all__ = ["FORBIDDEN_RETRY", "PAGE_SIZE", "KubernetesFeed"]

#: Items per page of the label LIST (client-go's reflector pages by 500 too).
PAGE_SIZE: Final = 500
#: At most this many pages (a million leases): a server that never ends its pages is hostile.
MAX_PAGES: Final = 2000
#: Seconds between attempts of the label LIST once it was forbidden.
FORBIDDEN_RETRY: Final = 300.0
_STREAM_TIMEOUT: Final = httpx.Timeout(30.0, read=WATCH_TIMEOUT_SECONDS + 30.0)

#: The first ``"resourceVersion":"…"`` of an event line: the object's own.
_FIRST_VERSION: Final = re.compile(rb'"resourceVersion"\s*:\s*"([^"\\]{1,64})"')


class KubernetesFeed(WatchFeed):
    """One label watch for the namespace, plus per-name watches where it cannot see."""

    def __init__(self, api: KubeApi, *, poll_interval: float) -> None:
        self.api: KubeApi = api
        self.poll_interval: float = poll_interval
        #: The resume point of the label watch ("": LIST first).
        self.cursor: Cursor = Cursor("", None)
        #: The labelled objects as of the resume point: object name → resourceVersion.
        self.labelled: dict[str, str] = {}
        #: Whether a label LIST succeeded (until then no lease counts as uncovered).
        self.listed: bool = False
        #: The label LIST or WATCH was refused (403): every lease has its own watch.
        self.forbidden: bool = False
        #: How many label LIST requests and label WATCH requests were sent (for tests).
        self.lists: int = 0
        self.streams: int = 0
        #: Events of this process's own writes skipped without decoding (for tests).
        self.own_skipped: int = 0
        #: The keys that have their own watch now (not shown by the label stream).
        self.individual: set[str] = set()
        self._wake: anyio.Event = anyio.Event()
        self._keys: dict[str, list[str]] = {}
        #: Object name → keys, for the watched set ``_keys_of`` at ``_keys_generation``.
        self._keys_of: Watched | None = None
        self._keys_generation = -1

    def __repr__(self) -> str:
        return f"<KubernetesFeed {self.api.ctx('watch').target}>"

    async def run(self, watched: Watched, publish: Publish) -> None:
        self._wake = anyio.Event()  # events belong to the loop of this run
        scopes: dict[str, anyio.CancelScope] = {}
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._follow_label, watched, publish)
                tg.start_soon(self._forward_changes, watched)
                while True:
                    wake = self._wake = anyio.Event()
                    wanted = set(self._uncovered(watched))
                    for key in wanted - scopes.keys():
                        scopes[key] = anyio.CancelScope()
                        tg.start_soon(self._follow_one, key, scopes[key], publish)
                    for key in scopes.keys() - wanted:
                        scopes.pop(key).cancel()
                    self.individual = set(scopes)
                    await wake.wait()
        finally:
            self.individual = set()

    def _uncovered(self, watched: Watched) -> Iterable[str]:
        """The watched keys the label stream does not show (each needs its own watch)."""
        if self.forbidden:
            return list(watched)
        if not self.listed:
            return []
        keys = self._map(watched)
        return [key for name, named in keys.items() if name not in self.labelled for key in named]

    def _poke(self) -> None:
        self._wake.set()

    async def _forward_changes(self, watched: Watched) -> None:
        while True:
            await watched.wait_changed()
            self._poke()

    def _map(self, watched: Watched) -> dict[str, list[str]]:
        """Object name → the watched keys stored under it (keys that cannot be names left out)."""
        if self._keys_of is not watched or self._keys_generation != watched.generation:
            keys: dict[str, list[str]] = {}
            for key in watched:
                try:
                    keys.setdefault(self.api.objects.object_name(key), []).append(key)
                except LeaseConfigError:
                    continue  # an invalid name (map_names off): its own reads report it
            self._keys, self._keys_of, self._keys_generation = keys, watched, watched.generation
        return self._keys

    # -- per-name watches ----------------------------------------------------------------------

    async def _follow_one(self, key: str, scope: anyio.CancelScope, publish: Publish) -> None:
        """The field-selector watch of one lease the label stream does not show."""
        async def emit(state: LeaseRecord | None) -> None:  # noqa: ASYNC124  an Emit is async
            publish(key, state)
        with scope:
            while True:  # watch_lease retries by itself; it ends only if something is amiss
                await watch_lease(
                    self.api, key, emit, poll_interval=self.poll_interval, cache=False
                )
                await anyio.sleep(self.poll_interval)

    # -- the label stream ----------------------------------------------------------------------

    async def _follow_label(self, watched: Watched, publish: Publish) -> None:
        """LIST when there is no resume point, then WATCH; forever, paced by the backoff."""
        backoff = WatchBackoff(self.poll_interval)
        while True:
            try:
                if not self.cursor.version:
                    await self._relist(watched, publish)
                await self._watch(watched, publish, backoff)
            except _Forbidden:
                self.forbidden = True
                self.cursor.version = ""
                self._poke()
                await anyio.sleep(FORBIDDEN_RETRY)
                continue
            except _Resync:
                self.cursor.version = ""  # too old: LIST again
            except BackendProtocolError:
                self.cursor.version = ""  # an event we could not read: LIST again
            except BackendUnavailable:
                pass  # a cut stream or a 5xx: resume from the last version seen
            await backoff.sleep()

    async def _relist(self, watched: Watched, publish: Publish) -> None:
        """LIST the labelled objects; publish every watched lease's state (None: gone)."""
        self.lists += 1
        objects, version = await _list_labelled(self.api)
        before, self.labelled = self.labelled, {}
        keys = self._map(watched)
        for name, obj in objects.items():
            self.labelled[name] = resource_version(obj)
            for key in keys.get(name, ()):
                publish(key, self._state(key, obj))
        for name in before.keys() - self.labelled.keys():
            for key in keys.get(name, ()):
                publish(key, None)
        self.cursor.version = version
        self.listed = True
        self._poke()

    async def _watch(self, watched: Watched, publish: Publish, backoff: WatchBackoff) -> None:
        """Watch streams from the resume point, resumed after each clean end."""
        while True:
            before, opened = self.cursor.useful, anyio.current_time()
            await self._stream(watched, publish)
            await backoff.after_stream(self.cursor.useful > before, opened)

    async def _stream(self, watched: Watched, publish: Publish) -> None:
        """One label watch request: publish the state after each event of a watched lease."""
        api, cursor = self.api, self.cursor
        ctx = api.ctx("watch")
        params = {
            "watch": "1",
            "labelSelector": MANAGED_BY_SELECTOR,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS),
            "resourceVersion": cursor.version,
        }
        self.streams += 1
        async with api.stream(api.collection_path(), params, ctx, limits=_STREAM_TIMEOUT) as r:
            await _check_opened(api, r, ctx)
            if self.forbidden:  # allowed again: the label stream covers its leases
                self.forbidden = False
                self._poke()
            async with contextlib.aclosing(_Lines(r, ctx)) as lines:
                async for line in lines:
                    if self._own_write(line):
                        continue
                    if self.api.objects.writing:
                        # A write's event can be read before its reply (both arrived at once):
                        # let the writers read theirs first, then look again (one pass).
                        await anyio.lowlevel.checkpoint()
                        if self._own_write(line):
                            continue
                    kind, obj = _event(line, ctx)
                    if kind in ("ERROR", "BOOKMARK"):
                        _control(kind, obj, cursor, ctx)
                        continue
                    name = _name_of(obj, ctx)
                    obj = api.read_object(obj, name, ctx, listed=True)
                    self._apply(kind, name, obj, watched, publish)

    def _own_write(self, line: bytes) -> bool:
        """Skip, undecoded, the event of a write this process made to a covered object.

        Most events a holder's stream carries are its own renewals; decoding them cost about a
        tenth of the client's CPU per renewal. The first resourceVersion in the line is the
        object's (a key inside a string value would be escaped); a version this process wrote
        names the event of that write. Only writes of a held state are recorded (a renewal or
        an acquisition; not a release or a handover request, which a waiter or the holder in
        this process must see at once). Skipping one only withholds a hint from this process's
        subscribers (a holder ignores its own writes; a waiter's countdown restarts at its next
        read instead, later, which is the safe side); the resume point still moves.
        """
        # One method, not three (a call each): it runs for nearly every event of the stream.
        own = self.api.objects.own_writes
        if not own:
            return False
        found = _FIRST_VERSION.search(line)
        if found is None:
            return False
        version = found.group(1).decode("ascii", "replace")
        name = own.get(version)
        if name is None or name not in self.labelled:
            return False
        del own[version]
        self.labelled[name] = version
        cursor = self.cursor
        cursor.version = version
        cursor.saw(version)
        self.own_skipped += 1
        return True

    def _apply(
        self, kind: str, name: str, obj: JsonObject, watched: Watched, publish: Publish
    ) -> None:
        """One ADDED, MODIFIED or DELETED event of a labelled object (read_object checked)."""
        version = resource_version(obj)
        self.cursor.version = version
        news = self.cursor.saw(version)  # a replayed older version is no progress
        known = self.labelled.get(name)
        if kind == "DELETED":
            if known is not None:
                del self.labelled[name]
                self.cursor.useful += news
                self._poke()  # no longer covered: its own watch tells what is there now
        else:
            self.labelled[name] = version
            if known != version:
                self.cursor.useful += news
            if known is None:
                self._poke()  # covered now: its own watch may stop
        for key in self._map(watched).get(name, ()):
            publish(key, None if kind == "DELETED" else self._state(key, obj))

    def _state(self, key: str, obj: JsonObject) -> LeaseRecord:
        """The record of ``key`` in ``obj`` (not cached; see the module docstring)."""
        return self.api.objects.peek(key, obj)


def _name_of(obj: object, ctx: RequestContext) -> str:
    """The object's ``metadata.name`` if it is a valid object name, else BackendProtocolError."""
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if isinstance(name, str) and is_valid_name(name):
        return name
    raise BackendProtocolError(
        f"an object in the {ctx.verb} of {ctx.target} has no valid metadata.name"
    )


async def _list_labelled(api: KubeApi) -> tuple[dict[str, JsonObject], str]:
    """Every labelled object (checked) by name, and the list's resourceVersion (paged)."""
    ctx = api.ctx("list")
    objects: dict[str, JsonObject] = {}
    version, token = "", ""
    for _ in range(MAX_PAGES):
        params = {"labelSelector": MANAGED_BY_SELECTOR, "limit": str(PAGE_SIZE)}
        if token:
            params["continue"] = token
        response = await api.request("GET", api.collection_path(), ctx, params=params)
        if response.status_code == 403:
            raise _Forbidden
        if response.status_code == 410:  # the continue token expired: LIST again later
            raise BackendUnavailable(f"the paged list of {ctx.target} expired (410)")
        if response.status_code != 200:
            raise error_from(response, ctx)
        items, page_version, token = read_list_page(api, response.content, ctx)
        version = version or page_version
        for item in items:
            name = _name_of(item, ctx)
            objects[name] = api.read_object(item, name, ctx, listed=True)
        if not token:
            return objects, version
    raise BackendProtocolError(f"the list of {ctx.target} did not end after {MAX_PAGES} pages")
