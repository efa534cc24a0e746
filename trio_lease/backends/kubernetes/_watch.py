"""Watch-based waiting: wake contenders as soon as their lease changes.

``watch_lease`` yields the current record (a LIST of the one object, whose resourceVersion is
the store's current one), then opens
``GET …/leases?watch=1&fieldSelector=metadata.name=<name>&resourceVersion=<rv>
&allowWatchBookmarks=true&timeoutSeconds=300`` and yields the record after every ADDED or
MODIFIED event and ``None`` after DELETED. BOOKMARKs only advance the resume point. When the
server ends the stream (timeoutSeconds, or its own 30-60 min limit) the watch resumes from the
last version seen; a 410 Expired (at the start or as an in-stream ERROR) re-lists and watches
again from the new version.

A watch that is forbidden (403: the Role lacks ``watch`` or ``list``) falls back to polling with
a GET every ``watch_poll_interval`` seconds. A failing watch (a cut stream, a 410) re-lists and
watches again at once; if that fails too, it waits ``watch_poll_interval`` between tries. A 401
that survives the credential refresh is raised. A dead holder emits no event: expiry is still
judged by the core's local countdown, never here.

Close the iterator when done (``async with contextlib.aclosing(backend.watch(name))``): it holds
an open HTTP stream between items.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING

import anyio
import httpx

from ..._abc import LeaseRecord
from ..._exceptions import BackendAuthError, BackendUnavailable, LeaseConfigError
from ._errors import error_for, error_from, map_transport_error, parse_status
from ._models import JsonObject

if TYPE_CHECKING:
    from ._backend import KubernetesBackend

__all__ = ["watch_lease"]

WATCH_TIMEOUT_SECONDS = 300


class _Resync(Exception):
    """The watch cannot continue from its resume point: GET and start again."""


class _Forbidden(Exception):
    """The Role does not allow watch (or list): poll instead."""


class _Cursor:
    """The resume point: the last resourceVersion seen (events and bookmarks)."""

    def __init__(self, version: str | None) -> None:
        self.version = version
        self.events = 0


async def watch_lease(
    backend: KubernetesBackend, key: str
) -> AsyncGenerator[LeaseRecord | None]:
    """Yield the current record of ``key``, then each change (see the module docstring)."""
    object_name = backend.object_name(key)
    use_watch = backend.watch_enabled
    failures = 0  # consecutive watch failures: the first resyncs at once, later ones wait
    while True:
        version: str | None = None
        try:
            if use_watch:
                obj, version = await _list(backend, object_name)
            else:
                obj = await backend.get_object(object_name)
        except _Forbidden:
            use_watch = False  # the Role lacks list (so watch is useless): poll from now on
            continue
        except BackendUnavailable:
            await anyio.sleep(backend.watch_poll_interval)
            continue
        if obj is None:
            backend._objects.pop(object_name, None)
            yield None
        else:
            yield backend._record(key, obj)
        cursor = _Cursor(version)
        if not use_watch:
            await anyio.sleep(backend.watch_poll_interval)
            continue
        quiet = False  # the watch ended or failed without delivering a single event
        try:
            while True:  # resume from the last version after each clean end of the stream
                started, cursor.events = anyio.current_time(), 0
                async with aclosing(_stream(backend, key, object_name, cursor)) as events:
                    async for item in events:
                        yield item
                if cursor.events:
                    failures = 0
                elif anyio.current_time() - started < 1.0:
                    quiet = True  # ended at once without a word
                    break
        except _Resync:
            quiet = cursor.events == 0  # a 410 right after a fresh read is not normal
        except _Forbidden:
            use_watch = False  # the Role lacks watch/list: poll from now on
        except BackendUnavailable:
            quiet = True
        if quiet or cursor.events == 0:
            failures += 1
        else:
            failures = 0
        if use_watch and failures <= 1:
            continue  # a cut or an expired stream: re-read and watch again at once
        await anyio.sleep(backend.watch_poll_interval)


async def _list(backend: KubernetesBackend, object_name: str) -> tuple[JsonObject | None, str]:
    """LIST the one object by field selector: the object (or None) and the list's version.

    The list's resourceVersion is the store's current one, so a watch from it is never "too
    old" right away; an object's own resourceVersion can be (compaction runs every few minutes
    and an idle lease keeps its old version).
    """
    ctx = backend._ctx("list", object_name)
    response = await backend.request(
        "GET",
        backend.kind.collection_path(backend.namespace),
        ctx,
        params={"fieldSelector": f"metadata.name={object_name}"},
    )
    if response.status_code == 403:
        raise _Forbidden
    if response.status_code != 200:
        raise error_from(response, ctx)
    body = backend._json(response, ctx)
    items = [item for item in body.get("items") or [] if isinstance(item, dict)]
    version = (body.get("metadata") or {}).get("resourceVersion")
    return (items[0] if items else None), (version if isinstance(version, str) else "")


async def _stream(
    backend: KubernetesBackend, key: str, object_name: str, cursor: _Cursor
) -> AsyncGenerator[LeaseRecord | None]:
    """One watch request: yields the state after each ADDED/MODIFIED/DELETED event."""
    ctx = backend._ctx("watch", object_name)
    params = {
        "watch": "1",
        "fieldSelector": f"metadata.name={object_name}",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS),
    }
    if cursor.version:
        params["resourceVersion"] = cursor.version
    client = backend._client()
    request = client.build_request(
        "GET",
        backend.kind.collection_path(backend.namespace),
        params=params,
        timeout=httpx.Timeout(30.0, read=WATCH_TIMEOUT_SECONDS + 30.0),
        extensions=(
            {"sni_hostname": backend.config.tls_server_name}
            if backend.config.tls_server_name
            else {}
        ),
    )
    try:
        with anyio.fail_after(backend._request_timeout or 5.0):
            response = await client.send(request, stream=True)
    except (httpx.HTTPError, TimeoutError, OSError) as exc:
        raise map_transport_error(exc, ctx) from None
    try:
        if response.status_code == 410:
            raise _Resync
        if response.status_code != 200:
            await response.aread()
            status = parse_status(response)
            if status.code == 403:
                raise _Forbidden
            error = error_for(status, ctx)
            if isinstance(error, LeaseConfigError | BackendAuthError):
                raise error
            raise BackendUnavailable(f"watch of {ctx.target} failed with {status.code}")
        try:
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                    kind, obj = event["type"], event["object"]
                except (ValueError, KeyError, TypeError):
                    raise BackendUnavailable(f"watch of {ctx.target} sent a bad event") from None
                cursor.events += 1
                if not isinstance(obj, dict):
                    continue
                metadata = obj.get("metadata") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Resync
                    raise BackendUnavailable(f"watch of {ctx.target} ended with an error event")
                cursor.version = metadata.get("resourceVersion") or cursor.version
                if kind == "BOOKMARK" or metadata.get("name", object_name) != object_name:
                    continue
                if kind == "DELETED":
                    backend._objects.pop(object_name, None)
                    yield None
                elif kind in ("ADDED", "MODIFIED"):
                    yield backend._record(key, obj)
        except httpx.HTTPError as exc:
            raise map_transport_error(exc, ctx) from None
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            await response.aclose()
