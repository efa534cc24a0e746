"""SelfSubjectAccessReview, SelfSubjectRulesReview and SelfSubjectReview: "may I?", "what may
I?" and "who am I?".

``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`` answers a
``SelfSubjectAccessReview`` with the emulator's RBAC decision for the requesting user, as
``pkg/registry/authorization/selfsubjectaccessreview/rest.go`` does: exactly one of
``spec.resourceAttributes`` and ``spec.nonResourceAttributes`` (else 422 with the texts of
``pkg/apis/authorization/validation/validation.go``), then ``status.allowed`` (and
``status.denied: false``: RBAC never denies, it only fails to allow). Resource attributes are
checked as a request would be (verb, group, resource[/subresource], namespace, name);
non-resource attributes against the ``nonResourceURLs`` of the user's ClusterRoles (``*`` and a
trailing ``*`` as in ``pkg/apis/rbac/v1/evaluation_helpers.go``).

``POST /apis/authentication.k8s.io/v1/selfsubjectreviews`` answers ``status.userInfo`` (the
user's name and groups, with ``system:authenticated`` as the authenticator's group adder adds
it), as ``pkg/registry/authentication/selfsubjectreview/rest.go`` does.

``POST /apis/authorization.k8s.io/v1/selfsubjectrulesreviews`` (``kubectl auth can-i
--list``) lists the rules the user has in ``spec.namespace`` (:func:`_rules_review`).

All are allowed to every user, as the bootstrap ClusterRole ``system:basic-user`` bound to
``system:authenticated`` allows on a real cluster; all answer 201 and store nothing.
:data:`REVIEW_GROUPS` holds their discovery entries, so ``kubectl auth can-i`` and
``kubectl auth whoami`` find them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator

from ._rbac import User, is_allowed
from ._status import JSON, ApiError, FieldError

__all__ = ["REVIEW_GROUPS", "answer_review", "is_review_path", "review_from_protobuf"]

Lookup = Callable[[str, str], Iterable[JSON]]

_SSAR = ("authorization.k8s.io", "v1", "selfsubjectaccessreviews")
_SSRR = ("authorization.k8s.io", "v1", "selfsubjectrulesreviews")
_SSR = ("authentication.k8s.io", "v1", "selfsubjectreviews")

#: Discovery entries (group -> version -> APIResource list) for the review endpoints.
REVIEW_GROUPS: dict[str, dict[str, list[JSON]]] = {
    "authentication.k8s.io": {
        "v1": [
            {
                "name": "selfsubjectreviews", "singularName": "selfsubjectreview",
                "namespaced": False, "kind": "SelfSubjectReview", "verbs": ["create"],
            }
        ]
    },
    "authorization.k8s.io": {
        "v1": [
            {
                "name": "selfsubjectaccessreviews", "singularName": "selfsubjectaccessreview",
                "namespaced": False, "kind": "SelfSubjectAccessReview", "verbs": ["create"],
            },
            {
                "name": "selfsubjectrulesreviews", "singularName": "selfsubjectrulesreview",
                "namespaced": False, "kind": "SelfSubjectRulesReview", "verbs": ["create"],
            },
        ]
    },
}


def is_review_path(parts: list[str]) -> bool:
    """True for the two review endpoints (``parts`` is the path split on ``/``)."""
    return len(parts) == 4 and parts[0] == "apis" and tuple(parts[1:]) in (_SSAR, _SSRR, _SSR)


def answer_review(
    user: User, method: str, parts: list[str], content_type: str, data: bytes, lookup: Lookup
) -> JSON:
    """The review's answer (sent as 201); 405 for any method but POST, 400/422 for bad bodies.

    The body is JSON or, as kubectl's typed clients send it, Kubernetes protobuf.
    """
    if method != "POST":
        raise ApiError.method_not_allowed(method)
    if content_type.split(";")[0].strip() == "application/vnd.kubernetes.protobuf":
        body = review_from_protobuf(data)
    else:
        body = _from_json(data)
    group, version, plural = parts[1:]
    kind = {
        _SSR[2]: "SelfSubjectReview", _SSRR[2]: "SelfSubjectRulesReview",
    }.get(plural, "SelfSubjectAccessReview")
    _check_kind(body, f"{group}/{version}", kind)
    if kind == "SelfSubjectRulesReview":
        return _rules_review(user, body, lookup)
    if kind == "SelfSubjectReview":
        return _self_review(user, f"{group}/{version}")
    return _access_review(user, body, f"{group}/{version}", lookup)


def _self_review(user: User, api_version: str) -> JSON:
    """``SelfSubjectReview``: who the user is, ``system:authenticated`` among the groups."""
    groups = list(user.groups)
    if "system:authenticated" not in groups:
        groups.append("system:authenticated")
    return {
        "kind": "SelfSubjectReview", "apiVersion": api_version,
        "metadata": {"creationTimestamp": None},
        "status": {"userInfo": {"username": user.name, "groups": groups}},
    }


def _access_review(user: User, body: JSON, api_version: str, lookup: Lookup) -> JSON:
    """``SelfSubjectAccessReview``: whether the user may do what exactly one of its
    attributes (resource or non-resource) describes; 422 otherwise."""
    kind = "SelfSubjectAccessReview"
    spec = body.get("spec") or {}
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    errors = []
    if resource is not None and non_resource is not None:
        errors.append(FieldError(
            "spec.nonResourceAttributes", "Invalid",
            "cannot be specified in combination with resourceAttributes", non_resource,
        ))
    if resource is None and non_resource is None:
        errors.append(FieldError(
            "spec.resourceAttributes", "Invalid",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ))
    if errors:
        raise ApiError.invalid(kind, api_version.split("/")[0], "", errors)
    if resource is not None:
        allowed = _resource_allowed(user, resource, lookup)
    else:
        allowed = _non_resource_allowed(user, non_resource or {}, lookup)
    metadata = dict(body.get("metadata") or {})
    metadata.setdefault("creationTimestamp", None)
    return {
        "kind": kind, "apiVersion": api_version, "metadata": metadata,
        "spec": spec, "status": {"allowed": allowed, "denied": False},
    }


#: The bootstrap policy every authenticated user has (``plugin/pkg/auth/authorizer/rbac/
#: bootstrappolicy/policy.go``: ``system:basic-user``, ``system:discovery``,
#: ``system:public-info-viewer``), which the emulator does not store as objects.
_BASIC_RESOURCE_RULES: list[JSON] = [
    {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
     "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
    {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
     "resources": ["selfsubjectreviews"]},
]
_BASIC_NON_RESOURCE_RULES: list[JSON] = [
    {"verbs": ["get"], "nonResourceURLs": [
        "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
        "/readyz", "/version", "/version/",
    ]},
    {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version",
                                           "/version/"]},
]
#: ``cluster-admin``, bound to ``system:masters``.
_ADMIN_RULES = (
    [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
    [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
)


def _rules_review(user: User, body: JSON, lookup: Lookup) -> JSON:
    """``pkg/registry/authorization/selfsubjectrulesreview/rest.go``: the rules the user has in
    ``spec.namespace`` (400 ``no namespace on request`` without one), from the ClusterRoles
    and the namespace's Roles bound to them (``RulesFor`` of the RBAC authorizer), the
    bootstrap policy's and, for ``system:masters``, ``cluster-admin``'s."""
    spec = body.get("spec") or {}
    namespace = str(spec.get("namespace") or "")
    if not namespace:
        raise ApiError.bad_request("no namespace on request")
    resource_rules: list[JSON] = []
    non_resource_rules: list[JSON] = []
    if "system:masters" in user.groups:
        resource_rules += _ADMIN_RULES[0]
        non_resource_rules += _ADMIN_RULES[1]
    for rule in _bound_rules(user, namespace, lookup):
        if rule.get("nonResourceURLs"):
            non_resource_rules.append({"verbs": list(rule.get("verbs") or []),
                                       "nonResourceURLs": list(rule["nonResourceURLs"])})
        else:
            resource_rules.append(_resource_rule(rule))
    return {
        "kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None}, "spec": {"namespace": namespace},
        "status": {
            "resourceRules": resource_rules + _BASIC_RESOURCE_RULES,
            "nonResourceRules": non_resource_rules + _BASIC_NON_RESOURCE_RULES,
            "incomplete": False,
        },
    }


def _bound_rules(user: User, namespace: str, lookup: Lookup) -> Iterator[JSON]:
    """The rules of every role bound to the user: ClusterRoles, and the namespace's Roles."""
    bindings = [(b, "") for b in lookup("clusterrolebindings", "")]
    bindings += [(b, namespace) for b in lookup("rolebindings", namespace)]
    for binding, scope in bindings:
        if not _binds(binding, user, scope):
            continue
        ref = binding.get("roleRef") or {}
        plural = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
        for role in lookup(plural, "" if plural == "clusterroles" else scope):
            if role["metadata"]["name"] == ref.get("name"):
                yield from _rules(role)


