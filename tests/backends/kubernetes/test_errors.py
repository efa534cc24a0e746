"""The error mapping: every answer and transport failure becomes the right LeaseError."""

from __future__ import annotations

import inspect
import json
import ssl
from typing import Any

import httpx
import pytest

from trio_lease import (
    BackendAuthError,
    BackendError,
    BackendUnavailable,
    ConflictError,
    LeaseConfigError,
    LeaseError,
)
from trio_lease.backends.kubernetes._errors import (
    RequestContext,
    error_from,
    map_transport_error,
    parse_status,
)
from trio_lease.backends.kubernetes._models import AKKA, COORDINATION

CTX = RequestContext("update", COORDINATION, "jobs", "nightly")


def _status(code: int, reason: str, message: str = "", **details: Any) -> httpx.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": details, "code": code}
    return httpx.Response(code, content=json.dumps(body).encode())


def test_conflict_and_already_exists_are_conflicts() -> None:
    """409 Conflict and AlreadyExists map to ConflictError."""
    for reason in ("Conflict", "AlreadyExists"):
        exc = error_from(_status(409, reason, kind="leases", name="nightly"), CTX)
        assert isinstance(exc, ConflictError)


def test_uid_precondition_failure_says_the_lease_is_lost() -> None:
    """A uid precondition failure is a ConflictError saying the lease is lost."""
    response = _status(409, "Conflict", "Precondition failed: UID in precondition: u1, UID in "
                       "object meta: ")
    exc = error_from(response, CTX)
    assert isinstance(exc, ConflictError)
    assert "lost" in str(exc)


def test_forbidden_names_verb_resource_group_namespace_and_fix() -> None:
    """403 is a BackendAuthError naming verb, resource, API group, namespace and the fix."""
    msg = ('leases.coordination.k8s.io "nightly" is forbidden: User "system:serviceaccount:jobs:'
           'app" cannot update resource "leases" in API group "coordination.k8s.io" in the '
           'namespace "jobs"')
    exc = error_from(_status(403, "Forbidden", msg, kind="leases"), CTX)
    assert isinstance(exc, BackendAuthError)
    text = str(exc)
    for part in ("'update'", "'leases'", "'coordination.k8s.io'", "'jobs'", "Role", "lease.yml"):
        assert part in text


def test_missing_crd_says_to_apply_lease_yml() -> None:
    """A 404 for the URL itself on the akka kind is a LeaseConfigError saying how to apply the
    CRD the package ships (`trio-lease manifests`), not a lease.yml an installed user lacks."""
    ctx = RequestContext("get", AKKA, "jobs", "x")
    exc = error_from(_status(404, "NotFound", "the server could not find the requested resource"),
                     ctx)
    assert isinstance(exc, LeaseConfigError)
    assert "trio-lease manifests --lease-kind akka.io/v1 | kubectl apply -f -" in str(exc)


def test_missing_namespace_is_a_config_error() -> None:
    """A 404 whose details.kind is namespaces is a LeaseConfigError naming the namespace."""
    exc = error_from(_status(404, "NotFound", 'namespaces "jobs" not found', kind="namespaces",
                             name="jobs"), CTX)
    assert isinstance(exc, LeaseConfigError)
    assert "'jobs'" in str(exc)


def test_missing_object_is_a_conflict() -> None:
    """A 404 for the lease itself (details name it) is a ConflictError."""
    exc = error_from(_status(404, "NotFound", "", kind="leases", name="nightly"), CTX)
    assert isinstance(exc, ConflictError)


def test_invalid_carries_the_server_causes() -> None:
    """422 is a LeaseConfigError with the server's causes."""
    response = _status(422, "Invalid", "bad", causes=[{"field": "spec.leaseDurationSeconds",
                       "message": "must be greater than 0", "reason": "FieldValueInvalid"}])
    exc = error_from(response, CTX)
    assert isinstance(exc, LeaseConfigError)
    assert "spec.leaseDurationSeconds: must be greater than 0" in str(exc)


