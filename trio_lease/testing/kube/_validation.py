"""Decoding and validation, following the Kubernetes sources.

- Names (``apimachinery/pkg/util/validation``): object names are DNS-1123 subdomains (at most
  253 characters), namespaces DNS-1123 labels (at most 63). Errors are 422 ``Invalid`` with
  the exact apimachinery messages.
- Lease spec (``pkg/apis/coordination/validation.ValidateLeaseSpec``): ``leaseDurationSeconds``
  must be > 0, ``leaseTransitions`` >= 0, ``preferredHolder`` is Forbidden without
  ``strategy``, a ``strategy`` without ``/`` must be ``OldestEmulationVersion`` (the real code
  appends ``strategy`` to the path twice, so the field reads ``spec.strategy.strategy``; we copy
  that). ``holderIdentity`` is not validated.
- Decoding: a wrong JSON type or a MicroTime that is not ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (Go's
  fixed-width ``.000000`` layout requires exactly six digits; ``Z`` or ``±hh:mm``) fails in the
  decoder, before validation: that is a 400 ``BadRequest`` ("Lease in version "v1" cannot be
  handled as a Lease: ..."), not a 422. Times are stored re-serialized in UTC with ``Z``.
  Unknown fields are dropped (the server's default ``fieldValidation=Warn`` prunes them and
  adds a ``Warning`` header, which we also send).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from ._status import JSON, ApiError, FieldError

__all__ = [
    "check_type_meta",
    "decode_lease",
    "decode_metadata",
    "drop_disabled_lease_fields",
    "format_micro_time",
    "validate_name",
    "validate_namespace_name",
    "validate_schema",
]


_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
SUBDOMAIN_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_LABEL_RE = re.compile(rf"^{_LABEL}$")
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_MICRO_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})(Z|[+-]\d{2}:\d{2})$"
)
_INT32_MAX = 2**31 - 1


def validate_name(name: str, *, label: bool = False) -> list[FieldError]:
    """``metadata.name`` errors for an object (subdomain) or a namespace (``label=True``)."""
    if not name:
        return [FieldError("metadata.name", "Required", "name or generateName is required")]
    limit, pattern, message = (63, _LABEL_RE, _LABEL_MSG) if label else (
        253, SUBDOMAIN_RE, SUBDOMAIN_MSG
    )
    errors = []
    if len(name) > limit:
        errors.append(
            FieldError("metadata.name", "Invalid", f"must be no more than {limit} characters", name)
        )
    if not pattern.match(name):
        errors.append(FieldError("metadata.name", "Invalid", message, name))
    return errors


def validate_namespace_name(name: str) -> list[FieldError]:
    """A namespace name is a DNS-1123 label."""
    return validate_name(name, label=True)


def format_micro_time(moment: datetime) -> str:
    """MicroTime as the server writes it: UTC, six fraction digits, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _cannot_handle(kind: str, version: str, detail: str) -> ApiError:
    return ApiError.bad_request(
        f'{kind} in version "{version}" cannot be handled as a {kind}: {detail}'
    )


def _parse_micro_time(text: str, kind: str) -> str:
    match = _MICRO_RE.match(text)
    if match is None:
        raise _cannot_handle(
            kind,
            "v1",
            f'parsing time "{text}" as "2006-01-02T15:04:05.000000Z07:00": cannot parse '
            f'"{text[19:]}" as ".000000"',
        )
    year, month, day, hour, minute, second, micro, zone = match.groups()
    offset = timedelta(0)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        offset = sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    try:
        moment = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), int(micro),
            tzinfo=UTC,
        )
    except ValueError as exc:
        raise _cannot_handle(kind, "v1", f'parsing time "{text}": {exc}') from None
    return format_micro_time(moment - offset)


_LEASE_SPEC_TYPES = {
    "holderIdentity": "string",
    "leaseDurationSeconds": "int32",
    "acquireTime": "MicroTime",
    "renewTime": "MicroTime",
    "leaseTransitions": "int32",
    "strategy": "string",
    "preferredHolder": "string",
}


def decode_lease(obj: JSON, warnings: list[str]) -> JSON:
    """Type-check and normalize a Lease body's spec (400 on a decode error); returns the spec."""
    spec = obj.get("spec")
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise _cannot_handle(
            "Lease", "v1", "json: cannot unmarshal into Go struct field Lease.spec of type "
            "v1.LeaseSpec",
        )
    clean: JSON = {}
    for key, value in spec.items():
        expected = _LEASE_SPEC_TYPES.get(key)
        if expected is None:
            warnings.append(f'unknown field "spec.{key}"')
        elif value is not None:
            clean[key] = _decode_lease_field(key, expected, value)
    return {key: clean[key] for key in _LEASE_SPEC_TYPES if key in clean}


