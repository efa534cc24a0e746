"""List and watch: the collection reads (``GET .../leases`` with or without ``watch=1``)."""

from __future__ import annotations

import json
from typing import Any

from ._cluster import Cluster
from ._http import Request, Response
from ._resources import ResourceType
from ._status import ApiError
from ._watch import WatchStream

__all__ = ["list_objects", "start_watch"]

JSON = dict[str, Any]


def _field_selector(request: Request, namespace: str) -> tuple[str | None, str | None]:
    """``metadata.name`` / ``metadata.namespace`` from ``fieldSelector``; 400 for others."""
    name: str | None = None
    scope: str | None = namespace or None
    selector = request.query.get("fieldSelector", "")
    for term in filter(None, selector.split(",")):
        key, _, value = term.replace("==", "=").partition("=")
        if key == "metadata.name":
            name = value
        elif key == "metadata.namespace":
            scope = value
        else:
            raise ApiError.bad_request(
                f'"{key}" is not a known field selector: only "metadata.name", '
                '"metadata.namespace"'
            )
    return name, scope


def list_objects(
    emulator: Cluster, rt: ResourceType, namespace: str, request: Request
) -> JSON:
    """A ``<Kind>List`` of the objects the request selects, at the latest revision."""
    name, scope = _field_selector(request, namespace)
    items = [
        item for item in emulator.store.items(rt, scope if rt.namespaced else "")
        if name is None or item["metadata"]["name"] == name
    ]
    if not rt.custom:
        for item in items:
            item.pop("kind", None)
            item.pop("apiVersion", None)
    return {
        "kind": rt.list_kind,
        "apiVersion": rt.api_version,
        "metadata": {"resourceVersion": emulator.resource_version},
        "items": items,
    }


def start_watch(
    emulator: Cluster, rt: ResourceType, namespace: str, request: Request,
    *, force_expired: bool,
) -> Response:
    """Open a watch: replay from ``resourceVersion`` (or list as ADDED), then follow."""
    name, scope = _field_selector(request, namespace)
    timeout = float(request.query.get("timeoutSeconds") or 1800)
    store = emulator.store
    stream = WatchStream(
        rt, scope, name, request.token,
        bookmarks=request.query.get("allowWatchBookmarks", "") in ("1", "true"),
        timeout=timeout,
        bookmark_interval=emulator.bookmark_interval,
        current_revision=lambda: store.revision,
    )
    rv_text = request.query.get("resourceVersion", "")
    stream.last_rv = rv_text or stream.last_rv
    if rv_text in ("", "0"):
        for obj in emulator.store.items(rt, scope if rt.namespaced else ""):
            if name is None or obj["metadata"]["name"] == name:
                stream.offer("ADDED", obj)
    else:
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
        else:
            for event in store.history:
                if event.rv > rv and stream.matches(event.storage_key, event.namespace, event.name):
                    stream.offer(event.type, json.loads(json.dumps(event.obj)))
    emulator.watches.append(stream)
    return Response(200, [("Content-Type", "application/json")], stream=stream)