@pytest.mark.parametrize("code", [500, 502, 503, 504])
def test_server_errors_are_unavailable_with_unknown_outcome(code: int) -> None:
    """5xx is BackendUnavailable saying the outcome is unknown, even with an HTML body."""
    response = httpx.Response(code, content=b"<html><body>Bad gateway</body></html>",
                              headers={"content-type": "text/html"})
    exc = error_from(response, CTX)
    assert isinstance(exc, BackendUnavailable)
    assert "unknown" in str(exc)
    assert "<html>" not in str(exc)


def test_plain_text_429_is_parsed_with_retry_after() -> None:
    """APF's plain-text 429 is read with its Retry-After header."""
    response = httpx.Response(429, content=b"Too many requests, please try again later.\n",
                              headers={"Retry-After": "3"})
    status = parse_status(response)
    assert (status.code, status.reason, status.retry_after) == (429, "TooManyRequests", 3.0)
    shaped = _status(429, "TooManyRequests", "slow down", retryAfterSeconds=2)
    assert parse_status(shaped).retry_after == 2.0


def test_unauthorized_is_an_auth_error() -> None:
    """401 (after the retry) is a BackendAuthError about credentials."""
    exc = error_from(_status(401, "Unauthorized", "Unauthorized"), CTX)
    assert isinstance(exc, BackendAuthError)
    assert "credentials" in str(exc)


def _httpx_exceptions() -> list[type[BaseException]]:
    return [
        obj for _, obj in inspect.getmembers(httpx)
        if inspect.isclass(obj) and issubclass(obj, httpx.HTTPError)
        and obj not in (httpx.HTTPStatusError,)
    ]


@pytest.mark.parametrize("exc_type", _httpx_exceptions())
def test_every_httpx_error_is_mapped(exc_type: type[BaseException]) -> None:
    """No httpx transport error escapes unmapped: each becomes a LeaseError."""
    request = httpx.Request("GET", "https://kube.test/")
    try:
        exc = exc_type("boom", request=request)  # type: ignore[call-arg]
    except TypeError:
        exc = exc_type("boom")
    mapped = map_transport_error(exc, CTX)
    assert isinstance(mapped, LeaseError)
    assert isinstance(mapped, BackendError | LeaseConfigError)


def test_timeouts_and_resets_are_unavailable() -> None:
    """Timeouts, resets and refused connections are BackendUnavailable (outcome unknown)."""
    for exc in (TimeoutError(), httpx.ReadTimeout("t"), httpx.RemoteProtocolError("reset"),
                httpx.ConnectError("refused"), ConnectionResetError()):
        mapped = map_transport_error(exc, CTX)
        assert isinstance(mapped, BackendUnavailable)
        assert "unknown" in str(mapped)


def test_tls_verification_failure_is_a_config_error() -> None:
    """A certificate that does not verify is LeaseConfigError (retrying cannot fix it)."""
    try:
        raise ssl.SSLCertVerificationError(1, "certificate verify failed: unable to get issuer")
    except ssl.SSLError as cause:
        exc = httpx.ConnectError("handshake failed")
        exc.__cause__ = cause
    mapped = map_transport_error(exc, CTX)
    assert isinstance(mapped, LeaseConfigError)
    assert "tls-server-name" in str(mapped)
    plain = map_transport_error(httpx.ConnectError("refused"), CTX)
    assert isinstance(plain, BackendUnavailable)  # no certificate involved: transient


def test_causes_are_read_from_a_status_and_bounded() -> None:
    """422 causes are quoted field by field, at most five, each cleaned and cut short."""
    causes = [{"field": f"spec.f{i}", "message": "bad\x00 value " + "y" * 1000} for i in range(9)]
    exc = error_from(_status(422, "Invalid", "bad", causes=causes), CTX)
    text = str(exc)
    assert "spec.f4: bad value" in text
    assert "spec.f5" not in text
    assert "\x00" not in text
    assert "y" * 301 not in text
