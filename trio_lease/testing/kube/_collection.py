"""List and watch: the collection reads (``GET .../leases`` with or without ``watch=1``).

A list honours ``labelSelector`` and ``fieldSelector`` (:mod:`._selectors`) and pages with
``limit`` and ``continue`` as ``apiserver/pkg/storage/etcd3/store.go`` ``GetList`` does: items
in etcd key order (``<namespace>/<name>``), a page of at most ``limit`` selected items, and
when more remain an opaque ``metadata.continue`` token (``storage.EncodeContinue``: base64url
of ``{"v":"meta.k8s.io/v1","rv":<revision>,"start":"<next key>"}``) plus
``remainingItemCount`` (only without selectors). Every page of one list is read at the first
page's revision, so it is consistent; a token whose revision has been compacted away is 410
``Expired`` with the ``inconsistentContinue`` message and a fresh token (``rv`` -1) that
continues at the latest revision (``etcd3/errors.go``). A token that does not decode is 400
``invalid continue token: continue key is not valid...``, and ``resourceVersion`` together
with ``continue`` is 400.

A list's ``resourceVersion`` picks where it is served from, as ``cacher.shouldDelegateList``
does: ``0``, or ``N`` without a ``limit``, from the watch cache (the whole list at the latest
revision, once the store has reached ``N``: :func:`wait_until_fresh`, else 504 "Too large
resource version"); ``N`` with a ``limit`` or ``resourceVersionMatch=Exact`` from etcd, exactly
at ``N``. ``sendInitialEvents=true`` on a watch sends the current state, then the
``k8s.io/initial-events-end`` BOOKMARK (``cacher.isListWatchRequest``).
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath

from ._cluster import Cluster
from ._http import Request, Response
from ._resources import ResourceType
from ._selectors import Selection
from ._status import JSON, ApiError, FieldError
from ._store import Store
from ._watch import WatchStream

__all__ = ["list_objects", "start_watch", "validate_list_options", "wait_until_fresh"]


_INCONSISTENT = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)
_INVALID = "invalid continue token: continue key is not valid"
_TOO_OLD = "The resourceVersion for the provided list is too old."


def validate_list_options(query: dict[str, str], *, watch: bool) -> None:
    """``ValidateListOptions`` (``apimachinery/pkg/apis/meta/internalversion/validation``):
    422 ``Invalid`` on ``ListOptions.meta.k8s.io``, as ``handlers/get.go`` answers."""
    errors = _watch_option_errors(query) if watch else _list_option_errors(query)
    if errors:
        raise ApiError.invalid("ListOptions", "meta.k8s.io", "", errors)


def _watch_option_errors(query: dict[str, str]) -> list[FieldError]:
    """What ``ValidateListOptions`` finds wrong with a watch's options."""
    match = query.get("resourceVersionMatch", "")
    initial = "sendInitialEvents" in query
    errors: list[FieldError] = []
    if initial and match != "NotOlderThan":
        errors.append(FieldError("resourceVersionMatch", "Forbidden",
                                 "sendInitialEvents requires setting resourceVersionMatch "
                                 "to NotOlderThan"))
    if not match:
        return errors
    if not initial:
        errors.append(FieldError("resourceVersionMatch", "Forbidden",
                                 "resourceVersionMatch is forbidden for watch unless "
                                 "sendInitialEvents is provided"))
    if match != "NotOlderThan":
        errors.append(FieldError("resourceVersionMatch", "NotSupported",
                                 'supported values: "NotOlderThan"', match))
    if query.get("continue"):
        errors.append(FieldError("resourceVersionMatch", "Forbidden",
                                 "resourceVersionMatch is forbidden when continue is provided"))
    return errors


def _list_option_errors(query: dict[str, str]) -> list[FieldError]:
    """What ``ValidateListOptions`` finds wrong with a list's options."""
    match = query.get("resourceVersionMatch", "")
    errors: list[FieldError] = []
    if match:
        if not query.get("resourceVersion"):
            errors.append(FieldError("resourceVersionMatch", "Forbidden",
                                     "resourceVersionMatch is forbidden unless "
                                     "resourceVersion is provided"))
        if query.get("continue"):
            errors.append(FieldError("resourceVersionMatch", "Forbidden",
                                     "resourceVersionMatch is forbidden when continue is "
                                     "provided"))
        if match not in ("Exact", "NotOlderThan"):
            errors.append(FieldError("resourceVersionMatch", "NotSupported",
                                     'supported values: "Exact", "NotOlderThan", ""', match))
        if match == "Exact" and query.get("resourceVersion") == "0":
            errors.append(FieldError("resourceVersionMatch", "Forbidden",
                                     'resourceVersionMatch "exact" is forbidden for '
                                     'resourceVersion "0"'))
    if "sendInitialEvents" in query:
        errors.append(FieldError("sendInitialEvents", "Forbidden",
                                 "sendInitialEvents is forbidden for list"))
    return errors


def _is_event(rt: ResourceType) -> bool:
    return rt.storage_key == ("events.k8s.io", "events")


def _parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ApiError.bad_request(
            f'resourceVersion: Invalid value: "{text}": must be a valid resource version'
        )
    return value


