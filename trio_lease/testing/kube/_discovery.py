"""Discovery documents (``/api``, ``/apis``, ``/apis/{group}/{version}``, ``/version``).

kubectl reads these to map ``kubectl get leases`` to a URL and to learn that a CRD's kind is
served. The shapes are the aggregated-discovery-free legacy ones (``APIVersions``,
``APIGroupList``, ``APIGroup``, ``APIResourceList``), which every client still accepts when the
server does not offer ``application/json;g=apidiscovery.k8s.io``.
"""

from __future__ import annotations

from ._cluster import Cluster
from ._reviews import REVIEW_GROUPS
from ._status import JSON, ApiError

__all__ = ["discovery", "not_served"]


VERSION_INFO: JSON = {
    "major": "1",
    "minor": "32",
    "emulationMajor": "1",
    "emulationMinor": "32",
    "gitVersion": "v1.32.0-trio-lease-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


#: Built-in groups come first, in the apiserver's priority order; CRD groups follow, sorted.
#: kubectl resolves an ambiguous plural (``leases``) to the first group that serves it, so
#: ``kubectl get leases`` means coordination.k8s.io even when akka.io leases exist.
_BUILTIN_ORDER = ("rbac.authorization.k8s.io", "apiextensions.k8s.io", "coordination.k8s.io")


def _group_key(group: str) -> tuple[int, str]:
    if group in _BUILTIN_ORDER:
        return (_BUILTIN_ORDER.index(group), "")
    return (len(_BUILTIN_ORDER), group)


def _group_entry(group: str, versions: list[str]) -> JSON:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def discovery(emulator: Cluster, parts: list[str]) -> JSON | None:
    """The discovery document at ``parts`` (the path split on ``/``), or None."""
    if len(parts) == 1:
        return _root_document(emulator, parts[0])
    groups = _served_groups(emulator)
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups:
        entry = _group_entry(parts[1], groups[parts[1]])
        return {"kind": "APIGroup", "apiVersion": "v1", **entry}
    if parts == ["api", "v1"]:
        return _resource_list(emulator, "", "v1")
    if len(parts) == 3 and parts[0] == "apis":
        return _resource_list(emulator, parts[1], parts[2])
    return None


def _root_document(emulator: Cluster, root: str) -> JSON | None:
    """``/version``, ``/api`` (its versions) or ``/apis`` (every group); None for another."""
    if root == "version":
        return VERSION_INFO
    if root == "api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
        }
    if root == "apis":
        groups = _served_groups(emulator)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                _group_entry(g, groups[g]) for g in sorted(groups, key=_group_key)
            ],
        }
    return None


def _served_groups(emulator: Cluster) -> dict[str, list[str]]:
    """Every named API group served, with its versions: the types' and the reviews'."""
    groups: dict[str, list[str]] = {}
    for group, version, _ in emulator.types:
        if group and version not in groups.setdefault(group, []):
            groups[group].append(version)
    for group, versions in REVIEW_GROUPS.items():
        groups.setdefault(group, list(versions))
    return groups


def _resource_list(emulator: Cluster, group: str, version: str) -> JSON | None:
    """The ``APIResourceList`` of one group version; None where it serves nothing."""
    resources = [
        rt.discovery()
        for (g, v, _), rt in sorted(emulator.types.items())
        if (g, v) == (group, version)
    ]
    resources += REVIEW_GROUPS.get(group, {}).get(version, [])
    if not resources:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def not_served(emulator: Cluster, parts: list[str]) -> ApiError:
    """The 404 for a path that no handler serves.

    Paths under ``/api`` or a built-in group's ``/apis/<group>`` belong to go-restful web
    services, whose service error handler writes a Status ("the server could not find the
    requested resource", empty details). Anything else (a group with no CRD, a CRD that is not
    established yet, a version it does not serve) falls through the custom-resource handler to
    the not-found handler (``apiserver/pkg/util/notfoundhandler``), which up to the releases the
    emulator stands for writes Go's ``http.NotFound``: ``text/plain`` ``404 page not found``.
    """
    builtin = {rt.group for rt in emulator.types.values() if not rt.custom} | set(REVIEW_GROUPS)
    if parts[:1] == ["api"] or (len(parts) >= 2 and parts[0] == "apis" and parts[1] in builtin):
        return ApiError.no_route()
    return ApiError.page_not_found()
