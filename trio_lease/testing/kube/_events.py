"""``events.k8s.io/v1`` Events: decoding and validation, following the Kubernetes sources.

- Decoding (``k8s.io/api/events/v1`` types): strings must be strings, ``deprecatedCount`` and
  ``series.count`` int32, ``eventTime`` and ``series.lastObservedTime`` MicroTimes
  (``YYYY-MM-DDTHH:MM:SS.ffffffZ``), ``regarding`` / ``related`` objects of strings; otherwise
  the decoder's 400 ("Event in version "v1" cannot be handled as a Event: ..."). Unknown
  top-level fields are dropped with a warning.
- Validation (``pkg/apis/core/validation/events.go``, ``ValidateEventCreate`` for a request
  in events.k8s.io/v1 and ``legacyValidateEvent``): ``eventTime`` is required, ``type`` must be
  ``Normal`` or ``Warning``, ``reportingController`` is required and a qualified name,
  ``reportingInstance``, ``action`` and ``reason`` are required and at most 128 characters, the
  note at most 1024; a ``regarding`` without a namespace is only allowed in ``default`` and
  ``kube-system``; the deprecated core fields must be unset; a ``series`` needs ``count`` >= 2
  and ``lastObservedTime``. The server validates the internal type, so its field paths name the
  core fields: ``involvedObject.namespace``, ``message``, ``count``, ``source``,
  ``firstTimestamp``, ``lastTimestamp``; we copy that.
- Printing (``kubectl get events``): the columns and cells of ``printEvent``
  (``pkg/printers/internalversion/printers.go``), used by :mod:`._table`.
- The same Events read as core ``v1`` Events (``/api/v1/namespaces/{ns}/events``, what
  ``kubectl events`` and ``kubectl get events`` read): both versions are one stored object
  (``pkg/apis/events/v1/conversion.go``): ``regarding`` is ``involvedObject``, ``note``
  ``message``, ``reportingController`` ``reportingComponent``, the ``deprecated*`` fields
  ``source``, ``firstTimestamp``, ``lastTimestamp`` and ``count``. Written out as the Go
  struct is: ``source: {}``, ``firstTimestamp`` / ``lastTimestamp`` / ``eventTime`` ``null``
  when unset, ``reportingComponent`` and ``reportingInstance`` always present.
"""

from __future__ import annotations

from typing import Any

from ._metadata import QNAME_RE
from ._status import JSON, ApiError, FieldError
from ._validation import SUBDOMAIN_RE, _cannot_handle, _go_json_kind, _parse_micro_time

__all__ = ["as_core_event", "decode_event", "from_core_event", "validate_event"]


_STRINGS = ("reportingController", "reportingInstance", "action", "reason", "note", "type")
_REFERENCE = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
_FIELDS = (
    "eventTime",
    "series",
    *_STRINGS[:2],
    "action",
    "reason",
    "regarding",
    "related",
    "note",
    "type",
    "deprecatedSource",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "deprecatedCount",
)
_LIMITS = {"reportingInstance": 128, "action": 128, "reason": 128}
_NOTE_LIMIT = 1024
_QUALIFIED_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
    "for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def _type_error(path: str, go_type: str, value: Any) -> ApiError:
    return _cannot_handle(
        "Event",
        "v1",
        f"json: cannot unmarshal {_go_json_kind(value)}into Go struct field "
        f"Event.{path} of type {go_type}",
    )


