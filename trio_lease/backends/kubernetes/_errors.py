"""API server answers and transport failures → the trio_lease exception tree, in one place.

=======================================  ==============================================
what happened                            raised
=======================================  ==============================================
409 (Conflict, AlreadyExists, uid        :class:`ConflictError`
precondition failed), 404 on a lease
401 (after one credential refresh)       :class:`BackendAuthError`: credentials
403                                      :class:`BackendAuthError`: the verb, resource,
                                         API group, namespace and how to grant them
404 "could not find the requested        :class:`LeaseConfigError`: apply ``lease.yml``
resource" (no CRD) or a missing
namespace
400, 422                                 :class:`LeaseConfigError` with the server's causes
429 past the deadline, 5xx, timeouts,    :class:`BackendUnavailable` (outcome unknown)
resets, TLS and connection errors
anything else                            :class:`BackendError`
=======================================  ==============================================

The server's ``Status`` body is parsed when there is one; otherwise (plain-text 429s, HTML pages
from proxies) the reason is synthesised from the code as client-go does. Messages carry names,
verbs, codes and the server's message (which never holds credentials), never a header or token.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import ssl
from typing import Any

import httpx

from ..._exceptions import (
    BackendAuthError,
    BackendError,
    BackendUnavailable,
    ConflictError,
    LeaseConfigError,
    LeaseError,
)
from ..._http import Answer
from ._models import LeaseKind

__all__ = [
    "ApiStatus",
    "RequestContext",
    "error_from",
    "map_transport_error",
    "parse_status",
    "tls_verification_failed",
]

_SYNTHESISED = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
_MAX_TEXT = 200


@dataclasses.dataclass(frozen=True)
class RequestContext:
    """What a request was trying to do, for messages: the RBAC verb and the object."""

    verb: str
    kind: LeaseKind
    namespace: str
    name: str = ""

    @property
    def target(self) -> str:
        where = f"in namespace {self.namespace!r}"
        return f"{self.kind.resource} {self.name!r} {where}" if self.name else (
            f"{self.kind.resource} {where}"
        )


@dataclasses.dataclass(frozen=True)
class ApiStatus:
    """A failure answer, parsed from a ``Status`` body or synthesised from the code."""

    code: int
    reason: str
    message: str
    details: dict[str, Any]
    retry_after: float | None

    @property
    def missing_resource(self) -> bool:
        """A 404 for the URL itself (API group or CRD not served), not for one object."""
        return self.code == 404 and not self.details.get("name") and not self.details.get("kind")

    @property
    def missing_namespace(self) -> bool:
        return self.code == 404 and self.details.get("kind") == "namespaces"

    @property
    def uid_precondition_failed(self) -> bool:
        return self.code == 409 and "Precondition failed: UID" in self.message

    def causes(self) -> str:
        found = [
            f"{c.get('field', '')}: {c.get('message', '')}".strip(": ")
            for c in self.details.get("causes") or []
            if isinstance(c, dict)
        ]
        return "; ".join(found) or self.message


def parse_status(response: Answer) -> ApiStatus:
    """Read a failure answer; bodies that are not a JSON ``Status`` are handled too."""
    body: Any = None
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        body = json.loads(response.content)
    retry_after = _retry_after(response.headers.get("Retry-After"))
    if isinstance(body, dict) and body.get("kind") == "Status":
        raw_details = body.get("details")
        details: dict[str, Any] = raw_details if isinstance(raw_details, dict) else {}
        if retry_after is None and isinstance(details.get("retryAfterSeconds"), int):
            retry_after = float(details["retryAfterSeconds"])
        return ApiStatus(
            code=response.status_code,
            reason=str(body.get("reason") or _synthesised(response.status_code)),
            message=str(body.get("message") or ""),
            details=details,
            retry_after=retry_after,
        )
    text = response.content[:_MAX_TEXT].decode("utf-8", "replace").strip()
    if "<" in text:  # an HTML page from a proxy or load balancer: do not quote markup
        text = f"a non-JSON ({response.headers.get('content-type', 'unknown type')}) body"
    code = response.status_code
    return ApiStatus(code, _synthesised(code), text, {}, retry_after)


def _synthesised(code: int) -> str:
    if code in _SYNTHESISED:
        return _SYNTHESISED[code]
    return "InternalError" if code >= 500 else "Unknown"


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # an HTTP date: treat as "no hint"
    return max(0.0, seconds)


def _grant_hint(ctx: RequestContext) -> str:
    group = ctx.kind.group
    return (
        f"grant it with a Role in namespace {ctx.namespace!r} allowing verb {ctx.verb!r} on "
        f"resource {ctx.kind.plural!r} in API group {group!r} (see the Role in lease.yml, or "
        f"kubectl create role trio-lease -n {ctx.namespace} --verb=get,create,update,watch,list "
        f"--resource={ctx.kind.resource}, then a RoleBinding for the service account)"
    )


def error_from(response: Answer, ctx: RequestContext) -> LeaseError:
    """The exception for a failed ``response`` to the request described by ``ctx``."""
    return error_for(parse_status(response), ctx)


def error_for(status: ApiStatus, ctx: RequestContext) -> LeaseError:
    """The exception for a failure ``status`` (see the module docstring's table)."""
    code = status.code
    if code == 409:
        if status.uid_precondition_failed:
            return ConflictError(
                f"{ctx.target} was deleted or replaced since we last read it: the lease is lost"
            )
        return ConflictError(f"{ctx.verb} of {ctx.target} conflicted ({status.reason})")
    if code == 404:
        if status.missing_namespace:
            return LeaseConfigError(
                f"namespace {ctx.namespace!r} does not exist: create it or configure another "
                "namespace (the 'namespace' key)"
            )
        if status.missing_resource:
            if ctx.kind.group == "coordination.k8s.io":
                return LeaseConfigError(
                    f"the API server does not serve {ctx.kind.api_version} leases "
                    "(Kubernetes 1.14 or newer is needed): check the server URL"
                )
            return LeaseConfigError(
                f"the API server does not serve {ctx.kind.resource} ({ctx.kind.api_version}): "
                "the custom resource definition is missing; install it with "
                "'kubectl apply -f lease.yml' (needs cluster-admin once)"
            )
        return ConflictError(f"{ctx.target} does not exist")
    if code == 401:
        return BackendAuthError(
            f"the API server rejected our credentials (401 Unauthorized) on {ctx.verb} of "
            f"{ctx.target}, even after re-reading them: the token or client certificate is "
            "expired or wrong; check the token file, kubeconfig user or exec plugin"
        )
    if code == 403:
        return BackendAuthError(
            f"forbidden: we may not {ctx.verb!r} resource {ctx.kind.plural!r} in API group "
            f"{ctx.kind.group!r} in namespace {ctx.namespace!r} (server said: "
            f"{status.message or 'Forbidden'}); {_grant_hint(ctx)}"
        )
    if code in (400, 422):
        return LeaseConfigError(
            f"the API server rejected {ctx.verb} of {ctx.target} as invalid ({code} "
            f"{status.reason}): {status.causes()}"
        )
    if code == 429 or code >= 500:
        return BackendUnavailable(
            f"{ctx.verb} of {ctx.target} failed with {code} {status.reason}"
            f"{': ' + status.message if status.message else ''}; the outcome is unknown"
        )
    return BackendError(
        f"{ctx.verb} of {ctx.target} failed with {code} {status.reason}: {status.message}"
    )


def tls_verification_failed(exc: BaseException) -> bool:
    """Whether a certificate check is behind ``exc`` (the chain differs on asyncio and trio)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return True
        if "CERTIFICATE_VERIFY_FAILED" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def map_transport_error(exc: BaseException, ctx: RequestContext) -> LeaseError:
    """The exception for a request that got no answer: a timeout, reset, refusal or TLS error."""
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return LeaseConfigError(
            f"the API server URL is invalid ({type(exc).__name__}): fix 'server'"
        )
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        what = "timed out"
    elif isinstance(exc, httpx.ConnectError):
        what = (
            "could not verify the server's TLS certificate (configure the right CA, or "
            "tls-server-name)"
            if tls_verification_failed(exc)
            else "could not connect to the API server"
        )
    elif isinstance(exc, httpx.TransportError | OSError):
        what = f"lost the connection ({type(exc).__name__})"
    elif isinstance(exc, httpx.DecodingError | ValueError):
        what = "got an answer that is not valid JSON"
    else:
        what = f"failed ({type(exc).__name__})"
    return BackendUnavailable(f"{ctx.verb} of {ctx.target} {what}; the outcome is unknown")
