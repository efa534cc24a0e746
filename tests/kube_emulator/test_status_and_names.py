"""docs/design.md §8.4 (Status bodies, reasons, field order) and §8.5 (names)."""

from __future__ import annotations

import pytest

from trio_lease.testing.kube import KubeEmulator

from ._helpers import LEASES, client, create, lease

pytestmark = pytest.mark.anyio

ORDER = ["kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code"]
SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


async def test_conflict_body_is_exact() -> None:
    """409 Conflict: the exact message, reason, details and field order of the server."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        created = await create(http, "nightly-report")
        created["spec"]["holderIdentity"] = "a"
        await http.put(f"{LEASES}/nightly-report", json=created)
        response = await http.put(f"{LEASES}/nightly-report", json=created)
    body = response.json()
    assert list(body) == ORDER
    assert body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Operation cannot be fulfilled on leases.coordination.k8s.io "nightly-report": '
        "the object has been modified; please apply your changes to the latest version and try "
        "again",
        "reason": "Conflict",
        "details": {"name": "nightly-report", "group": "coordination.k8s.io", "kind": "leases"},
        "code": 409,
    }
    assert response.headers["content-type"] == "application/json"


async def test_already_exists_and_not_found_messages() -> None:
    """AlreadyExists and NotFound use `leases.coordination.k8s.io "X" ...` messages."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        await create(http, "x")
        exists = (await http.post(LEASES, json=lease("x"))).json()
        missing = (await http.get(f"{LEASES}/y")).json()
    assert exists["message"] == 'leases.coordination.k8s.io "x" already exists'
    assert exists["reason"] == "AlreadyExists"
    assert exists["code"] == 409
    assert missing["message"] == 'leases.coordination.k8s.io "y" not found'
    assert missing["reason"] == "NotFound"
    assert missing["code"] == 404
    assert missing["details"] == {"name": "y", "group": "coordination.k8s.io", "kind": "leases"}
    assert list(missing) == ORDER


async def test_invalid_name_body_is_exact() -> None:
    """422 for My_Lock: kind-qualified message, FieldValueInvalid cause on metadata.name."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await http.post(LEASES, json=lease("My_Lock"))
    body = response.json()
    assert response.status_code == 422
    assert list(body) == ORDER
    assert body["message"] == (
        f'Lease.coordination.k8s.io "My_Lock" is invalid: metadata.name: Invalid value: '
        f'"My_Lock": {SUBDOMAIN}'
    )
    assert body["reason"] == "Invalid"
    assert body["details"] == {
        "name": "My_Lock", "group": "coordination.k8s.io", "kind": "Lease",
        "causes": [{"reason": "FieldValueInvalid",
                    "message": f'Invalid value: "My_Lock": {SUBDOMAIN}',
                    "field": "metadata.name"}],
    }


async def test_unauthorized_body() -> None:
    """401: message and reason "Unauthorized", no details."""
    emulator = KubeEmulator()
    async with client(emulator, token="unknown") as http:
        response = await http.get(LEASES)
    assert response.status_code == 401
    assert response.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401,
    }


async def test_forbidden_body() -> None:
    """403: `... is forbidden: User "..." cannot update resource ...` with details."""
    emulator = KubeEmulator(namespaces=["jobs"])
    emulator.add_service_account_token("t", "jobs", "app")
    emulator.grant("system:serviceaccount:jobs:app", ["get"], namespace="jobs")
    emulator.apply({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": "nightly", "namespace": "jobs"}})
    url = "/apis/coordination.k8s.io/v1/namespaces/jobs/leases/nightly"
    async with client(emulator, token="t") as http:
        got = await http.get(url)
        response = await http.put(url, json=got.json())
    assert got.status_code == 200
    body = response.json()
    assert response.status_code == 403
    assert list(body) == ORDER
    assert body["message"] == (
        'leases.coordination.k8s.io "nightly" is forbidden: User '
        '"system:serviceaccount:jobs:app" cannot update resource "leases" in API group '
        '"coordination.k8s.io" in the namespace "jobs"'
    )
    assert body["reason"] == "Forbidden"
    assert body["details"] == {"name": "nightly", "group": "coordination.k8s.io", "kind": "leases"}


async def test_429_is_plain_text_with_retry_after() -> None:
    """An APF 429 is plain text with Retry-After; the Status-shaped 429 also exists."""
    emulator = KubeEmulator()
    emulator.faults.fail(429, retry_after=3, times=1)
    emulator.faults.fail(429, retry_after=2, status_shaped=True, times=1)
    async with client(emulator) as http:
        text = await http.get(LEASES)
        shaped = await http.get(LEASES)
        after = await http.get(LEASES)
    assert text.status_code == 429
    assert text.text == "Too many requests, please try again later.\n"
    assert text.headers["retry-after"] == "3"
    assert text.headers["content-type"].startswith("text/plain")
    assert shaped.status_code == 429
    assert shaped.json()["reason"] == "TooManyRequests"
    assert shaped.json()["details"] == {"retryAfterSeconds": 2}
    assert shaped.headers["retry-after"] == "2"
    assert after.status_code == 200


@pytest.mark.parametrize(
    ("code", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable"), (504, "Timeout")]
)
async def test_server_errors_have_their_reasons(code: int, reason: str) -> None:
    """Injected 500 / 503 / 504 are Status bodies with InternalError / ServiceUnavailable /
    Timeout."""
    emulator = KubeEmulator()
    emulator.faults.fail(code)
    async with client(emulator) as http:
        response = await http.get(f"{LEASES}/a")
    assert response.status_code == code
    body = response.json()
    assert list(body)[:6] == ORDER[:6]
    assert body["code"] == code
    assert body["reason"] == reason


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("a", True),
        ("nightly-report.v2", True),
        ("0abc", True),
        ("x" * 253, True),
        ("x" * 254, False),
        ("My_Lock", False),
        ("-a", False),
        ("a-", False),
        ("a..b", False),
        ("UPPER", False),
    ],
)
async def test_lease_names_are_dns_subdomains(name: str, ok: bool) -> None:
    """Lease names must be DNS-1123 subdomains of at most 253 characters."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await http.post(LEASES, json=lease(name))
    assert response.status_code == (201 if ok else 422)


async def test_too_long_name_message() -> None:
    """A 254-character name reports "must be no more than 253 characters"."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await http.post(LEASES, json=lease("x" * 254))
    assert "must be no more than 253 characters" in response.json()["message"]


@pytest.mark.parametrize(
    ("name", "ok"), [("jobs", True), ("x" * 63, True), ("x" * 64, False), ("a.b", False)]
)
async def test_namespace_names_are_dns_labels(name: str, ok: bool) -> None:
    """Namespace names are DNS-1123 labels (no dots, at most 63 characters)."""
    emulator = KubeEmulator()
    async with client(emulator) as http:
        response = await http.post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert response.status_code == (201 if ok else 422)
    if not ok:
        assert response.json()["details"]["kind"] == "Namespace"
