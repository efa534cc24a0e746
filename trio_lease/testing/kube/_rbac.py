"""Authentication (bearer tokens) and RBAC authorization.

Tokens map to users (:class:`User`). A request with no ``Authorization`` header is anonymous:
when the emulator has ``require_auth=False`` (the default for in-process tests) anonymous
requests act as a cluster admin, otherwise they get 401. A token that is unknown or expired is
always 401 ``Unauthorized``, as kube-apiserver answers.

Authorization reads the RBAC objects stored in the emulator (Role, RoleBinding, ClusterRole,
ClusterRoleBinding, created through the API, :meth:`KubeEmulator.apply` or
:meth:`KubeEmulator.grant`), so applying ``lease.yml`` really grants what it says. Members of
the group ``system:masters`` may do anything. A rule matches when verb, API group and resource
each match (``*`` matches all) and ``resourceNames`` is empty or names the object
(``rbac.ResourceNameMatches`` in ``plugin/pkg/auth/authorizer/rbac``). The request's name is
the one in the URL, and for a list or watch the value of a ``metadata.name=`` field selector
(``endpoints/request/requestinfo.go``): so ``resourceNames`` allows a list or watch narrowed
to one of its names, and never ``create`` or an unnarrowed list (their name is empty). The
denial message is the one
``responsewriters.forbiddenMessage`` writes:
``User "u" cannot update resource "leases" in API group "coordination.k8s.io" in the namespace
"jobs"`` (or ``at the cluster scope``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from ._status import JSON

__all__ = ["User", "forbidden_reason", "is_allowed"]


@dataclasses.dataclass(frozen=True)
class User:
    """An authenticated identity; ``expires_at`` is on :func:`anyio.current_time`'s clock."""

    name: str
    groups: tuple[str, ...] = ()
    expires_at: float | None = None

    def __repr__(self) -> str:  # never shows the token it came from
        return f"User(name={self.name!r}, groups={self.groups!r})"


ADMIN = User("system:admin", ("system:masters", "system:authenticated"))


def service_account_user(namespace: str, name: str) -> User:
    """The user a service-account token authenticates as, with its implicit groups."""
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )


def _subject_matches(subject: JSON, user: User, binding_namespace: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return bool(subject.get("name") == user.name)
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{namespace}:{subject.get('name')}"
    return False


def _rule_allows(rule: JSON, verb: str, group: str, resource: str, name: str) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    if not (has("verbs", verb) and has("apiGroups", group) and has("resources", resource)):
        return False
    names = rule.get("resourceNames") or []
    return not names or name in names


def is_allowed(
    user: User,
    verb: str,
    group: str,
    resource: str,
    namespace: str,
    name: str,
    lookup: Callable[[str, str], Iterable[JSON]],
) -> bool:
    """True if RBAC objects from ``lookup(plural, namespace)`` allow the request."""
    if "system:masters" in user.groups:
        return True

    def rules_of(ref: JSON, binding_namespace: str) -> list[JSON]:
        plural = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
        scope = "" if plural == "clusterroles" else binding_namespace
        for role in lookup(plural, scope):
            if role["metadata"]["name"] == ref.get("name"):
                return list(role.get("rules") or [])
        return []

    bindings: list[tuple[JSON, str]] = [(b, "") for b in lookup("clusterrolebindings", "")]
    if namespace:
        bindings += [(b, namespace) for b in lookup("rolebindings", namespace)]
    for binding, binding_namespace in bindings:
        subjects = binding.get("subjects") or []
        if not any(_subject_matches(s, user, binding_namespace) for s in subjects):
            continue
        for rule in rules_of(binding.get("roleRef") or {}, binding_namespace):
            if _rule_allows(rule, verb, group, resource, name):
                return True
    return False


def forbidden_reason(user: User, verb: str, group: str, resource: str, namespace: str) -> str:
    """``forbiddenMessage`` of the apiserver's response writers."""
    where = f"in the namespace {_q(namespace)}" if namespace else "at the cluster scope"
    return (
        f"User {_q(user.name)} cannot {verb} resource {_q(resource)} in API group {_q(group)} "
        f"{where}"
    )


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
