"""OpenAPI schemas of the Lease kinds, for ``kubectl explain`` (``/openapi/v3``, ``/openapi/v2``).

The shapes follow what kube-apiserver publishes (``k8s.io/kube-openapi``, the generated
``pkg/generated/openapi``): a component per type named by its Go package
(``io.k8s.api.coordination.v1.Lease``), references as ``allOf: [{$ref}]`` with the field's own
description, and ``x-kubernetes-group-version-kind`` on each top-level kind, which is what
``kubectl explain`` looks the kind up by. The descriptions are the API's field comments
(``k8s.io/api/coordination/v1/types.go``, ``apimachinery/pkg/apis/meta/v1/types.go``), the
metadata ones shortened to their first sentence. A custom resource's schema is its CRD's
``openAPIV3Schema`` with ``apiVersion``, ``kind`` and ``metadata`` added, as the apiextensions
server builds it (``apiextensions-apiserver/pkg/controller/openapi/builder``), named by its
reversed group (``io.akka.v1.Lease``). Other built-in kinds have no schema here.
"""

from __future__ import annotations

import copy

from ._resources import ResourceType
from ._status import JSON

__all__ = ["schemas_for"]


_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_MICRO = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"
_TIME = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
_LEASE = "io.k8s.api.coordination.v1.Lease"
_SPEC = "io.k8s.api.coordination.v1.LeaseSpec"
_CONVENTIONS = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
_API_VERSION = (
    "APIVersion defines the versioned schema of this representation of an object. Servers "
    "should convert recognized schemas to the latest internal value, and may reject "
    f"unrecognized values. More info: {_CONVENTIONS}#resources"
)
_KIND = (
    "Kind is a string value representing the REST resource this object represents. Servers "
    "may infer this from the endpoint the client submits requests to. Cannot be updated. In "
    f"CamelCase. More info: {_CONVENTIONS}#types-kinds"
)


def _ref(name: str, description: str, prefix: str, default: bool = False) -> JSON:
    out: JSON = {"allOf": [{"$ref": f"{prefix}{name}"}]}
    if default:
        out["default"] = {}
    out["description"] = description
    return out


def _string(description: str) -> JSON:
    return {"description": description, "type": "string"}


