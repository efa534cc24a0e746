"""Deletion with finalizers and the garbage collector (``ownerReferences``).

A DELETE (``registry/generic/registry/store.go`` ``Delete``) of an object with
``metadata.finalizers`` does not remove it: it sets ``deletionTimestamp`` and
``deletionGracePeriodSeconds: 0`` (MODIFIED) and answers 200 with the object. Updates may then
only remove finalizers (``ValidateNoNewFinalizers``); the update that removes the last one
deletes the object (``shouldDeleteDuringUpdate``). The propagation policy
(``DeleteOptions.propagationPolicy``, kubectl's ``--cascade``) decides the dependents, found by
the owner's uid in their ``ownerReferences`` (``pkg/controller/garbagecollector``):

- ``Background`` (the default): the owner goes; then each dependent whose owners are all gone
  is deleted (itself in the background), and one that still has an owner loses only the
  references to the ones that are gone.
- ``Orphan``: the dependents lose their reference to the owner and stay.
- ``Foreground``: the owner gets the ``foregroundDeletion`` finalizer and a deletion
  timestamp, its dependents are deleted, then the finalizer is removed.

The collector runs at once, inside the request that removed the owner (the real one runs a
moment later), and a foreground owner does not wait for dependents that have finalizers of
their own.
"""

from __future__ import annotations

import copy
from typing import Any

from ._cluster import Cluster
from ._resources import ResourceType
from ._status import JSON

__all__ = ["collect_garbage", "delete"]


def delete(cluster: Cluster, rt: ResourceType, namespace: str, name: str, options: JSON
           ) -> tuple[JSON, bool]:
    """DELETE one object by ``options``' policy: (the object, whether it is gone now)."""
    store = cluster.store
    existing = store.find(rt, namespace, name)
    policy = options.get("propagationPolicy") or (
        "Orphan" if options.get("orphanDependents") is True else "Background"
    )
    if existing is not None and not store.dry_run:
        store.check_preconditions(rt, name, existing, options)
        if policy == "Orphan":
            _orphan(cluster, rt, existing)
        elif policy == "Foreground" and _dependents(cluster, rt, existing):
            store.mark_deleted(rt, namespace, name, "foregroundDeletion")
            uid = existing["metadata"]["uid"]
            for dep_rt, dep in _dependents(cluster, rt, existing):
                _delete_one(cluster, dep_rt, dep)
            return _remove_finalizer(cluster, rt, namespace, name, uid), False
    if existing is not None and existing["metadata"].get("finalizers"):
        store.check_preconditions(rt, name, existing, options)
        return store.mark_deleted(rt, namespace, name), False
    obj = store.delete(rt, namespace, name, options)
    collect_garbage(cluster)
    return obj, True


def collect_garbage(cluster: Cluster) -> None:
    """Collect the dependents of every object removed since the last call."""
    store = cluster.store
    if not store.removed:
        return
    # One pass over the store finds every uid some object names as its owner: the objects
    # removed that nobody names (nearly all) need no search for dependents.
    referenced = _referenced_owners(cluster)
    while store.removed:
        owner_rt, owner = store.removed.pop(0)
        if owner["metadata"]["uid"] not in referenced:
            continue
        for dep_rt, dep in _dependents(cluster, owner_rt, owner):
            _collect(cluster, dep_rt, dep)


def _referenced_owners(cluster: Cluster) -> set[Any]:
    """Every uid some stored object names as an owner."""
    return {
        ref.get("uid") for rt in _types(cluster) for obj in cluster.store.stored(rt, None)
        for ref in _owner_refs(obj) if isinstance(ref, dict)
    }


def _owner_refs(obj: JSON) -> list[Any]:
    return obj["metadata"].get("ownerReferences") or []


