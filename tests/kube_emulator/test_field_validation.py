"""Field validation of custom resources (and Leases) over a real socket, with kubectl.

Follows staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go and update.go
(``fieldValidation``: Strict fails, Warn adds a ``Warning`` per field, Ignore drops silently;
``transformDecodeError`` wraps the strict error), staging/src/k8s.io/apiextensions-apiserver/
pkg/apiserver/customresource_handler.go (unknown fields are pruned by the structural schema
and reported as strict errors) and sigs.k8s.io/json (``duplicate field "spec.owner"``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import (
    AKKA,
    LEASE_YML,
    LEASES,
    lease,
    needs_kubectl,
    run_kubectl,
    served,
    with_akka_crd,
)
from ._helpers import anyio_backend as anyio_backend

pytestmark = pytest.mark.anyio

STRICT = 'Lease in version "v1" cannot be handled as a Lease: strict decoding error: '


def _akka(name: str, **spec: object) -> dict[str, object]:
    return {"apiVersion": "akka.io/v1", "kind": "Lease", "metadata": {"name": name},
            "spec": spec}


async def test_unknown_custom_resource_fields_by_field_validation() -> None:
    """spec.bogus: Strict 400; Warn (the default) pruned with a Warning; Ignore pruned."""
    emulator = with_akka_crd()
    async with served(emulator) as (_, http):
        strict = await http.post(AKKA, json=_akka("s", owner="me", bogus=1),
                                 params={"fieldValidation": "Strict"})
        warned = await http.post(AKKA, json=_akka("w", owner="me", bogus=1))
        ignored = await http.post(AKKA, json=_akka("i", owner="me", bogus=1),
                                  params={"fieldValidation": "Ignore"})
        body = warned.json()
        body["spec"]["extra"] = {"deep": True}
        updated = await http.put(f"{AKKA}/w", json=body, params={"fieldValidation": "Strict"})
    assert strict.status_code == 400
    assert strict.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": STRICT + 'unknown field "spec.bogus"', "reason": "BadRequest", "code": 400,
    }
    assert emulator.get("akka.io/v1", "leases", "s", "default") is None
    assert warned.status_code == 201
    assert warned.json()["spec"] == {"owner": "me"}
    assert warned.headers.get_list("warning") == ['299 - "unknown field \\"spec.bogus\\""']
    assert ignored.status_code == 201
    assert ignored.json()["spec"] == {"owner": "me"}
    assert "warning" not in ignored.headers
    assert updated.status_code == 400
    assert updated.json()["message"] == STRICT + 'unknown field "spec.extra"'


async def test_duplicate_json_fields() -> None:
    """A repeated field is a strict error (400) under Strict and a warning under Warn, where
    the last value wins; for a Lease as for a custom resource."""
    emulator = with_akka_crd()
    raw = (b'{"apiVersion":"akka.io/v1","kind":"Lease","metadata":{"name":"%s"},'
           b'"spec":{"owner":"a","owner":"b","bogus":1}}')
    headers = {"Content-Type": "application/json"}
    async with served(emulator) as (_, http):
        strict = await http.post(AKKA, content=raw % b"s", headers=headers,
                                 params={"fieldValidation": "Strict"})
        warned = await http.post(AKKA, content=raw % b"w", headers=headers)
        built_in = await http.post(
            LEASES, headers=headers, params={"fieldValidation": "Strict"},
            content=json.dumps(lease("x", holderIdentity="a"))[:-2].encode()
            + b', "holderIdentity": "b", "bogus": 1}}',
        )
    assert strict.status_code == 400
    assert strict.json()["message"] == (
        STRICT + 'duplicate field "spec.owner", unknown field "spec.bogus"'
    )
    assert warned.status_code == 201
    assert warned.json()["spec"] == {"owner": "b"}
    assert warned.headers.get_list("warning") == [
        '299 - "duplicate field \\"spec.owner\\""', '299 - "unknown field \\"spec.bogus\\""',
    ]
    assert built_in.status_code == 400
    assert built_in.json()["message"] == (
        STRICT + 'duplicate field "spec.holderIdentity", unknown field "spec.bogus"'
    )


@needs_kubectl
async def test_kubectl_apply_refuses_an_unknown_custom_resource_field(tmp_path: Path) -> None:
    """kubectl apply sends fieldValidation=Strict: the server's strict decoding error."""
    emulator = KubeEmulator()
    emulator.add_token("admin-token", "admin", ("system:masters",))
    emulator.apply(LEASE_YML.read_text())
    manifest = "apiVersion: akka.io/v1\nkind: Lease\nmetadata:\n  name: k\nspec:\n  bogus: 1\n"
    async with served(emulator) as (server, _):
        config = server.write_kubeconfig(tmp_path / "config", token="admin-token")
        refused = await run_kubectl(config, "apply", "-f", "-", stdin=manifest)
        warned = await run_kubectl(config, "apply", "--validate=warn", "-f", "-", stdin=manifest)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        'Error from server (BadRequest): error when creating "STDIN": ' + STRICT
        + 'unknown field "spec.bogus"'
    )
    assert warned.returncode == 0, warned.stderr
    assert 'Warning: unknown field "spec.bogus"' in warned.stderr
    stored = emulator.get("akka.io/v1", "leases", "k", "default")
    assert stored is not None
    assert "bogus" not in stored.get("spec", {})
