"""The request handler shared by the in-process transport and the network server.

Routing follows the apiserver's URL layout: ``/api/v1/...`` for the core group,
``/apis/{group}/{version}/...`` otherwise, ``namespaces/{ns}/{plural}[/{name}]`` for
namespaced objects and ``{plural}[/{name}]`` for cluster-scoped objects or lists across all
namespaces. An unknown group, version or resource is a 404: ``text/plain`` ``404 page not
found`` for a group no CRD serves (what a client sees before a CRD is applied and established),
a Status under a built-in group (:func:`._discovery.not_served`). ``?timeout=`` (a Go duration
such as ``5s``; default and maximum 60 s, the server's request timeout) bounds every
non-watch request and ends in 504 ``Timeout``; the emulator cancels the request's work at that
moment, so a write delayed past it does not commit (use
``faults.fail(504, after_commit=True)`` for "committed, but the client saw 504"). Each request
is recorded in ``emulator.requests`` and logged at DEBUG (method, path and status only).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import Any
from urllib.parse import unquote

import anyio

from ._body import decode_body
from ._cluster import Cluster
from ._collection import list_objects, start_watch, validate_list_options, wait_until_fresh
from ._discovery import discovery, not_served
from ._faults import Fault
from ._gc import collect_garbage, delete
from ._health import HEALTH_PATHS, health
from ._http import MAX_REQUEST_BODY, DropReply, RecordedRequest, Request, Response
from ._impersonation import impersonate
from ._managed import field_manager
from ._openapi import openapi_v2, openapi_v3
from ._options import check_options, dry_run_values
from ._patch import patch
from ._rbac import User, forbidden_reason, is_allowed
from ._resources import ResourceType
from ._reviews import answer_review, is_review_path
from ._selectors import exact_name
from ._status import JSON, ApiError, status_body
from ._store import MODIFIED_MSG
from ._table import as_table, table_events, table_version
from ._validation import check_type_meta

__all__ = ["handle", "parse_duration"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 60.0
_WRITES = ("create", "update", "patch", "delete")
_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """A Go duration (``5s``, ``1m30s``, ``250ms``) in seconds; 400 if malformed."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ApiError.bad_request(f'time: invalid duration "{text}"')
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _json(code: int, body: JSON | str, headers: list[tuple[str, str]] | None = None) -> Response:
    extra = list(headers or [])
    if isinstance(body, str):
        if not any(k.lower() == "content-type" for k, _ in extra):
            extra.append(("Content-Type", "text/plain; charset=utf-8"))
        return Response(code, extra, body.encode())
    data = json.dumps(body, separators=(",", ":")).encode()
    return Response(code, [("Content-Type", "application/json"), *extra], data)


async def handle(emulator: Cluster, request: Request) -> Response:
    """Answer ``request``; :class:`DropReply` means "close the connection instead"."""
    response: Response | None = None
    try:
        try:
            response = await _handle(emulator, request)
        except ApiError as error:
            response = _json(error.code, error.body, error.headers)
        return response
    finally:
        headers = {k: v for k, v in request.headers.items() if k != "authorization"}
        status = 0 if response is None else response.status
        emulator.requests.append(
            RecordedRequest(request.method, request.path, dict(request.query), headers, status)
        )
        # As an HTTP client logs its requests (never a header: they carry the credentials).
        logger.debug("emulator: %s %s -> %d", request.method, request.path, status)


@dataclasses.dataclass
class _Target:
    rt: ResourceType
    namespace: str
    name: str
    verb: str
    #: The name RBAC sees: the URL's, or a list/watch's ``metadata.name=`` field selector.
    rbac_name: str = ""


#: The verb of a request to a resource: (method, names one object?) → verb; ``GET`` of a
#: collection is ``watch`` with ``?watch=1`` or ``?watch=true``.
_VERBS = {
    ("GET", True): "get", ("GET", False): "list", ("POST", False): "create",
    ("PUT", True): "update", ("PATCH", True): "patch", ("DELETE", True): "delete",
}


def _api_path(parts: list[str]) -> tuple[str, str, str, list[str]] | None:
    """(group, version, namespace, the rest) of an API URL's segments; None for another."""
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if len(rest) >= 3 and rest[0] == "namespaces":
        return group, version, rest[1], rest[2:]
    return group, version, "", rest


