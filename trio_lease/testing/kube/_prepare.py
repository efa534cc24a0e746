"""Decoding and validating a written object for the store (``BeforeCreate``/``BeforeUpdate``
and the strategies' ``Validate``), by kind: Leases, events.k8s.io Events, custom resources
(their structural schema) and the other built-ins (kept as sent).
"""

from __future__ import annotations

import copy
from typing import Protocol

from ._events import decode_event, validate_event
from ._metadata import validate_object_meta
from ._resources import ResourceType, crd_initial_status
from ._status import JSON, ApiError, FieldError
from ._validation import (
    decode_lease,
    decode_metadata,
    drop_disabled_lease_fields,
    validate_lease_spec,
    validate_name,
    validate_schema,
)

__all__ = ["WriteState", "prepare"]


class WriteState(Protocol):
    """What :func:`prepare` reads and adds to: the request's state on the store."""

    #: ``Warning`` headers for the answer.
    warnings: list[str]
    #: ``duplicate field "..."`` for each key the body repeats.
    duplicates: list[str]
    #: ``Strict``, ``Warn`` or ``Ignore``.
    field_validation: str
    #: The ``CoordinatedLeaderElection`` feature gate.
    coordinated_leader_election: bool


def prepare(
    store: WriteState, rt: ResourceType, body: JSON, namespace: str, old: JSON | None = None
) -> JSON:
    """Decode and validate a new object (400 / 422) and return what will be stored."""
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ApiError.bad_request("metadata must be an object")
    decode_metadata(rt.kind, rt.version, metadata)
    name = metadata.get("name") or ""
    out: JSON = {"kind": rt.kind, "apiVersion": rt.api_version}
    meta = _stored_meta(rt, metadata, name, namespace)
    out["metadata"] = meta
    errors = validate_name(name, label=rt.plural == "namespaces" and not rt.group)
    errors += validate_object_meta(meta)
    if rt.lease:
        errors += _lease_content(store, rt, body, old, out)
    elif rt.group == "events.k8s.io":
        event = decode_event(body, store.warnings)
        errors += validate_event(event, namespace)
        out.update(event)
    elif rt.custom:
        errors += _custom_content(store, rt, body, out)
    else:
        _built_in_content(rt, body, old, out)
    if errors:
        raise ApiError.invalid(rt.kind, rt.group, name, errors)
    return out


def _stored_meta(rt: ResourceType, metadata: JSON, name: str, namespace: str) -> JSON:
    """The metadata a new object keeps of what the request gave: the server sets the rest."""
    meta: JSON = {"name": name}
    if rt.namespaced:
        meta["namespace"] = namespace
    for key in ("labels", "annotations", "finalizers", "ownerReferences"):
        if metadata.get(key):
            meta[key] = copy.deepcopy(metadata[key])
    return meta


def _lease_content(
    store: WriteState, rt: ResourceType, body: JSON, old: JSON | None, out: JSON
) -> list[FieldError]:
    """A Lease's spec into ``out``, decoded and with disabled fields dropped; its errors."""
    unknown: list[str] = []
    spec = decode_lease(body, unknown)
    _strict(store, rt, unknown)
    old_spec = None if old is None else old.get("spec") or {}
    drop_disabled_lease_fields(spec, old_spec, store.coordinated_leader_election)
    out["spec"] = spec
    return validate_lease_spec(spec)


def _custom_content(
    store: WriteState, rt: ResourceType, body: JSON, out: JSON
) -> list[FieldError]:
    """A custom object's content into ``out``, pruned by its CRD's schema; its errors."""
    errors: list[FieldError] = []
    content = {k: v for k, v in body.items() if k not in ("kind", "apiVersion", "metadata")}
    schema = copy.deepcopy(rt.schema or {"type": "object"})
    schema.setdefault("properties", {})
    pruned: list[str] = []
    if schema["properties"]:
        content = validate_schema(content, schema, "", errors, pruned)
    _strict(store, rt, [f'unknown field "{path}"' for path in pruned])
    out.update(content)
    return errors


def _built_in_content(rt: ResourceType, body: JSON, old: JSON | None, out: JSON) -> None:
    """Another built-in object's content into ``out``, with what its strategy sets."""
    out.update(
        {k: copy.deepcopy(v) for k, v in body.items()
         if k not in ("kind", "apiVersion", "metadata")}
    )
    if rt.plural == "namespaces":
        out["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = (
            out["metadata"]["name"]
        )
        out["spec"] = {"finalizers": ["kubernetes"]}
        out["status"] = {"phase": "Active"}
    if rt.plural == "customresourcedefinitions":
        # The strategy keeps the status on update (a subresource) and resets it on create.
        out["status"] = old["status"] if old else crd_initial_status(out)


def _strict(store: WriteState, rt: ResourceType, unknown: list[str]) -> None:
    """The decoder's strict errors (duplicate fields first, then unknown ones) by the
    request's ``fieldValidation`` (``handlers/create.go``, ``update.go``): Strict is 400
    ``Lease in version "v1" cannot be handled as a Lease: strict decoding error: unknown
    field "spec.bogus"`` (``transformDecodeError``), Warn adds ``Warning`` headers."""
    found = [*store.duplicates, *unknown]
    if not found or store.field_validation == "Ignore":
        return
    if store.field_validation == "Strict":
        raise ApiError.bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
            "strict decoding error: " + ", ".join(found)
        )
    store.warnings += found