def _collect(cluster: Cluster, rt: ResourceType, dependent: JSON) -> None:
    """A dependent whose owner went: deleted once no owner of it is left, else its
    references to the owners that are gone removed."""
    refs = _owner_refs(dependent)
    dangling = [r for r in refs if not _owner_exists(cluster, r, dependent)]
    if len(dangling) == len(refs):
        _delete_one(cluster, rt, dependent)
    else:
        _set_refs(cluster, rt, dependent, [r for r in refs if r not in dangling])


def _types(cluster: Cluster) -> list[ResourceType]:
    owners = [rt for rt in cluster.types.values() if rt.stored_as is None]  # not views
    return list({rt.storage_key: rt for rt in owners}.values())


def _dependents(cluster: Cluster, owner_rt: ResourceType, owner: JSON
                ) -> list[tuple[ResourceType, JSON]]:
    uid = owner["metadata"]["uid"]
    scope = owner["metadata"].get("namespace") if owner_rt.namespaced else None
    found = []
    for rt in _types(cluster):
        if owner_rt.namespaced and not rt.namespaced:
            continue
        for obj in cluster.store.stored(rt, scope if rt.namespaced else None):
            if any(isinstance(r, dict) and r.get("uid") == uid for r in _owner_refs(obj)):
                found.append((rt, obj))
    return found


def _owner_exists(cluster: Cluster, ref: Any, dependent: JSON) -> bool:
    """Whether the reference's owner exists (an unknown kind counts as existing: the
    collector cannot tell, so it leaves the dependent alone)."""
    if not isinstance(ref, dict):
        return True
    group, _, _ = str(ref.get("apiVersion", "")).rpartition("/")
    types = [rt for rt in _types(cluster) if (rt.group, rt.kind) == (group, ref.get("kind"))]
    if not types:
        return True
    rt = types[0]
    namespace = dependent["metadata"].get("namespace", "") if rt.namespaced else ""
    obj = cluster.store.find(rt, namespace, str(ref.get("name", "")))
    return obj is not None and obj["metadata"]["uid"] == ref.get("uid")


def _delete_one(cluster: Cluster, rt: ResourceType, obj: JSON) -> None:
    meta = obj["metadata"]
    namespace, name = meta.get("namespace", ""), meta["name"]
    if cluster.store.find(rt, namespace, name) is None:
        return
    if meta.get("finalizers"):
        cluster.store.mark_deleted(rt, namespace, name)
    else:
        cluster.store.delete(rt, namespace, name, {})
        collect_garbage(cluster)


def _orphan(cluster: Cluster, rt: ResourceType, owner: JSON) -> None:
    uid = owner["metadata"]["uid"]
    for dep_rt, dep in _dependents(cluster, rt, owner):
        refs = dep["metadata"].get("ownerReferences") or []
        _set_refs(cluster, dep_rt, dep, [r for r in refs if r.get("uid") != uid])


def _set_refs(cluster: Cluster, rt: ResourceType, obj: JSON, refs: list[Any]) -> None:
    meta = obj["metadata"]
    changed = copy.deepcopy(obj)
    if refs:
        changed["metadata"]["ownerReferences"] = refs
    else:
        changed["metadata"].pop("ownerReferences", None)
    cluster.store.rewrite(rt, meta.get("namespace", ""), meta["name"], changed)


def _remove_finalizer(cluster: Cluster, rt: ResourceType, namespace: str, name: str,
                      uid: str) -> JSON:
    store = cluster.store
    current = store.find(rt, namespace, name)
    if current is None or current["metadata"]["uid"] != uid:
        return {}
    changed = copy.deepcopy(current)
    finalizers = [f for f in changed["metadata"].get("finalizers") or []
                  if f != "foregroundDeletion"]
    changed["metadata"]["finalizers"] = finalizers
    if not finalizers:
        changed["metadata"].pop("finalizers")
    store.rewrite(rt, namespace, name, changed)
    if not finalizers:
        store.delete(rt, namespace, name, {})
        collect_garbage(cluster)
    return store.present(rt, changed)