def _rules(role: JSON | None) -> list[JSON]:
    """A role's rules; none for a role that is not there."""
    return (role or {}).get("rules") or []


def _resource_rule(rule: JSON) -> JSON:
    """A role's resource rule as a rules review lists it."""
    converted: JSON = {"verbs": list(rule.get("verbs") or []),
                       "apiGroups": list(rule.get("apiGroups") or []),
                       "resources": list(rule.get("resources") or [])}
    if rule.get("resourceNames"):
        converted["resourceNames"] = list(rule["resourceNames"])
    return converted


def _check_kind(body: JSON, api_version: str, kind: str) -> None:
    given_version, given_kind = body.get("apiVersion"), body.get("kind")
    if given_version and given_version != api_version:
        raise ApiError.bad_request(
            f"the API version in the data ({given_version}) does not match the expected API "
            f"version ({api_version})"
        )
    if given_kind and given_kind != kind:
        raise ApiError.bad_request(
            f"the object provided is unrecognized (must be of type {kind}): got kind {given_kind}"
        )


def _resource_allowed(user: User, attrs: JSON, lookup: Lookup) -> bool:
    resource = str(attrs.get("resource") or "")
    if attrs.get("subresource"):
        resource = f"{resource}/{attrs['subresource']}"
    return is_allowed(
        user, str(attrs.get("verb") or ""), str(attrs.get("group") or ""), resource,
        str(attrs.get("namespace") or ""), str(attrs.get("name") or ""), lookup,
    )