def _decode_lease_field(key: str, expected: str, value: Any) -> Any:
    """One Lease spec field as its Go type decodes it (400 for a value it cannot hold)."""
    if expected == "string" and not isinstance(value, str):
        raise _go_type_error(key, "string", value)
    if expected == "int32":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _go_type_error(key, "int32", value)
        if not -(2**31) <= value <= _INT32_MAX:
            raise _cannot_handle(
                "Lease", "v1", f"json: cannot unmarshal number {value} into Go struct "
                f"field LeaseSpec.spec.{key} of type int32",
            )
    if expected == "MicroTime":
        if not isinstance(value, str):
            raise _go_type_error(key, "string", value)
        value = _parse_micro_time(value, "Lease")
    return value


def _go_type_error(key: str, go_type: str, value: Any = None) -> ApiError:
    return _cannot_handle(
        "Lease", "v1", f"json: cannot unmarshal {_go_json_kind(value)}into Go struct field "
        f"LeaseSpec.spec.{key} of type {go_type}",
    )


def _go_json_kind(value: Any) -> str:
    """``UnmarshalTypeError.Value`` with a trailing space ("" when unknown)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "bool "
    if isinstance(value, int | float):
        return "number "
    if isinstance(value, str):
        return "string "
    return "array " if isinstance(value, list) else "object "


def decode_metadata(kind: str, version: str, metadata: JSON) -> None:
    """``labels`` and ``annotations`` must be objects of strings, else the decoder's 400.

    Go's ``encoding/json`` (``sigs.k8s.io/json``) fails decoding into ``ObjectMeta`` with
    ``json: cannot unmarshal number into Go struct field ObjectMeta.metadata.annotations of type
    string``; the create/update handler wraps it (``transformDecodeError``) as ``Lease in
    version "v1" cannot be handled as a Lease: ...``. A null map or a null value decodes.
    """
    for field in ("labels", "annotations"):
        value = metadata.get(field)
        if value is None:
            continue
        go_type = "map[string]string"
        if isinstance(value, dict):
            bad = [v for v in value.values() if v is not None and not isinstance(v, str)]
            if not bad:
                continue
            value, go_type = bad[0], "string"
        raise _cannot_handle(
            kind, version, f"json: cannot unmarshal {_go_json_kind(value)}into Go struct field "
            f"ObjectMeta.metadata.{field} of type {go_type}",
        )


def drop_disabled_lease_fields(spec: JSON, old: JSON | None, gate: bool) -> None:
    """``PrepareForCreate`` / ``PrepareForUpdate`` of ``pkg/registry/coordination/lease``.

    With the ``CoordinatedLeaderElection`` feature gate off, ``strategy`` and
    ``preferredHolder`` are dropped silently, unless the stored Lease (``old``, on update)
    already has the field.
    """
    if gate:
        return
    for key in ("strategy", "preferredHolder"):
        if old is None or old.get(key) is None:
            spec.pop(key, None)


def validate_lease_spec(spec: JSON) -> list[FieldError]:
    """``ValidateLeaseSpec``, field by field, in the order the Go code checks them."""
    errors = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        errors.append(
            FieldError("spec.leaseDurationSeconds", "Invalid", "must be greater than 0", duration)
        )
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        errors.append(
            FieldError(
                "spec.leaseTransitions", "Invalid", "must be greater than or equal to 0",
                transitions,
            )
        )
    strategy = spec.get("strategy")
    if strategy is not None and "/" not in strategy and strategy != "OldestEmulationVersion":
        errors.append(
            FieldError(
                "spec.strategy.strategy", "NotSupported",
                'supported values: "OldestEmulationVersion"', strategy,
            )
        )
    if spec.get("preferredHolder") and not strategy:
        errors.append(
            FieldError(
                "spec.preferredHolder", "Forbidden",
                "may only be specified if `strategy` is defined",
            )
        )
    return errors


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def validate_schema(
    value: Any, schema: JSON, path: str, errors: list[FieldError],
    pruned: list[str] | None = None,
) -> Any:
    """A small structural-schema check for custom resources: types, ``required``, pruning.

    Returns the value with unknown object fields pruned (as the apiserver prunes them unless
    ``x-kubernetes-preserve-unknown-fields`` is set); their paths go to ``pruned``. Errors
    read like the apiextensions validator's: ``spec.time: Invalid value: "string": spec.time in
    body must be of type integer: "string"``.
    """
    expected = schema.get("type")
    wrong = _type_error(value, expected, path)
    if wrong is not None:
        errors.append(wrong)
        return value
    if isinstance(value, dict) and expected == "object":
        return _validate_object(value, schema, path, errors, pruned)
    return value


def _type_error(value: Any, expected: Any, path: str) -> FieldError | None:
    """The error of a value not of the schema's type; None when it is (or is null)."""
    if expected not in _JSON_TYPES or value is None:
        return None
    ok = isinstance(value, _JSON_TYPES[expected]) and not (
        expected in ("integer", "number") and isinstance(value, bool)
    )
    if ok:
        return None
    got = _json_type_name(value)
    return FieldError(path, "Invalid", f'{path} in body must be of type {expected}: "{got}"', got)