def _from_cache(query: dict[str, str], limit: int) -> bool:
    """``cacher.shouldDelegateList`` inverted: served from the watch cache (any version at
    least as new), not etcd. ``resourceVersion=0`` always is, whatever the ``limit``."""
    rv, match = query.get("resourceVersion", ""), query.get("resourceVersionMatch", "")
    if not rv or query.get("continue"):
        return False
    if rv == "0":
        return True
    return match != "Exact" and limit <= 0


async def wait_until_fresh(emulator: Cluster, request: Request) -> None:
    """A list from the watch cache at a version the store has not reached yet waits for it
    (``watchCache.waitUntilFreshAndBlock``); the page then answers 504 if it never came."""
    query = request.query
    validate_list_options(query, watch=False)
    if _from_cache(query, _limit(query)) and query["resourceVersion"] != "0":
        wanted = _parse_rv(query["resourceVersion"])
        if wanted > emulator.store.revision:
            await emulator.wait_for_revision(wanted)


def _limit(query: dict[str, str]) -> int:
    try:
        return int(query.get("limit") or 0)
    except ValueError as exc:
        raise ApiError.bad_request(str(exc)) from None


def _key(rt: ResourceType, obj: JSON, scope: str | None) -> str:
    """The object's etcd key below the list's key prefix."""
    meta = obj["metadata"]
    if not rt.namespaced or scope is not None:
        return str(meta["name"])
    return f"{meta.get('namespace', '')}/{meta['name']}"


def _encode_continue(revision: int, start: str) -> str:
    token = json.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": start},
                       separators=(",", ":"))
    return base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[str, int]:
    """(start key, revision) of a continue token; 400 as ``storage.DecodeContinue`` fails."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise ApiError.bad_request(f"{_INVALID}: {exc}") from None
    if not isinstance(data, dict) or data.get("v") != "meta.k8s.io/v1":
        version = data.get("v", "") if isinstance(data, dict) else ""
        raise ApiError.bad_request(
            f"{_INVALID}: server does not recognize this encoded version {version}"
        )
    revision, start = data.get("rv"), data.get("start")
    if not isinstance(revision, int) or revision == 0:
        raise ApiError.bad_request(
            f"{_INVALID}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        )
    if not isinstance(start, str) or not start:
        raise ApiError.bad_request(f"{_INVALID}: encoded start key empty (version meta.k8s.io/v1)")
    key = start if start.startswith("/") else "/" + start
    if posixpath.normpath(key) != key:  # path.Clean: no climbing out of the key prefix
        raise ApiError.bad_request(f"{_INVALID}: {start}")
    return key[1:], revision


def _objects_at(
    emulator: Cluster, rt: ResourceType, scope: str | None, revision: int
) -> list[JSON]:
    """The objects as they were at ``revision`` (the current ones, with later events undone).

    Stored objects are returned uncopied (read only): the caller presents those it serves.
    """
    store = emulator.store
    found = {
        (obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj
        for obj in store.stored(rt, scope)
    }
    for event in reversed(store.history):
        if event.rv <= revision:
            break
        if event.storage_key != rt.storage_key or (scope is not None and event.namespace != scope):
            continue
        key = (event.namespace, event.name)
        if event.type == "ADDED":
            found.pop(key, None)
        else:
            before = event.obj if event.type == "DELETED" else event.prev
            if before is not None:
                found[key] = json.loads(json.dumps(before))
    return list(found.values())


def _page(
    emulator: Cluster, rt: ResourceType, scope: str | None, request: Request,
    selection: Selection,
) -> JSON:
    query = request.query
    store = emulator.store
    emulator.compactor.advance(store, store.revision)
    revision, limit, start = store.revision, _limit(query), ""
    token = query.get("continue", "")
    if token:
        start, revision = _continued(store, query, token)
    elif query.get("resourceVersion", ""):
        revision, limit = _read_revision(store, query, limit)
    objects = (
        _objects_at(emulator, rt, scope, revision) if revision != store.revision
        else store.stored(rt, scope)
    )
    keyed = sorted(((_key(rt, obj, scope), obj) for obj in objects), key=lambda pair: pair[0])
    keyed = [(key, obj) for key, obj in keyed if key >= start]
    meta: JSON = {"resourceVersion": str(revision)}
    items = _take_page(keyed, limit, selection, meta, revision)
    return {"metadata": meta, "items": [store.present(rt, obj) for obj in items]}


def _read_revision(store: Store, query: dict[str, str], limit: int) -> tuple[int, int]:
    """(revision, limit) of a list that names a ``resourceVersion`` and no continue token."""
    revision = store.revision
    wanted = _parse_rv(query["resourceVersion"])
    if _from_cache(query, limit):
        if wanted > revision:
            raise ApiError.too_large_resource_version(wanted, revision, 1)
        return revision, 0  # the watch cache serves the whole list, at its latest revision
    if wanted > revision:  # etcd, at once: validateMinimumResourceVersion
        raise ApiError.too_large_resource_version(wanted, revision, 0)
    match = query.get("resourceVersionMatch")
    if match == "Exact" or not match:  # Exact, or the legacy exact read of a paginated list
        if wanted < store.compacted:
            raise ApiError.expired(_TOO_OLD)
        revision = wanted
    return revision, limit


def _continued(store: Store, query: dict[str, str], token: str) -> tuple[str, int]:
    """(start key, revision) of a list continued from ``token``; 410 once it is compacted."""
    start, token_rv = _decode_continue(token)
    if query.get("resourceVersion", "") not in ("", "0"):
        raise ApiError.bad_request("specifying resource version is not allowed when using continue")
    if token_rv <= 0:
        return start, store.revision
    if token_rv <= store.compacted:
        error = ApiError.expired(_INCONSISTENT)
        assert isinstance(error.body, dict)
        error.body["metadata"] = {"continue": _encode_continue(-1, start)}
        raise error
    return start, token_rv


def _take_page(
    keyed: list[tuple[str, JSON]], limit: int, selection: Selection, meta: JSON, revision: int
) -> list[JSON]:
    """The selected objects of one page of ``keyed``; a cut page's continue token into meta."""
    items: list[JSON] = []
    last_key = ""
    for index, (key, obj) in enumerate(keyed):
        if limit > 0 and len(items) >= limit:
            # The next page starts right after the last key looked at (matching or not).
            meta["continue"] = _encode_continue(revision, last_key + "\x00")
            if selection.empty:
                meta["remainingItemCount"] = len(keyed) - index
            break
        last_key = key
        if selection.matches(obj):
            items.append(obj)
    return items