def _builtin(prefix: str) -> dict[str, JSON]:
    strings = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}
    return {
        _LEASE: {
            "description": "Lease defines a lease concept.",
            "type": "object",
            "properties": {
                "apiVersion": _string(_API_VERSION),
                "kind": _string(_KIND),
                "metadata": _ref(_META, f"More info: {_CONVENTIONS}#metadata", prefix, True),
                "spec": _ref(_SPEC, "spec contains the specification of the Lease. More "
                             f"info: {_CONVENTIONS}#spec-and-status", prefix, True),
            },
            "x-kubernetes-group-version-kind": [
                {"group": "coordination.k8s.io", "kind": "Lease", "version": "v1"}
            ],
        },
        _SPEC: {
            "description": "LeaseSpec is a specification of a Lease.",
            "type": "object",
            "properties": {
                "acquireTime": _ref(_MICRO, "acquireTime is a time when the current lease was "
                                    "acquired.", prefix),
                "holderIdentity": _string(
                    "holderIdentity contains the identity of the holder of a current lease. If "
                    "Coordinated Leader Election is used, the holder identity must be equal to "
                    "the elected LeaseCandidate.metadata.name field."
                ),
                "leaseDurationSeconds": {
                    "description": "leaseDurationSeconds is a duration that candidates for a "
                    "lease need to wait to force acquire it. This is measured against the time "
                    "of last observed renewTime.",
                    "type": "integer", "format": "int32",
                },
                "leaseTransitions": {
                    "description": "leaseTransitions is the number of transitions of a lease "
                    "between holders.",
                    "type": "integer", "format": "int32",
                },
                "preferredHolder": _string(
                    "PreferredHolder signals to a lease holder that the lease has a more optimal "
                    "holder and should be given up. This field can only be set if Strategy is "
                    "also set."
                ),
                "renewTime": _ref(_MICRO, "renewTime is a time when the current holder of a "
                                  "lease has last updated the lease.", prefix),
                "strategy": _string(
                    "Strategy indicates the strategy for picking the leader for coordinated "
                    "leader election. If the field is not specified, there is no active "
                    "coordination for this lease. (Alpha) Using this field requires the "
                    "CoordinatedLeaderElection feature gate to be enabled."
                ),
            },
        },
        _MICRO: {"description": "MicroTime is version of Time with microsecond level "
                 "precision.", "type": "string", "format": "date-time"},
        _TIME: {"description": "Time is a wrapper around time.Time which supports correct "
                "marshaling to YAML and JSON.", "type": "string", "format": "date-time"},
        _META: {
            "description": "ObjectMeta is metadata that all persisted resources must have, "
            "which includes all objects users must create.",
            "type": "object",
            "properties": {
                "annotations": {**strings, "description": "Annotations is an unstructured "
                                "key value map stored with a resource that may be set by "
                                "external tools to store and retrieve arbitrary metadata."},
                "creationTimestamp": _ref(_TIME, "CreationTimestamp is a timestamp "
                                          "representing the server time when this object was "
                                          "created.", prefix),
                "deletionTimestamp": _ref(_TIME, "DeletionTimestamp is RFC 3339 date and time "
                                          "at which this resource will be deleted.", prefix),
                "finalizers": {"description": "Must be empty before the object is deleted "
                               "from the registry.", "type": "array",
                               "items": {"type": "string", "default": ""},
                               "x-kubernetes-list-type": "set",
                               "x-kubernetes-patch-strategy": "merge"},
                "generateName": _string("GenerateName is an optional prefix, used by the "
                                        "server, to generate a unique name ONLY IF the Name "
                                        "field has not been provided."),
                "generation": {"description": "A sequence number representing a specific "
                               "generation of the desired state.", "type": "integer",
                               "format": "int64"},
                "labels": {**strings, "description": "Map of string keys and values that can "
                           "be used to organize and categorize (scope and select) objects."},
                "name": _string("Name must be unique within a namespace."),
                "namespace": _string("Namespace defines the space within which each name must "
                                     "be unique."),
                "ownerReferences": {"description": "List of objects depended by this object.",
                                    "type": "array", "items": {"type": "object"},
                                    "x-kubernetes-patch-merge-key": "uid",
                                    "x-kubernetes-patch-strategy": "merge"},
                "resourceVersion": _string("An opaque value that represents the internal "
                                           "version of this object."),
                "uid": _string("UID is the unique in time and space value for this object."),
            },
        },
    }


def _custom(rt: ResourceType, prefix: str) -> tuple[str, dict[str, JSON]]:
    name = ".".join([*reversed(rt.group.split(".")), rt.version, rt.kind])
    schema = copy.deepcopy(rt.schema or {"type": "object"})
    properties = schema.setdefault("properties", {})
    properties.setdefault("apiVersion", _string(_API_VERSION))
    properties.setdefault("kind", _string(_KIND))
    properties.setdefault("metadata", {"$ref": f"{prefix}{_META}"})
    schema["x-kubernetes-group-version-kind"] = [
        {"group": rt.group, "kind": rt.kind, "version": rt.version}
    ]
    return name, {name: schema}


def schemas_for(types: list[ResourceType], prefix: str) -> dict[str, JSON]:
    """The component schemas for ``types`` (refs start with ``prefix``)."""
    out: dict[str, JSON] = {}
    for rt in types:
        if rt.lease or rt.custom:
            builtin = _builtin(prefix)
            if rt.lease:
                out.update(builtin)
            else:
                out[_META] = builtin[_META]
                out[_TIME] = builtin[_TIME]
                out.update(_custom(rt, prefix)[1])
    return out
