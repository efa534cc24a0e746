"""OpenAPI schemas over a real socket: kubectl explain on both Lease kinds, and /openapi/v2.

Follows staging/src/k8s.io/kubectl/pkg/explain/v2 (kubectl explain reads /openapi/v3 and finds
the kind by ``x-kubernetes-group-version-kind``), staging/src/k8s.io/api/coordination/v1/
types.go (the Lease's field comments) and staging/src/k8s.io/apiextensions-apiserver/pkg/
controller/openapi/builder/builder.go (a CRD's schema with apiVersion, kind and metadata).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASE_YML, needs_kubectl, run_kubectl, served, with_akka_crd
from ._helpers import anyio_backend as anyio_backend

pytestmark = pytest.mark.anyio


async def test_openapi_documents_carry_the_lease_schemas() -> None:
    """/openapi/v3/apis/coordination.k8s.io/v1 and /openapi/v2 hold the Lease by its GVK."""
    emulator = with_akka_crd()
    async with served(emulator) as (_, http):
        v3 = (await http.get("/openapi/v3/apis/coordination.k8s.io/v1")).json()
        akka = (await http.get("/openapi/v3/apis/akka.io/v1")).json()
        v2 = (await http.get("/openapi/v2")).json()
    lease = v3["components"]["schemas"]["io.k8s.api.coordination.v1.Lease"]
    assert lease["x-kubernetes-group-version-kind"] == [
        {"group": "coordination.k8s.io", "kind": "Lease", "version": "v1"}
    ]
    assert lease["properties"]["spec"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.api.coordination.v1.LeaseSpec"}
    ]
    custom = akka["components"]["schemas"]["io.akka.v1.Lease"]
    assert sorted(custom["properties"]) == ["apiVersion", "kind", "metadata", "spec"]
    assert sorted(custom["properties"]["spec"]["properties"]) == ["owner", "time", "version"]
    assert v2["swagger"] == "2.0"
    spec = v2["definitions"]["io.k8s.api.coordination.v1.LeaseSpec"]
    assert spec["properties"]["renewTime"]["allOf"] == [
        {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"}
    ]


@needs_kubectl
async def test_kubectl_explain_lease_and_the_akka_lease(tmp_path: Path) -> None:
    """kubectl explain lease / lease.spec.holderIdentity / leases.akka.io.spec print fields."""
    emulator = KubeEmulator()
    emulator.add_token("admin-token", "admin", ("system:masters",))
    emulator.apply(LEASE_YML.read_text())
    async with served(emulator) as (server, _):
        config = server.write_kubeconfig(tmp_path / "config", token="admin-token")
        lease = await run_kubectl(config, "explain", "lease")
        holder = await run_kubectl(config, "explain", "lease.spec.holderIdentity")
        akka = await run_kubectl(config, "explain", "leases.akka.io.spec")
    assert lease.returncode == 0, lease.stderr
    lines = lease.stdout.splitlines()
    assert lines[:3] == ["GROUP:      coordination.k8s.io", "KIND:       Lease",
                         "VERSION:    v1"]
    assert "    Lease defines a lease concept." in lines
    fields = [line.split("\t")[0].strip() for line in lines if "\t<" in line]
    assert fields == ["apiVersion", "kind", "metadata", "spec"]
    assert "FIELD: holderIdentity <string>" in holder.stdout, holder.stderr
    assert "holderIdentity contains the identity of the holder" in holder.stdout
    assert akka.returncode == 0, akka.stderr
    assert akka.stdout.splitlines()[:3] == ["GROUP:      akka.io", "KIND:       Lease",
                                            "VERSION:    v1"]
    assert [line.split("\t")[0].strip() for line in akka.stdout.splitlines()
            if "\t<" in line] == ["owner", "time", "version"]
