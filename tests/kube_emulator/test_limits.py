"""Size and syntax limits over a real socket: labels, annotations, the body and the object.

Follows staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go
(``ValidateAnnotations``: 256 KiB in total, ``TotalAnnotationSizeLimitB``),
staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go (``ValidateLabels``),
staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go (``IsQualifiedName``,
``IsValidLabelValue``), staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go
(``limitedReadBody``: 413 past 3 MiB) and etcd's ``--max-request-bytes`` (1.5 MiB), whose
error the apiserver passes on as a 500 (staging/src/k8s.io/apiserver/pkg/storage/etcd3/
store.go).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, lease, needs_kubectl, run_kubectl, served
from ._helpers import anyio_backend as anyio_backend

pytestmark = pytest.mark.anyio

LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _with_meta(name: str, **meta: object) -> dict[str, object]:
    body = lease(name, holderIdentity="a")
    body["metadata"].update(meta)
    return body


async def test_label_values_and_keys_are_validated() -> None:
    """A label value over 63 characters or with a bad character, and a bad key, are 422."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        ok = await http.post(LEASES, json=_with_meta("ok", labels={"a.io/team": "x" * 63}))
        long = await http.post(LEASES, json=_with_meta("long", labels={"team": "x" * 64}))
        bad_key = await http.post(LEASES, json=_with_meta("key", labels={"-team": "a"}))
        bad_value = await http.post(LEASES, json=_with_meta("val", labels={"team": "a b"}))
    assert ok.status_code == 201
    assert long.status_code == 422
    assert long.json()["message"] == (
        f'Lease.coordination.k8s.io "long" is invalid: metadata.labels: Invalid value: '
        f'"{"x" * 64}": must be no more than 63 characters'
    )
    assert long.json()["details"]["causes"] == [{
        "reason": "FieldValueInvalid",
        "message": f'Invalid value: "{"x" * 64}": must be no more than 63 characters',
        "field": "metadata.labels",
    }]
    assert bad_key.json()["message"] == (
        'Lease.coordination.k8s.io "key" is invalid: metadata.labels: Invalid value: "-team": '
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
        "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
        "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    )
    assert bad_value.json()["message"] == (
        f'Lease.coordination.k8s.io "val" is invalid: metadata.labels: Invalid value: "a b": '
        f"{LABEL_VALUE_MSG}"
    )
    assert emulator.get_lease("long") is None


async def test_annotations_are_limited_to_256_kib_in_total() -> None:
    """Annotations over 262144 bytes (keys and values) are 422 TooLong, on create and update."""
    emulator = KubeEmulator()
    limit = 256 * 1024
    async with served(emulator) as (_, http):
        at_limit = await http.post(LEASES, json=_with_meta(
            "full", annotations={"a": "x" * (limit - 1)}
        ))
        over = await http.post(LEASES, json=_with_meta(
            "over", annotations={"a": "x" * limit}
        ))
        body = at_limit.json()
        body["metadata"]["annotations"]["b"] = "y"
        grown = await http.put(f"{LEASES}/full", json=body)
    assert at_limit.status_code == 201
    message = "metadata.annotations: Too long: must have at most 262144 bytes"
    assert over.status_code == 422
    assert over.json()["message"] == f'Lease.coordination.k8s.io "over" is invalid: {message}'
    assert over.json()["details"]["causes"] == [{
        "reason": "FieldValueTooLong", "message": "Too long: must have at most 262144 bytes",
        "field": "metadata.annotations",
    }]
    assert grown.status_code == 422
    assert grown.json()["message"] == f'Lease.coordination.k8s.io "full" is invalid: {message}'


async def test_a_body_over_3_mib_is_413_and_the_connection_stays_usable() -> None:
    """A 4 MiB body gets 413 RequestEntityTooLarge (not a closed connection)."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        huge = await http.post(LEASES, json=lease("huge", holderIdentity="x" * (4 << 20)))
        after = await http.get(LEASES)
    assert huge.status_code == 413
    assert huge.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Request entity too large: limit is 3145728",
        "reason": "RequestEntityTooLarge", "code": 413,
    }
    assert after.status_code == 200
    assert emulator.get_lease("huge") is None


async def test_an_object_over_etcds_limit_is_500_request_too_large() -> None:
    """A 2 MiB object passes the body limit and is refused by etcd: 500, no reason."""
    emulator = KubeEmulator()
    async with served(emulator) as (_, http):
        big = await http.post(LEASES, json=lease("big", holderIdentity="x" * (2 << 20)))
        dry = await http.post(LEASES, json=lease("big", holderIdentity="x" * (2 << 20)),
                              params={"dryRun": "All"})
        small = (await http.post(LEASES, json=lease("small", holderIdentity="a"))).json()
        small["spec"]["holderIdentity"] = "x" * (1600 * 1024)
        grown = await http.put(f"{LEASES}/small", json=small)
    assert big.status_code == 500
    assert big.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "etcdserver: request is too large", "code": 500,
    }
    assert emulator.get_lease("big") is None
    assert dry.status_code == 201  # a dry run never reaches etcd
    assert grown.status_code == 500
    stored = emulator.get_lease("small")
    assert stored is not None
    assert stored["spec"]["holderIdentity"] == "a"


@needs_kubectl
async def test_kubectl_create_with_a_long_label_prints_the_servers_422(tmp_path: Path) -> None:
    """kubectl create -f with a 64-character label value prints the server's 422."""
    emulator = KubeEmulator()
    emulator.add_token("admin-token", "admin", ("system:masters",))
    manifest = (
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: l\n"
        "  labels:\n    team: {value}\nspec:\n  holderIdentity: a\n"
    )
    async with served(emulator) as (server, _):
        config = server.write_kubeconfig(tmp_path / "config", token="admin-token")
        refused = await run_kubectl(config, "create", "-f", "-",
                                    stdin=manifest.format(value="x" * 64))
        fine = await run_kubectl(config, "create", "-f", "-",
                                 stdin=manifest.format(value="x" * 63))
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f'The Lease "l" is invalid: metadata.labels: Invalid value: "{"x" * 64}": must be no '
        "more than 63 characters"
    )
    assert fine.stdout.strip() == "lease.coordination.k8s.io/l created"