def _resource_path(emulator: Cluster, parts: list[str]) -> tuple[ResourceType, str, str]:
    """(type, namespace, name) a resource URL's segments name; 404 where none is served."""
    path = _api_path(parts)
    if path is None or not path[3] or len(path[3]) > 2:
        raise not_served(emulator, parts)
    group, version, namespace, rest = path
    rt = emulator.types.get((group, version, rest[0]))
    name = rest[1] if len(rest) == 2 else ""
    if rt is None or not _scoped_right(rt, namespace, name):
        raise not_served(emulator, parts)
    return rt, namespace, name


def _scoped_right(rt: ResourceType, namespace: str, name: str) -> bool:
    """A cluster-scoped type is served without a namespace; one object of a namespaced with."""
    if rt.namespaced:
        return bool(namespace) or not name
    return not namespace


def _route(emulator: Cluster, request: Request) -> _Target:
    parts = [unquote(p) for p in request.path.strip("/").split("/") if p]
    rt, namespace, name = _resource_path(emulator, parts)
    verb = _VERBS.get((request.method, bool(name)))
    if verb == "list" and request.query.get("watch", "") in ("1", "true"):
        verb = "watch"
    if verb is None or (rt.verbs and verb not in rt.verbs):
        raise ApiError.method_not_allowed(request.method)
    if verb in ("list", "watch"):
        selected = exact_name(request.query.get("fieldSelector", ""))
        return _Target(rt, namespace, name, verb, selected)
    return _Target(rt, namespace, name, verb, name)


async def _handle(emulator: Cluster, request: Request) -> Response:
    await emulator.faults.wait_partition(request.token)
    emulator.settle_crds()
    answered = _outside_resources(emulator, request)
    if answered is not None:
        return answered
    target = _route(emulator, request)
    user = _user(emulator, request)
    if target.verb == "watch":
        return _watch(emulator, request, target, user)
    with anyio.move_on_after(_budget(request)) as scope:
        return await _answer(emulator, request, target, user)
    assert scope.cancelled_caught
    raise ApiError.timeout()


def _budget(request: Request) -> float:
    """How long a non-watch request may take: ``?timeout=``, at most the server's 60 s."""
    if "timeout" in request.query:
        return min(parse_duration(request.query["timeout"]), DEFAULT_TIMEOUT)
    return DEFAULT_TIMEOUT


def _watch(emulator: Cluster, request: Request, target: _Target, user: User) -> Response:
    """A watch's stream, after its injected faults (a 410 one expires the stream instead)."""
    rt, name = target.rt, target.name
    forced = emulator.faults.take("error", False, request.token, target.verb, name)
    if forced and forced[0].status != 410:
        raise _injected(forced[0], rt, name)
    _authorize(emulator, user, target)
    validate_list_options(request.query, watch=True)
    table = table_version(request)
    present = None if table is None else table_events(emulator, rt, request, table)
    watch = start_watch(emulator, rt, target.namespace, request, force_expired=bool(forced))
    if watch.stream is not None:
        watch.stream.present = present
    return watch


async def _answer(emulator: Cluster, request: Request, target: _Target, user: User) -> Response:
    """A non-watch request's reply, with the faults injected before and after the operation."""
    token, rt, name, verb = request.token, target.rt, target.name, target.verb
    await emulator.faults.wait_pause()
    _check_faults_before(emulator, token, verb, name, rt)
    _authorize(emulator, user, target)
    for fault in emulator.faults.take("delay", False, token, verb, name):
        await anyio.sleep(fault.seconds)
    if verb == "list":
        await wait_until_fresh(emulator, request)
    code, body = _operate_with_options(emulator, target, request)
    table = table_version(request) if verb in ("get", "list") else None
    if table is not None:
        body = as_table(emulator, rt, body, request, table)
    warnings = [("Warning", _warning(w)) for w in emulator.store.warnings]
    for fault in emulator.faults.take("delay", True, token, verb, name):
        await anyio.sleep(fault.seconds)
    for fault in emulator.faults.take("error", True, token, verb, name):
        raise _injected(fault, rt, name)
    if emulator.faults.take("drop", True, token, verb, name):
        raise DropReply
    return _json(code, body, warnings)