def _validate_object(
    value: JSON, schema: JSON, path: str, errors: list[FieldError], pruned: list[str] | None
) -> JSON:
    """An object against its schema: required fields, properties, and unknown fields pruned."""
    properties: JSON = schema.get("properties", {})
    for required in schema.get("required", []):
        if required not in value:
            errors.append(FieldError(f"{path}.{required}" if path else required, "Required"))
    keep = schema.get("x-kubernetes-preserve-unknown-fields", False) or not properties
    kept: JSON = {}
    for key, item in value.items():
        child = f"{path}.{key}" if path else key
        if key in properties:
            kept[key] = validate_schema(item, properties[key], child, errors, pruned)
        elif keep:
            kept[key] = item
        elif pruned is not None:
            pruned.append(child)
    return kept


def _json_type_name(value: Any) -> str:
    for name, types in _JSON_TYPES.items():
        if (isinstance(value, types) and not isinstance(value, bool)) or (
            name == "boolean" and isinstance(value, bool)
        ):
            return name
    return "null"


#: The scheme kube-apiserver decodes built-in types with, as its errors name it.
_SCHEME = "k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30"
#: Other versions the scheme knows a built-in kind in (decoded, then refused as the wrong
#: version); any other version or kind is "not registered".
_ALSO_REGISTERED = {("coordination.k8s.io", "Lease"): ("v1beta1",)}


def check_type_meta(
    kind: str, group: str, version: str, custom: bool, body: JSON
) -> None:
    """The body's ``apiVersion``/``kind`` against the URL's type, as the handlers check them.

    ``handlers/create.go`` and ``update.go`` decode first: for a built-in type a kind or
    version the scheme does not know fails in the decoder (400 ``Lease in version "v2" cannot
    be handled as a Lease: no kind "Lease" is registered for version ...``,
    ``transformDecodeError``); a known other version decodes and is then refused (400 ``the API
    version in the data (...) does not match the expected API version (...)``, the
    ``AcceptsGroupVersion`` check). A custom resource decodes as unstructured: a wrong version is
    that same 400, a wrong kind is the CR validator's 422 on ``kind`` (``ValidateTypeMeta``,
    reported under the body's kind). Missing fields default to the URL's.
    """
    expected = f"{group}/{version}" if group else version
    api_version = body.get("apiVersion") or ""
    given_kind = body.get("kind") or ""
    if not isinstance(api_version, str) or not isinstance(given_kind, str):
        raise ApiError.bad_request("couldn't get version/kind; json parse error: wrong type")
    if custom:
        _check_custom_type_meta(kind, group, expected, api_version, given_kind, body)
    else:
        _check_built_in_type_meta(kind, group, version, expected, api_version, given_kind)


def _check_custom_type_meta(
    kind: str, group: str, expected: str, api_version: str, given_kind: str, body: JSON
) -> None:
    """A custom resource's type meta: a wrong version is a 400, a wrong kind a 422."""
    if api_version and api_version != expected:
        raise _wrong_version(api_version, expected)
    if given_kind and given_kind != kind:
        name = str((body.get("metadata") or {}).get("name") or "")
        raise ApiError.invalid(
            given_kind, group, name,
            [FieldError("kind", "Invalid", f"must be {kind}", given_kind)],
        )


def _check_built_in_type_meta(
    kind: str, group: str, version: str, expected: str, api_version: str, given_kind: str
) -> None:
    """A built-in type's type meta: unknown to the scheme, or a known other version, is a 400."""
    body_group, _, body_version = (api_version or expected).rpartition("/")
    given_kind = given_kind or kind
    known = given_kind == kind and body_group == group and (
        body_version == version or body_version in _ALSO_REGISTERED.get((group, kind), ())
    )
    if not known:
        raise ApiError.bad_request(
            f'{given_kind} in version "{body_version}" cannot be handled as a {kind}: no kind '
            f'"{given_kind}" is registered for version "{api_version or expected}" in scheme '
            f'"{_SCHEME}"'
        )
    if body_version != version:
        raise _wrong_version(api_version, expected)


def _wrong_version(given: str, expected: str) -> ApiError:
    return ApiError.bad_request(
        f"the API version in the data ({given}) does not match the expected API version "
        f"({expected})"
    )