def _non_resource_allowed(user: User, attrs: JSON, lookup: Lookup) -> bool:
    if "system:masters" in user.groups:
        return True
    verb, path = str(attrs.get("verb") or ""), str(attrs.get("path") or "")
    roles = {r["metadata"]["name"]: r for r in lookup("clusterroles", "")}
    for binding in lookup("clusterrolebindings", ""):
        ref = binding.get("roleRef") or {}
        if not _binds(binding, user):
            continue
        if any(_allows_url(rule, verb, path) for rule in _rules(roles.get(ref.get("name", "")))):
            return True
    return False


def _allows_url(rule: JSON, verb: str, path: str) -> bool:
    """Whether a non-resource rule allows ``verb`` on ``path``."""
    verbs = rule.get("verbs") or []
    if "*" not in verbs and verb not in verbs:
        return False
    return any(_url_matches(url, path) for url in rule.get("nonResourceURLs") or [])


def _binds(binding: JSON, user: User, binding_namespace: str = "") -> bool:
    """Whether the user is among a binding's subjects."""
    return any(_is_subject(s, user, binding_namespace) for s in binding.get("subjects") or [])


def _is_subject(subject: JSON, user: User, binding_namespace: str = "") -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{namespace}:{name}"
    return False


def _url_matches(rule_url: str, path: str) -> bool:
    if rule_url == "*" or rule_url == path:
        return True
    return rule_url.endswith("*") and path.startswith(rule_url[:-1])


def _from_json(data: bytes) -> JSON:
    try:
        body = json.loads(data or b"{}")
    except ValueError as exc:
        raise ApiError.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError.bad_request("couldn't get version/kind; json parse error: not an object")
    return body


# --- Kubernetes protobuf (apimachinery/pkg/runtime/serializer/protobuf/protobuf.go): the magic
# "k8s\0", then runtime.Unknown {1: typeMeta {1: apiVersion, 2: kind}, 2: raw}. The review's
# fields are numbered as in staging/src/k8s.io/api/authorization/v1/generated.proto.

_MAGIC = b"k8s\x00"
_RESOURCE_FIELDS = {
    1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource", 6: "subresource",
    7: "name",
}
_NON_RESOURCE_FIELDS = {1: "path", 2: "verb"}


def _fields(data: bytes) -> dict[int, list[bytes]]:
    """The length-delimited fields of a protobuf message (varints and fixed ones skipped)."""
    out: dict[int, list[bytes]] = {}
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            if pos >= len(data):
                raise ApiError.bad_request("protobuf: truncated message")
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return result

    while pos < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            varint()
        elif wire == 2:
            size = varint()
            out.setdefault(number, []).append(data[pos:pos + size])
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ApiError.bad_request(f"protobuf: unsupported wire type {wire}")
    return out


def _strings(data: bytes, names: dict[int, str]) -> JSON:
    fields = _fields(data)
    return {name: fields[n][-1].decode() for n, name in names.items() if n in fields}


def review_from_protobuf(data: bytes) -> JSON:
    """A SelfSubjectAccessReview or SelfSubjectReview sent as Kubernetes protobuf, as JSON."""
    if not data.startswith(_MAGIC):
        raise ApiError.bad_request("provided object is not a Kubernetes protobuf message")
    unknown = _fields(data[len(_MAGIC):])
    type_meta = _strings((unknown.get(1) or [b""])[-1], {1: "apiVersion", 2: "kind"})
    raw = _fields((unknown.get(2) or [b""])[-1])
    body: JSON = dict(type_meta)
    if type_meta.get("kind") == "SelfSubjectRulesReview":
        body["spec"] = _strings((raw.get(2) or [b""])[-1], {1: "namespace"})
        return body
    if type_meta.get("kind") != "SelfSubjectAccessReview":
        return body
    spec_fields = _fields((raw.get(2) or [b""])[-1])
    spec: JSON = {}
    if 1 in spec_fields:
        spec["resourceAttributes"] = _strings(spec_fields[1][-1], _RESOURCE_FIELDS)
    if 2 in spec_fields:
        spec["nonResourceAttributes"] = _strings(spec_fields[2][-1], _NON_RESOURCE_FIELDS)
    body["spec"] = spec
    return body