def _operate_with_options(
    emulator: Cluster, target: _Target, request: Request
) -> tuple[int, JSON]:
    """:func:`_operate` with the request's write options set on the store for its length."""
    store = emulator.store
    store.warnings = []
    store.field_validation = request.query.get("fieldValidation") or "Warn"
    store.manager = _manager(request)
    store.dry_run = _read_options(target.verb, request)
    try:
        return _operate(emulator, target, request)
    finally:
        store.field_validation = "Warn"
        store.duplicates = []
        store.manager = ""
        store.dry_run = False


def _outside_resources(emulator: Cluster, request: Request) -> Response | None:
    """Health, discovery, OpenAPI and the reviews; None for a resource path."""
    parts = [p for p in request.path.strip("/").split("/") if p]
    if request.method == "GET" and parts[:1] and parts[0] in HEALTH_PATHS:
        if request.token is not None:  # anonymous may read them; a token must still be good
            _user(emulator, request)
        return health(parts, request)
    document = _document(emulator, parts) if request.method == "GET" else None
    if document is not None:
        _user(emulator, request)
        return _json(200, document)
    if is_review_path(parts):
        user = _user(emulator, request)
        content_type = request.headers.get("content-type", "")
        review = answer_review(
            user, request.method, parts, content_type, request.body, emulator.rbac_objects
        )
        return _json(201, review)
    return None


def _document(emulator: Cluster, parts: list[str]) -> JSON | None:
    """The discovery or OpenAPI document a GET of ``parts`` reads; None for any other path."""
    document = discovery(emulator, parts)
    if document is None and parts[:2] == ["openapi", "v3"]:
        document = openapi_v3(emulator, parts)
    if document is None and parts == ["openapi", "v2"]:
        document = openapi_v2(emulator)
    return document


def _read_options(verb: str, request: Request) -> bool:
    """A write's body limit and options, as its handler reads them; True for a dry run."""
    if verb in _WRITES and len(request.body) > MAX_REQUEST_BODY:
        raise ApiError.entity_too_large(MAX_REQUEST_BODY)  # rest.go limitedReadBody
    if verb == "patch":  # checked with the patch's own options (ValidatePatchOptions)
        return bool(dry_run_values(verb, request))
    return check_options(verb, request)


def _user(emulator: Cluster, request: Request) -> User:
    """Authentication, then the impersonation filter: the user the request acts as."""
    requestor = emulator.authenticate(request.token, anyio.current_time())
    return impersonate(requestor, request, emulator.rbac_objects)


def _manager(request: Request) -> str:
    query_manager = request.query.get("fieldManager", "")
    return field_manager(query_manager, request.headers.get("user-agent", ""))


