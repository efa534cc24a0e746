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

from ._http import Request
from ._rbac import User, forbidden_reason, is_allowed
from ._status import JSON, ApiError

__all__ = ["impersonate"]

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
    if not name:
        if groups or extras or uids:
            raise _without_user(groups, extras, uids)
        return requestor
    for resource, group, namespace, target in _checks(name, groups, extras, uids):
        if not is_allowed(requestor, "impersonate", group, resource, namespace, target, lookup):
            reason = forbidden_reason(requestor, "impersonate", group, resource, namespace)
            raise ApiError.forbidden(resource.split("/")[0], group, target, reason)
    return User(name, tuple(_acting_groups(name, groups)))


def _without_user(
    groups: list[str], extras: list[tuple[str, str]], uids: list[str]
) -> ApiError:
    """The 500 for impersonation headers without ``Impersonate-User``, naming those sent."""
    asked = ", ".join(
        ["Impersonate-Group"] * bool(groups) + ["Impersonate-Extra-*"] * bool(extras)
        + ["Impersonate-Uid"] * bool(uids)
    )
    return ApiError.internal(f"requested {asked} without impersonating a user")


def _service_account(name: str) -> list[str] | None:
    """``system:serviceaccount:<namespace>:<name>`` split in four; None for another user."""
    parts = name.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return parts
    return None


def _checks(
    name: str, groups: list[str], extras: list[tuple[str, str]], uids: list[str]
) -> list[tuple[str, str, str, str]]:
    """(resource, API group, namespace, name) of every impersonation, in the filter's order."""
    account = _service_account(name)
    checks = [
        ("serviceaccounts", "", account[2], account[3]) if account else ("users", "", "", name)
    ]
    checks += [("groups", "", "", group) for group in groups]
    checks += [(f"userextras/{key}", _AUTHN, "", value) for key, value in extras]
    checks += [("uids", _AUTHN, "", uid) for uid in uids[:1]]
    return checks


def _acting_groups(name: str, groups: list[str]) -> list[str]:
    """The groups the impersonated user acts in: those asked for, or a service account's,
    with ``system:authenticated`` (or ``system:unauthenticated`` for anonymous) added."""
    acting = list(groups)
    account = _service_account(name)
    if account and not groups:
        acting = ["system:serviceaccounts", f"system:serviceaccounts:{account[2]}"]
    if name != "system:anonymous":
        if not {"system:authenticated", "system:unauthenticated"} & set(acting):
            acting.append("system:authenticated")
    elif "system:unauthenticated" not in acting:
        acting.append("system:unauthenticated")
    return acting
