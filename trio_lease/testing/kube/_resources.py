"""The resource types the emulator serves: built-ins and those registered by a CRD.

A :class:`ResourceType` carries what the generic registry needs to know about a type: where it
lives (group, version, plural), whether it is namespaced, and the two strategy flags that make
Leases special (``pkg/registry/coordination/lease/strategy.go``): ``AllowCreateOnUpdate`` is
true for Leases (a PUT to a missing Lease creates it) and false for custom resources (a PUT to a
missing custom resource is 404). ``AllowUnconditionalUpdate`` is false for both, so a PUT must
carry ``metadata.resourceVersion``.
"""

from __future__ import annotations

import dataclasses

from ._status import JSON, ApiError, FieldError

__all__ = [
    "BUILTIN_TYPES",
    "ResourceType",
    "crd_established",
    "crd_established_status",
    "crd_initial_status",
    "types_from_crd",
]


ALL_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")


@dataclasses.dataclass(frozen=True)
class ResourceType:
    """One served resource: ``/apis/{group}/{version}/[namespaces/{ns}/]{plural}``."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    create_on_update: bool = False
    custom: bool = False
    schema: JSON | None = None
    lease: bool = False
    #: Another type's storage this one reads (core v1 Events are events.k8s.io's objects).
    stored_as: tuple[str, str] | None = None
    #: The verbs served (discovery and routing); all of them unless narrowed.
    verbs: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> tuple[str, str]:
        """Objects are stored once per (group, plural), whatever version is asked for."""
        return self.stored_as or (self.group, self.plural)

    @property
    def legacy_event(self) -> bool:
        """The core v1 view of events.k8s.io Events."""
        return self.stored_as == ("events.k8s.io", "events")

    def etcd_key(self, namespace: str, name: str) -> str:
        """The object's etcd key, as storage errors quote it (``/registry/leases/ns/name``;
        custom resources and CRDs are under ``/registry/<group>/<plural>``)."""
        prefix = f"{self.group}/{self.plural}" if self.custom or self.group.startswith(
            "apiextensions."
        ) else self.plural
        return "/".join(["/registry", prefix, *([namespace] if namespace else []), name])

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def discovery(self) -> JSON:
        """The entry of this type in an ``APIResourceList``."""
        entry: JSON = {
            "name": self.plural,
            "singularName": self.singular or self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs or ALL_VERBS),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        return entry


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", False, short_names=("ns",)),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",)),
    ResourceType(
        "coordination.k8s.io", "v1", "leases", "Lease", True, create_on_update=True, lease=True
    ),
    ResourceType(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
        False, short_names=("crd", "crds"),
    ),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, short_names=("ev",)),
    # Read only here: the emulator writes Events through events.k8s.io/v1 only.
    ResourceType("", "v1", "events", "Event", True, short_names=("ev",),
                 stored_as=("events.k8s.io", "events"), verbs=("get", "list", "watch")),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
    ),
)


def _crd_errors(name: str, group: str, names: JSON, versions: list[JSON]) -> list[FieldError]:
    """What keeps a CRD from being served: its group, names and served versions."""
    plural = names.get("plural", "")
    errors = []
    if not group:
        errors.append(FieldError("spec.group", "Required", ""))
    if not plural:
        errors.append(FieldError("spec.names.plural", "Required", ""))
    if not names.get("kind"):
        errors.append(FieldError("spec.names.kind", "Required", ""))
    if plural and group and name != f"{plural}.{group}":
        errors.append(
            FieldError(
                "metadata.name", "Invalid", 'must be spec.names.plural+"."+spec.group', name
            )
        )
    if not versions:
        errors.append(FieldError("spec.versions", "Required", "must have at least one version"))
    return errors


def types_from_crd(crd: JSON) -> list[ResourceType]:
    """The served versions of a CustomResourceDefinition; 422 if the CRD is malformed.

    Checks what matters for serving: ``metadata.name`` must be ``<plural>.<group>`` (the
    apiextensions validation message), names and at least one served version must exist.
    """
    name = crd.get("metadata", {}).get("name", "")
    spec = crd.get("spec") or {}
    group = spec.get("group", "")
    names = spec.get("names") or {}
    plural = names.get("plural", "")
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    errors = _crd_errors(name, group, names, versions)
    if errors:
        raise ApiError.invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, errors)
    scope = spec.get("scope", "Namespaced")
    return [
        ResourceType(
            group,
            version["name"],
            plural,
            names["kind"],
            scope == "Namespaced",
            singular=names.get("singular", ""),
            short_names=tuple(names.get("shortNames") or ()),
            custom=True,
            schema=(version.get("schema") or {}).get("openAPIV3Schema"),
        )
        for version in versions
    ]


# --- CRD status (apiextensions-apiserver's strategy and its naming/establishing controllers) ---


def crd_initial_status(crd: JSON) -> JSON:
    """``PrepareForCreate``: a new CRD's status is reset; only the storage version is stored.

    ``acceptedNames`` is always written (not ``omitempty``), empty until names are accepted.
    """
    versions = (crd.get("spec") or {}).get("versions") or []
    stored = [v.get("name", "") for v in versions if v.get("storage")][:1]
    return {"acceptedNames": {"plural": "", "kind": ""}, "storedVersions": stored}


def crd_established(crd: JSON) -> bool:
    """Served by the CR handler: ``NamesAccepted`` or ``Established`` is True."""
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("NamesAccepted", "Established") and c.get("status") == "True"
        for c in conditions if isinstance(c, dict)
    )


def crd_established_status(crd: JSON, now: str) -> JSON:
    """The status after the naming controller accepted the names (``NoConflicts``) and the
    establishing controller set ``Established`` (``InitialNamesAccepted``)."""
    status = crd.get("status") or {}
    names = (crd.get("spec") or {}).get("names") or {}
    kind = names.get("kind", "")
    accepted: JSON = {"plural": names.get("plural", ""), "singular": names.get("singular") or
                      kind.lower()}
    if names.get("shortNames"):
        accepted["shortNames"] = list(names["shortNames"])
    accepted.update({"kind": kind, "listKind": names.get("listKind") or f"{kind}List"})
    if names.get("categories"):
        accepted["categories"] = list(names["categories"])
    conditions = [
        {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now,
         "reason": "NoConflicts", "message": "no conflicts found"},
        {"type": "Established", "status": "True", "lastTransitionTime": now,
         "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
    ]
    stored = status.get("storedVersions", crd_initial_status(crd)["storedVersions"])
    # Go field order: conditions, acceptedNames, storedVersions.
    return {"conditions": conditions, "acceptedNames": accepted, "storedVersions": stored}