def _warning(text: str) -> str:
    """A ``Warning`` header value as the apiserver writes it (RFC 7234, quotes escaped)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'


def _check_faults_before(
    emulator: Cluster, token: str | None, verb: str, name: str, rt: ResourceType
) -> None:
    for fault in emulator.faults.take("error", False, token, verb, name):
        raise _injected(fault, rt, name)


def _injected(fault: Fault, rt: ResourceType, name: str) -> ApiError:
    status, retry_after = fault.status, fault.retry_after
    if fault.html:
        page = f"<html><head><title>{status}</title></head><body><h1>{status}</h1></body></html>\n"
        return ApiError(status, page, [("Content-Type", "text/html")])
    if status == 409:
        return ApiError.conflict(rt.plural, rt.group, name, MODIFIED_MSG)
    if status == 429:
        if fault.status_shaped:
            return ApiError.too_many_requests_status(retry_after)
        return ApiError.too_many_requests_text(retry_after)
    if status == 500:
        return ApiError.internal("injected fault: etcdserver: request timed out")
    if status == 410:
        return ApiError.expired("too old resource version")
    if status == 503:
        return ApiError.service_unavailable("the server is currently unable to handle the request")
    return ApiError.timeout()


def _authorize(emulator: Cluster, user: Any, target: _Target) -> None:
    rt = target.rt
    if not is_allowed(
        user, target.verb, rt.group, rt.plural, target.namespace, target.rbac_name,
        emulator.rbac_objects,
    ):
        reason = forbidden_reason(user, target.verb, rt.group, rt.plural, target.namespace)
        raise ApiError.forbidden(rt.plural, rt.group, target.rbac_name, reason)


def _check_kind(rt: ResourceType, body: JSON) -> None:
    check_type_meta(rt.kind, rt.group, rt.version, rt.custom, body)


def _check_namespace(emulator: Cluster, rt: ResourceType, namespace: str, body: JSON) -> None:
    given = (body.get("metadata") or {}).get("namespace")
    if rt.namespaced and given and given != namespace:
        raise ApiError.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if rt.namespaced and emulator.store.find(
        emulator.types[("", "v1", "namespaces")], "", namespace
    ) is None:
        raise ApiError.not_found("namespaces", "", namespace)


def _operate(emulator: Cluster, target: _Target, request: Request) -> tuple[int, JSON]:
    return _OPERATIONS[target.verb](emulator, target, request)


def _get(emulator: Cluster, target: _Target, request: Request) -> tuple[int, JSON]:
    return 200, emulator.store.get(target.rt, target.namespace, target.name)


def _list(emulator: Cluster, target: _Target, request: Request) -> tuple[int, JSON]:
    return 200, list_objects(emulator, target.rt, target.namespace, request)


def _create(emulator: Cluster, target: _Target, request: Request) -> tuple[int, JSON]:
    store, rt, namespace = emulator.store, target.rt, target.namespace
    body = decode_body(request, store)
    _check_kind(rt, body)
    _check_namespace(emulator, rt, namespace, body)
    meta = body.setdefault("metadata", {})
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = meta["generateName"] + format(store.revision * 7919 % 46656, "05x")
    obj = store.create(rt, namespace, body, refuse_version=True)
    _after_write(emulator, rt, obj, deleted=False)
    return 201, obj


def _update(emulator: Cluster, target: _Target, request: Request) -> tuple[int, JSON]:
    store, rt, namespace, name = emulator.store, target.rt, target.namespace, target.name
    body = decode_body(request, store)
    _check_kind(rt, body)
    body_name = (body.get("metadata") or {}).get("name", "")
    if body_name != name:
        raise ApiError.bad_request(
            f"the name of the object ({body_name}) does not match the name on the URL ({name})"
        )
    if store.find(rt, namespace, name) is None and rt.create_on_update:
        _check_namespace(emulator, rt, namespace, body)
    code, obj = store.update(rt, namespace, name, body)
    _after_write(emulator, rt, obj, deleted=False)
    collect_garbage(emulator)  # the update may have removed the last finalizer
    return code, obj


def _patch(emulator: Cluster, target: _Target, request: Request) -> tuple[int, JSON]:
    rt = target.rt
    code, obj = patch(emulator, rt, target.namespace, target.name, request, _manager(request))
    _after_write(emulator, rt, obj, deleted=False)
    collect_garbage(emulator)
    return code, obj


def _delete(emulator: Cluster, target: _Target, request: Request) -> tuple[int, JSON]:
    rt, namespace, name = target.rt, target.namespace, target.name
    options = decode_body(request) if request.body else {}
    if "propagationPolicy" in request.query and not request.body:
        options["propagationPolicy"] = request.query["propagationPolicy"]
    is_namespace = rt.plural == "namespaces" and not rt.group
    if is_namespace:
        obj = emulator.store.delete(rt, namespace, name, options)
    else:
        obj, gone = delete(emulator, rt, namespace, name, options)
        if not gone:  # finalizers keep it: the object, with its deletionTimestamp
            return 200, obj
    _after_write(emulator, rt, obj, deleted=True)
    if is_namespace:
        obj["status"] = {"phase": "Terminating"}
        return 200, obj
    details = {"name": name, "group": rt.group, "kind": rt.plural, "uid": obj["metadata"]["uid"]}
    return 200, status_body(200, "", "", {k: v for k, v in details.items() if v}, success=True)


_OPERATIONS = {
    "get": _get, "list": _list, "create": _create, "update": _update, "patch": _patch,
    "delete": _delete,
}


def _after_write(emulator: Cluster, rt: ResourceType, obj: JSON, *, deleted: bool) -> None:
    if emulator.store.dry_run:
        return
    if rt.plural == "customresourcedefinitions":
        emulator.crd_changed(obj, deleted)
    elif rt.plural == "namespaces" and not rt.group and deleted:
        emulator.namespace_deleted(obj["metadata"]["name"])
        collect_garbage(emulator)