def list_objects(
    emulator: Cluster, rt: ResourceType, namespace: str, request: Request
) -> JSON:
    """A ``<Kind>List`` of the objects the request selects, one page if ``limit`` is set."""
    selection = Selection.from_query(request.query, _is_event(rt))
    page = _page(emulator, rt, namespace or None, request, selection)
    items = page["items"]
    if not rt.custom:
        for item in items:
            item.pop("kind", None)
            item.pop("apiVersion", None)
    return {
        "kind": rt.list_kind,
        "apiVersion": rt.api_version,
        "metadata": page["metadata"],
        "items": items,
    }


def start_watch(
    emulator: Cluster, rt: ResourceType, namespace: str, request: Request,
    *, force_expired: bool,
) -> Response:
    """Open a watch: replay from ``resourceVersion`` (or list as ADDED), then follow."""
    selection = Selection.from_query(request.query, _is_event(rt))
    scope = namespace or None
    timeout = float(request.query.get("timeoutSeconds") or 1800)
    store = emulator.store
    emulator.compactor.advance(store, store.revision)
    stream = WatchStream(
        rt, scope, selection.name, request.token,
        bookmarks=request.query.get("allowWatchBookmarks", "") in ("1", "true"),
        timeout=timeout,
        bookmark_interval=emulator.bookmark_interval,
        current_revision=lambda: store.revision,
        selection=selection,
    )
    try:
        _fill(emulator, stream, rt, scope, request, force_expired=force_expired)
    except BaseException:
        stream.close()  # refused (a bad or expired resourceVersion): never served
        raise
    emulator.watches.append(stream)
    return Response(200, [("Content-Type", "application/json")], stream=stream)


def _fill(
    emulator: Cluster, stream: WatchStream, rt: ResourceType, scope: str | None,
    request: Request, *, force_expired: bool,
) -> None:
    """The events a new watch starts with, from what its request asks (or ApiError)."""
    store = emulator.store
    rv_text = request.query.get("resourceVersion", "")
    stream.last_rv = rv_text or stream.last_rv
    initial = request.query.get("sendInitialEvents")
    if initial is not None:
        # The watch-list (sendInitialEvents): the current state, then (with bookmarks
        # allowed: cacher.isListWatchRequest) a BOOKMARK marking its end; or no state at all.
        if initial in ("1", "true", "True"):
            for obj in store.items(rt, scope):
                stream.offer("ADDED", obj)
            if stream.bookmarks:
                stream.initial_events_end()
    elif rv_text in ("", "0"):
        for obj in store.items(rt, scope):
            stream.offer("ADDED", obj)
    else:
        _replay(emulator, stream, rv_text, force_expired=force_expired)


def _replay(
    emulator: Cluster, stream: WatchStream, rv_text: str, *, force_expired: bool
) -> None:
    """A watch from a resourceVersion: the events after it, or expired once compacted."""
    store = emulator.store
    try:
        rv = int(rv_text)
    except ValueError:
        raise ApiError.bad_request(
            f'resourceVersion: Invalid value: "{rv_text}": must be a valid resource version'
        ) from None
    if rv < store.compacted or force_expired:
        message = f"too old resource version: {rv} ({max(store.compacted, rv + 1)})"
        if emulator.watch_expired_status:
            raise ApiError.expired(message)
        stream.expire(message)
        return
    for event in store.history:
        if event.rv > rv and stream.matches(event.storage_key, event.namespace, event.name):
            stream.offer(event.type, json.loads(json.dumps(event.obj)), event.prev)
    # cacheWatcher.process: only events newer than the version asked for, which may
    # not have been reached yet.
    stream.after = rv

