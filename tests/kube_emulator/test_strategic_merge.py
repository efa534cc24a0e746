"""Strategic merge patch list semantics on a Lease's metadata, over a real socket and kubectl.

Follows staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go (``mergeMap``,
``mergeSlice``, ``deduplicateScalars``, the ``$patch`` and ``$deleteFromPrimitiveList``
directives with the server's ``MergeParallelList`` options), staging/src/k8s.io/apimachinery/
pkg/apis/meta/v1/types.go (``finalizers``: ``patchStrategy:"merge"``; ``ownerReferences``:
``patchStrategy:"merge" patchMergeKey:"uid"``) and staging/src/k8s.io/apiserver/pkg/endpoints/
handlers/patch.go (``strategicPatchObject``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, lease, needs_kubectl, run_kubectl, served
from ._helpers import anyio_backend as anyio_backend

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]
SMP = {"Content-Type": "application/strategic-merge-patch+json"}
MERGE = {"Content-Type": "application/merge-patch+json"}


def _with_meta(name: str, **meta: Any) -> JSON:
    body = lease(name, holderIdentity="x")
    body["metadata"].update(meta)
    return body


async def _patch(http: httpx.AsyncClient, name: str, patch: JSON,
                 headers: dict[str, str] = SMP) -> httpx.Response:
    return await http.patch(f"{LEASES}/{name}", content=json.dumps(patch), headers=headers)


async def test_finalizers_merge_as_a_set_and_primitive_deletes() -> None:
    """finalizers [a, b] + [c, b, d] is [a, b, c, d] (merge patch: replaced);
    $deleteFromPrimitiveList/finalizers removes values."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        await http.post(LEASES, json=_with_meta("s", finalizers=["x.io/a", "x.io/b"]))
        await http.post(LEASES, json=_with_meta("m", finalizers=["x.io/a", "x.io/b"]))
        merged = await _patch(http, "s", {"metadata": {"finalizers": ["x.io/c", "x.io/b",
                                                                      "x.io/d"]}})
        replaced = await _patch(http, "m", {"metadata": {"finalizers": ["x.io/c"]}}, MERGE)
        removed = await _patch(http, "s", {"metadata": {
            "$deleteFromPrimitiveList/finalizers": ["x.io/a", "x.io/d"],
            "$setElementOrder/finalizers": ["x.io/b", "x.io/c"],
        }})
    assert merged.json()["metadata"]["finalizers"] == ["x.io/a", "x.io/b", "x.io/c", "x.io/d"]
    assert replaced.json()["metadata"]["finalizers"] == ["x.io/c"]
    assert removed.status_code == 200, removed.text
    assert removed.json()["metadata"]["finalizers"] == ["x.io/b", "x.io/c"]


async def test_patch_directives_on_maps_and_keyed_lists() -> None:
    """$patch: replace / delete on maps; ownerReferences merge by uid, $patch: delete drops one;
    an unknown directive is the handler's 500."""
    emulator = KubeEmulator()
    one = {"apiVersion": "v1", "kind": "Namespace", "name": "a", "uid": "u-1"}
    two = {"apiVersion": "v1", "kind": "Namespace", "name": "b", "uid": "u-2"}
    async with served(emulator) as (_, http):
        await http.post(LEASES, json=_with_meta(
            "d", labels={"keep": "no", "team": "a"}, annotations={"note": "x"},
            ownerReferences=[one],
        ))
        replaced = await _patch(http, "d", {"metadata": {
            "labels": {"$patch": "replace", "team": "b"}, "annotations": {"$patch": "delete"},
        }})
        added = await _patch(http, "d", {"metadata": {"ownerReferences": [
            two, {"uid": "u-1", "blockOwnerDeletion": True},
        ]}})
        dropped = await _patch(http, "d", {"metadata": {"ownerReferences": [
            {"uid": "u-2", "$patch": "delete"},
        ]}})
        bogus = await _patch(http, "d", {"metadata": {"labels": {"$patch": "bogus", "a": "b"}}})
    meta = replaced.json()["metadata"]
    assert meta["labels"] == {"team": "b"}
    assert "annotations" not in meta
    assert added.json()["metadata"]["ownerReferences"] == [{**one, "blockOwnerDeletion": True},
                                                          two]
    assert dropped.json()["metadata"]["ownerReferences"] == [{**one, "blockOwnerDeletion": True}]
    assert bogus.status_code == 500
    assert bogus.json()["message"] == "unknown patch type: bogus in map: map[$patch:bogus a:b]"


@needs_kubectl
async def test_kubectl_patch_merges_finalizers(tmp_path: Path) -> None:
    """kubectl patch (strategic by default) adds to a Lease's finalizers rather than replacing."""
    emulator = KubeEmulator()
    emulator.add_token("admin-token", "admin", ("system:masters",))
    emulator.apply(_with_meta("k", finalizers=["x.io/a"]))
    async with served(emulator) as (server, _):
        config = server.write_kubeconfig(tmp_path / "config", token="admin-token")
        patched = await run_kubectl(config, "patch", "lease", "k", "-p",
                                    '{"metadata": {"finalizers": ["x.io/b"]}}')
        shown = await run_kubectl(config, "get", "lease", "k", "-o",
                                  "jsonpath={.metadata.finalizers}")
    assert patched.stdout.strip() == "lease.coordination.k8s.io/k patched", patched.stderr
    assert json.loads(shown.stdout) == ["x.io/a", "x.io/b"]
    assert [r.headers.get("content-type") for r in emulator.requests if r.method == "PATCH"] == [
        "application/strategic-merge-patch+json"
    ]