def _string(path: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _type_error(path, "string", value)
    return value


def _int32(path: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        raise _type_error(path, "int32", value)
    return value


def _object(path: str, value: Any, keys: tuple[str, ...]) -> JSON:
    if not isinstance(value, dict):
        raise _type_error(path, "v1.ObjectReference", value)
    return {k: _string(f"{path}.{k}", value[k]) for k in keys if value.get(k) is not None}


def decode_event(body: JSON, warnings: list[str]) -> JSON:
    """Type-check and normalize an Event body (400 on a decode error); returns its fields."""
    clean: JSON = {}
    for key, value in body.items():
        if key in ("apiVersion", "kind", "metadata"):
            continue
        if key not in _FIELDS:
            warnings.append(f'unknown field "{key}"')
            continue
        if value is None:
            continue
        if key in _STRINGS:
            clean[key] = _string(key, value)
        elif key in ("eventTime", "deprecatedFirstTimestamp", "deprecatedLastTimestamp"):
            clean[key] = _parse_micro_time(_string(key, value), "Event")
        elif key == "deprecatedCount":
            clean[key] = _int32(key, value)
        elif key in ("regarding", "related"):
            clean[key] = _object(key, value, _REFERENCE)
        elif key == "deprecatedSource":
            clean[key] = _object(key, value, ("component", "host"))
        else:
            clean[key] = _series(value)
    return {key: clean[key] for key in _FIELDS if key in clean}


def _series(value: Any) -> JSON:
    if not isinstance(value, dict):
        raise _type_error("series", "v1.EventSeries", value)
    series: JSON = {}
    if value.get("count") is not None:
        series["count"] = _int32("series.count", value["count"])
    if value.get("lastObservedTime") is not None:
        text = _string("series.lastObservedTime", value["lastObservedTime"])
        series["lastObservedTime"] = _parse_micro_time(text, "Event")
    return series


def validate_event(event: JSON, namespace: str) -> list[FieldError]:
    """``ValidateEventCreate`` for an events.k8s.io/v1 request (metadata is checked apart)."""
    errors = _legacy(event, namespace)
    series = event.get("series")
    if series is not None:
        if series.get("count", 0) < 2:
            errors.append(FieldError("series.count", "Invalid", "should be at least 2", ""))
        if not series.get("lastObservedTime"):
            errors.append(FieldError("series.lastObservedTime", "Required"))
    if not event.get("eventTime"):
        errors.append(FieldError("eventTime", "Required"))
    type_ = event.get("type", "")
    if type_ not in ("Normal", "Warning"):
        errors.append(FieldError("type", "Invalid", f"has invalid value: {type_}", ""))
    for field, core in (
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
    ):
        if event.get(field):
            errors.append(FieldError(core, "Invalid", "needs to be unset", ""))
    if any((event.get("deprecatedSource") or {}).values()):
        errors.append(FieldError("source", "Invalid", "needs to be unset", ""))
    return errors


def _legacy(event: JSON, namespace: str) -> list[FieldError]:
    """``legacyValidateEvent`` for an Event with ``eventTime`` (a "new" Event).

    Without ``eventTime`` the legacy checks compare namespaces only; the Required error on
    ``eventTime`` comes from the strict part, so those are enough here.
    """
    errors: list[FieldError] = []
    regarding_ns = (event.get("regarding") or {}).get("namespace", "")
    if event.get("eventTime"):
        if not regarding_ns and namespace not in ("default", "kube-system"):
            errors.append(
                FieldError(
                    "involvedObject.namespace", "Invalid", "does not match event.namespace", ""
                )
            )
        errors += _reporting(event)
        for field in ("action", "reason"):
            errors += _required_limited(event, field, field)
        if len(event.get("note", "")) > _NOTE_LIMIT:
            errors.append(
                FieldError("message", "Invalid", f"can have at most {_NOTE_LIMIT} characters", "")
            )
    elif regarding_ns and regarding_ns != namespace:
        errors.append(
            FieldError(
                "involvedObject.namespace",
                "Invalid",
                "does not match event.namespace",
                regarding_ns,
            )
        )
    return errors


def _reporting(event: JSON) -> list[FieldError]:
    errors: list[FieldError] = []
    controller = event.get("reportingController", "")
    if not controller:
        errors.append(FieldError("reportingController", "Required"))
    for message in _qualified_name_errors(controller):
        errors.append(FieldError("reportingController", "Invalid", message, controller))
    errors += _required_limited(event, "reportingInstance", "reportingInstance")
    return errors


def _required_limited(event: JSON, key: str, field: str) -> list[FieldError]:
    value = event.get(key, "")
    limit = _LIMITS[key]
    if not value:
        return [FieldError(field, "Required")]
    if len(value) > limit:
        return [FieldError(field, "Invalid", f"can have at most {limit} characters", "")]
    return []


def _qualified_name_errors(value: str) -> list[str]:
    """apimachinery ``IsQualifiedName``: ``[prefix/]name``, name at most 63 characters."""
    prefix, slash, name = value.rpartition("/")
    if value.count("/") > 1:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  "
            "or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?"
            "[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. "
            "'example.com/MyName')"
        ]
    errors = []
    if slash and (not prefix or not SUBDOMAIN_RE.match(prefix) or len(prefix) > 253):
        errors.append("prefix part must be a valid DNS-1123 subdomain")
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if not QNAME_RE.match(name):
        errors.append(_QUALIFIED_MSG)
    return errors


# --- server-side printing (pkg/printers/internalversion/printers.go printEvent) -----------------


def _printed(name: str, description: str, priority: int = 0, fmt: str = "") -> JSON:
    return {
        "name": name,
        "type": "string",
        "format": fmt,
        "description": description,
        "priority": priority,
    }


#: The Event columns of ``kubectl get events``; priority 1 ones show with ``-o wide``. The
#: descriptions are short summaries, not the swagger docs the server sends.
EVENT_COLUMNS: tuple[JSON, ...] = (
    _printed("Last Seen", "when the event was last observed"),
    _printed("Type", "type of this event (Normal, Warning)"),
    _printed("Reason", "why the action was taken"),
    _printed("Object", "the object this event is about"),
    _printed("Subobject", "the field of the object this event is about", 1),
    _printed("Source", "the component reporting this event", 1),
    _printed("Message", "a human-readable description"),
    _printed("First Seen", "when the event was first observed", 1),
    _printed("Count", "the number of times this event has occurred", 1),
    _printed("Name", "the event's name", 1, "name"),
)


def event_row(event: JSON, since: Any) -> list[Any]:
    """``printEvent`` with ``Wide`` (the server sends every cell); ``since(time)`` prints an
    age (``<unknown>`` for none) as ``TranslateTimestampSince`` does."""
    first = since(event.get("deprecatedFirstTimestamp") or event.get("eventTime"))
    last = since(event["deprecatedLastTimestamp"]) if "deprecatedLastTimestamp" in event else first
    count = event.get("deprecatedCount") or 1
    series = event.get("series")
    if series is not None:
        last, count = since(series.get("lastObservedTime")), series.get("count", 0)
    regarding = event.get("regarding") or {}
    kind = str(regarding.get("kind", "")).lower()
    target = f"{kind}/{regarding['name']}" if regarding.get("name") else kind
    source = event.get("deprecatedSource") or {}
    component = source.get("component") or event.get("reportingController", "")
    instance = source.get("host") or event.get("reportingInstance", "")
    return [
        last,
        event.get("type", ""),
        event.get("reason", ""),
        target,
        regarding.get("fieldPath", ""),
        f"{component}, {instance}" if instance else component,
        event.get("note", "").strip(),
        first,
        count,
        event["metadata"]["name"],
    ]


# --- the core v1 view (pkg/apis/events/v1/conversion.go) ----------------------------------------

#: events.k8s.io/v1 field -> core v1 field, for those that only change name.
_CORE_NAMES = {
    "regarding": "involvedObject", "note": "message", "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp", "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count", "reportingController": "reportingComponent",
}
#: Core v1 Event fields in the Go struct's order, with the value written when unset (None:
#: omitted).
_CORE_FIELDS: tuple[tuple[str, Any], ...] = (
    ("involvedObject", {}), ("reason", None), ("message", None), ("source", {}),
    ("firstTimestamp", "null"), ("lastTimestamp", "null"), ("count", None), ("type", None),
    ("eventTime", "null"), ("series", None), ("action", None), ("related", None),
    ("reportingComponent", ""), ("reportingInstance", ""),
)


def as_core_event(obj: JSON) -> JSON:
    """A stored (events.k8s.io/v1) Event as core v1 serves it."""
    renamed = {_CORE_NAMES.get(key, key): value for key, value in obj.items()}
    out: JSON = {k: renamed[k] for k in ("kind", "apiVersion", "metadata") if k in renamed}
    for key, unset in _CORE_FIELDS:
        if key in renamed:
            out[key] = renamed[key]
        elif unset == "null":
            out[key] = None
        elif unset is not None:
            out[key] = unset
    return out


def from_core_event(obj: JSON) -> JSON:
    """A core v1 Event back in events.k8s.io/v1 fields (for printing)."""
    back = {core: new for new, core in _CORE_NAMES.items()}
    return {back.get(key, key): value for key, value in obj.items() if value is not None}
