"""Impersonation: ``Impersonate-User``, ``-Group``, ``-Uid`` and ``-Extra-*`` headers.

Follows ``apiserver/pkg/endpoints/filters/impersonation.go``, which runs after authentication
and before everything else: each thing asked for is authorized for the *requesting* user with
the verb ``impersonate`` (a user: ``users`` named after it at the cluster scope; a
service-account user ``system:serviceaccount:<ns>:<name>``: ``serviceaccounts`` ``<name>`` in
``<ns>``; each group: ``groups``; each extra value: ``userextras/<key>`` and a uid: ``uids``, both
in the group ``authentication.k8s.io``). The first one refused is 403 ``Forbidden`` with
``responsewriters.Forbidden``'s message (``users "nobody" is forbidden: User "alice" cannot
impersonate resource "users" in API group "" at the cluster scope``). Allowed, the request
runs as the impersonated user: its groups are the ones asked for (a service account's own
groups when none are), plus ``system:authenticated`` unless ``system:authenticated`` or
``system:unauthenticated`` is among them (``system:unauthenticated`` for
``system:anonymous``). Groups, extras or a uid without a user are a 500 ``InternalError``
(``requested ... without impersonating a user``; the real text lists the attribute records,
the emulator names the headers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ._http import Request
from ._rbac import User, forbidden_reason, is_allowed
from ._status import ApiError

__all__ = ["impersonate"]

JSON = dict[str, Any]
_AUTHN = "authentication.k8s.io"
_EXTRA = "impersonate-extra-"


def impersonate(
    requestor: User, request: Request, lookup: Callable[[str, str], Iterable[JSON]]
) -> User:
    """The user the request acts as: ``requestor``, or whom it impersonates (403 if refused)."""
    users = request.header_values("impersonate-user")
    name = users[0] if users else ""
    groups = request.header_values("impersonate-group")
    uids = request.header_values("impersonate-uid")
    extras = [
        (key[len(_EXTRA):], value) for key, value in request.header_list
        if key.startswith(_EXTRA)
    ]
    if not name and not groups and not extras and not uids:
        return requestor
    if not name:
        asked = ", ".join(
            ["Impersonate-Group"] * bool(groups) + ["Impersonate-Extra-*"] * bool(extras)
            + ["Impersonate-Uid"] * bool(uids)
        )
        raise ApiError.internal(f"requested {asked} without impersonating a user")
    # (resource, API group, namespace, name) of every impersonation, in the filter's order.
    checks: list[tuple[str, str, str, str]] = []
    parts = name.split(":")
    service_account = len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]
    if service_account:
        checks.append(("serviceaccounts", "", parts[2], parts[3]))
    else:
        checks.append(("users", "", "", name))
    checks += [("groups", "", "", group) for group in groups]
    checks += [(f"userextras/{key}", _AUTHN, "", value) for key, value in extras]
    checks += [("uids", _AUTHN, "", uid) for uid in uids[:1]]
    for resource, group, namespace, target in checks:
        if not is_allowed(requestor, "impersonate", group, resource, namespace, target, lookup):
            reason = forbidden_reason(requestor, "impersonate", group, resource, namespace)
            raise ApiError.forbidden(resource.split("/")[0], group, target, reason)
    acting = list(groups)
    if service_account and not groups:
        acting = ["system:serviceaccounts", f"system:serviceaccounts:{parts[2]}"]
    if name != "system:anonymous":
        if not {"system:authenticated", "system:unauthenticated"} & set(acting):
            acting.append("system:authenticated")
    elif "system:unauthenticated" not in acting:
        acting.append("system:unauthenticated")
    return User(name, tuple(acting))
