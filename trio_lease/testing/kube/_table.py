"""Server-side printing: a ``meta.k8s.io`` Table for ``kubectl get``.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io,
application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json``; the server picks the
first media type it can produce (``apiserver/pkg/endpoints/handlers/negotiation``) and answers a
get or a list with a Table (``apiserver/pkg/endpoints/handlers/response.go`` ``asTable``):

- coordination Leases: NAME, HOLDER, AGE (``pkg/printers/internalversion/printers.go``
  ``printLease``: the holder is ``spec.holderIdentity`` or empty);
- custom resources: NAME, then the served version's ``additionalPrinterColumns``, or AGE when
  it has none (``apiextensions-apiserver/pkg/registry/customresource/tableconvertor`` and
  ``apihelpers.GetColumnsForVersion``); only simple dotted JSONPaths are evaluated here;
- events.k8s.io Events: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE, and with ``-o wide``
  SUBOBJECT, SOURCE, FIRST SEEN, COUNT, NAME (``printEvent``; :mod:`._events`);
- other types: the default NAME, CREATED AT (``apiserver/pkg/registry/rest/table.go``); the real
  server has richer printers for namespaces and RBAC objects, which are not emulated.

Each row carries ``object`` as ``includeObject`` asks: ``Metadata`` (the default) a
``PartialObjectMetadata``, ``Object`` the whole object, ``None`` nothing; any other value is 400.
Ages are ``duration.HumanDuration`` (``apimachinery/pkg/util/duration/duration.go``) from the
emulator's wall clock. A watch asked for as a Table (``kubectl get -w``) sends each object as a
one-row Table, with the column definitions in the first event only (``handlers/watch.go``,
``watchEmbeddedEncoder``); ERROR and BOOKMARK events are sent as they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ._cluster import Cluster
from ._events import EVENT_COLUMNS, event_row, from_core_event
from ._http import Request
from ._resources import ResourceType
from ._status import JSON, ApiError

__all__ = ["as_table", "human_duration", "table_events", "table_version"]


_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_CREATED_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
_HOLDER_DOC = (
    "holderIdentity contains the identity of the holder of a current lease. If Coordinated "
    "Leader Election is used, the holder identity must be equal to the elected "
    "LeaseCandidate.metadata.name field."
)


def table_version(request: Request) -> str | None:
    """``v1``/``v1beta1`` when the Accept header's first producible type is a Table, else None."""
    for media in request.headers.get("accept", "").split(","):
        kind, *params = (p.strip() for p in media.split(";"))
        options = dict(p.partition("=")[::2] for p in params)
        if kind not in ("application/json", "application/*", "*/*"):
            continue
        if options.get("as") != "Table":
            if "as" not in options:
                return None
            continue
        if options.get("g") == "meta.k8s.io" and options.get("v") in ("v1", "v1beta1"):
            return options["v"]
    return None


def human_duration(seconds: float) -> str:
    """``duration.HumanDuration``: ``45s``, ``3m12s``, ``5h10m``, ``3d4h``, ``2y10d``."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _column(name: str, kind: str, description: str, fmt: str = "", priority: int = 0) -> JSON:
    return {
        "name": name, "type": kind, "format": fmt, "description": description,
        "priority": priority,
    }


def _age(obj: JSON, now: datetime) -> str:
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    when = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    return human_duration((now - when).total_seconds())


def _lookup(obj: JSON, path: str) -> Any:
    """A simple JSONPath (``.spec.owner``); None where it does not resolve."""
    value: Any = obj
    for key in filter(None, path.strip().lstrip("{").rstrip("}").split(".")):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _cell(kind: str, value: Any, now: datetime) -> Any:
    """``cellForJSONValue`` of the CRD table convertor (strings print the value's text)."""
    convert = _CELLS.get(kind)
    if value is None or convert is None:
        return None
    return convert(value, now)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _string_cell(value: Any, now: datetime) -> Any:
    return value if isinstance(value, str) else _text(value)


def _integer_cell(value: Any, now: datetime) -> Any:
    return int(value) if _is_number(value) else None


def _number_cell(value: Any, now: datetime) -> Any:
    return float(value) if _is_number(value) else None


def _boolean_cell(value: Any, now: datetime) -> Any:
    return value if isinstance(value, bool) else None


def _date_cell(value: Any, now: datetime) -> Any:
    if not isinstance(value, str):
        return None
    try:
        return _age({"metadata": {"creationTimestamp": value}}, now)
    except ValueError:
        return "<invalid>"


#: A printer column's cell by its type; another type's cells are empty.
_CELLS: dict[str, Callable[[Any, datetime], Any]] = {
    "string": _string_cell, "integer": _integer_cell, "number": _number_cell,
    "boolean": _boolean_cell, "date": _date_cell,
}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _printer_columns(emulator: Cluster, rt: ResourceType) -> list[JSON]:
    """The served version's ``additionalPrinterColumns`` (AGE when there are none)."""
    crd_type = emulator.types.get(("apiextensions.k8s.io", "v1", "customresourcedefinitions"))
    crd = None
    if crd_type is not None:
        crd = emulator.store.find(crd_type, "", f"{rt.plural}.{rt.group}")
    for version in ((crd or {}).get("spec") or {}).get("versions") or []:
        if version.get("name") == rt.version and version.get("additionalPrinterColumns"):
            return list(version["additionalPrinterColumns"])
    return [{
        "name": "Age", "type": "date", "description": _CREATED_DOC,
        "jsonPath": ".metadata.creationTimestamp",
    }]


def _convertor(emulator: Cluster, rt: ResourceType, now: datetime) -> tuple[list[JSON], Any]:
    name = _column("Name", "string", _NAME_DOC, "name")
    if rt.lease:
        columns = [name, _column("Holder", "string", _HOLDER_DOC), _column("Age", "string",
                                                                          _CREATED_DOC)]

        def lease_row(obj: JSON) -> list[Any]:
            holder = (obj.get("spec") or {}).get("holderIdentity") or ""
            return [obj["metadata"]["name"], holder, _age(obj, now)]

        return columns, lease_row
    if rt.custom:
        printer = _printer_columns(emulator, rt)
        columns = [name] + [
            _column(
                c["name"], c.get("type", "string"),
                c.get("description")
                or f"Custom resource definition column (in JSONPath format): {c['jsonPath']}",
                c.get("format", ""), int(c.get("priority", 0)),
            )
            for c in printer
        ]

        def custom_row(obj: JSON) -> list[Any]:
            return [obj["metadata"]["name"]] + [
                _cell(c.get("type", "string"), _lookup(obj, c["jsonPath"]), now) for c in printer
            ]

        return columns, custom_row
    if rt.group == "events.k8s.io" or rt.legacy_event:
        since = lambda when: _age({"metadata": {"creationTimestamp": when}}, now)  # noqa: E731
        view = from_core_event if rt.legacy_event else (lambda obj: obj)
        return list(EVENT_COLUMNS), lambda obj: event_row(view(obj), since)
    columns = [name, _column("Created At", "date", _CREATED_DOC)]

    def default_row(obj: JSON) -> list[Any]:
        return [obj["metadata"]["name"], (obj.get("metadata") or {}).get("creationTimestamp")]

    return columns, default_row


def _include(request: Request) -> str:
    include = request.query.get("includeObject", "") or "Metadata"
    if include not in ("Metadata", "Object", "None"):
        raise ApiError.bad_request(f'unrecognized includeObject value: "{include}"')
    return include


def as_table(
    emulator: Cluster, rt: ResourceType, body: JSON, request: Request, version: str
) -> JSON:
    """``body`` (one object or a ``<Kind>List``) as a Table of ``meta.k8s.io/<version>``."""
    include = _include(request)
    now = datetime.fromisoformat(emulator.store.timestamp().replace("Z", "+00:00"))
    columns, row_of = _convertor(emulator, rt, now)
    listed = "items" in body and body.get("kind", "").endswith("List")
    objects = list(body["items"]) if listed else [body]
    rows = []
    for obj in objects:
        row: JSON = {"cells": row_of(obj)}
        if include == "Object":
            row["object"] = {"kind": rt.kind, "apiVersion": rt.api_version, **obj}
        elif include == "Metadata":
            row["object"] = {
                "kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{version}",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    meta = body.get("metadata") or {}
    table_meta = {k: meta[k] for k in ("resourceVersion", "continue") if meta.get(k)}
    if listed and "remainingItemCount" in meta:
        table_meta["remainingItemCount"] = meta["remainingItemCount"]
    if request.query.get("noHeaders") not in ("1", "true"):
        return {
            "kind": "Table", "apiVersion": f"meta.k8s.io/{version}", "metadata": table_meta,
            "columnDefinitions": columns, "rows": rows,
        }
    return {
        "kind": "Table", "apiVersion": f"meta.k8s.io/{version}", "metadata": table_meta,
        "columnDefinitions": None, "rows": rows,
    }


def table_events(
    emulator: Cluster, rt: ResourceType, request: Request, version: str
) -> Callable[[JSON], JSON]:
    """A watch event's object as a one-row Table; headers only in the first such event."""
    _include(request)  # 400 for a bad includeObject before the watch starts
    first = [True]

    def present(event: JSON) -> JSON:
        if event.get("type") in ("ERROR", "BOOKMARK"):
            return event
        table = as_table(emulator, rt, event["object"], request, version)
        if not first[0]:
            table["columnDefinitions"] = None
        first[0] = False
        return {"type": event["type"], "object": table}

    return present
