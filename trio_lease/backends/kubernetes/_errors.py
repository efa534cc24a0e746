"""API server answers and transport failures → the trio_lease exception tree, in one place.

=======================================  ==============================================
what happened                            raised
=======================================  ==============================================
409 (Conflict, AlreadyExists, uid        :class:`ConflictError`
precondition failed), 404 on a lease
401 (after one credential refresh)       :class:`BackendAuthError`: credentials
403                                      :class:`BackendAuthError`: the verb, resource,
                                         API group, namespace and how to grant them
404 for the URL itself (no CRD or API    :class:`LeaseConfigError`: apply ``lease.yml``
group: a Status without details,
``404 page not found`` as text/plain,
or an empty body) or a missing namespace
400, 422                                 :class:`LeaseConfigError` with the server's causes
TLS certificate verification failed      :class:`LeaseConfigError`: configure the right CA
(after one re-read of the CA file)       or ``tls-server-name``; retrying cannot fix it
429 past the deadline, 5xx, timeouts,    :class:`BackendUnavailable` (outcome unknown)
resets, connection errors
an answer that is not a valid reply      :class:`BackendProtocolError` (raised where
(not JSON, wrong kind or shape)          replies are read: _api, _watch)
anything else                            :class:`BackendError`
=======================================  ==============================================

The server's ``Status`` body is parsed when there is one, and every field of it is checked (a
``details`` that is not an object, ``causes`` that are not a list, a ``reason`` that is not a
word: each is ignored, never an exception); otherwise (plain-text 429s, HTML pages from
proxies, empty bodies) the reason is synthesised from the code as client-go does.

What is quoted: a hostile or broken server (or a proxy echoing our request, Authorization
header included) may put anything in a reply, so messages quote only ``Status.message``,
``details.name``/``kind`` and the causes' field and message, all through :func:`clean_text`:
every token this process sent cut out by its value (:func:`trio_lease._secrets.redact_sent`,
however the server quoted it), control characters removed, anything that looks like a credential
(``Bearer`` or ``Basic`` followed by any separators or quotes and a value, a JWT) replaced by
``[redacted]``, and cut to a short bound. A ``reason`` is one word, and a synthesised one if it
is a token. A body that is not a Status is never quoted: the message says only its content type
(letters, digits and ``/.+-`` only) and size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import ssl

import httpx

from ... import _wire
from ..._connect import certificate_problem, connect_problem, reply_problem
from ..._exceptions import (
    BackendAuthError,
    BackendError,
    BackendProtocolError,
    BackendUnavailable,
    ConflictError,
    LeaseConfigError,
    LeaseError,
)
from ..._http import Answer
from ..._http_errors import ConnectFailed, ConnectTimedOut, OutcomeUnknown, UndecodableBody
from ..._secrets import redact_sent
from ._models import LeaseKind

__all__ = [
    "ApiStatus",
    "RequestContext",
    "clean_text",
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
#: Longest server text quoted: a Status message, one cause.
_MAX_TEXT = 300
_MAX_CAUSES = 5
#: Retry-After as delay-seconds (a fraction tolerated); anything else is no hint. A long value
#: still gives a finite float; the request bound then refuses to wait that long.
_RETRY_AFTER = re.compile(r"[0-9]{1,32}(\.[0-9]{1,9})?")
_REASON = re.compile(r"[A-Za-z]{1,64}")
_CONTENT_TYPE = re.compile(r"[A-Za-z0-9.+/-]{1,64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
#: ``Bearer``/``Basic`` then any separators, quotes or %-escapes (``Bearer "t"``, ``Bearer+t``,
#: ``bearer:t``, ``Bearer%20t``) and a value; or a JWT.
_CREDENTIAL = re.compile(
    r"(?i)(?<![0-9a-z])(?:bearer|basic)(?:[^0-9a-z]|%[0-9a-f]{2}){1,16}?[^\s,;\"'<>]+"
    r"|\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_.-]*"
)


@dataclasses.dataclass(frozen=True)
class RequestContext:
    """What a request was trying to do, for messages: the RBAC verb and the object."""

    verb: str
    kind: LeaseKind
    namespace: str
    name: str = ""
    #: What the request is, when it is not an object of ``kind`` (a review the check sends).
    described: str = ""
    #: The API server's URL (without user info), for connection failures.
    server: str = ""

    @functools.cached_property
    def answer(self) -> str:
        """``the answer to <verb> of <target>``, for messages about a reply (made once: a
        context is kept per verb and object, and every reply is read with it)."""
        return f"the answer to {self.verb} of {self.target}"

    @property
    def target(self) -> str:
        if self.described:
            return self.described
        where = f"in namespace {self.namespace!r}"
        return (
            f"{self.kind.resource} {self.name!r} {where}"
            if self.name
            else (f"{self.kind.resource} {where}")
        )


@dataclasses.dataclass(frozen=True)
class ApiStatus:
    """A failure answer, parsed from a ``Status`` body or synthesised from the code.

    Every field is checked: ``message`` and ``causes`` are cleaned server text (see the module
    docstring), ``reason`` a single word, ``retry_after`` finite and >= 0 (or None: no hint).
    ``body`` describes a reply that was not a Status ("a text/html body of 53 bytes"); it is
    empty for a Status.
    """

    code: int
    reason: str
    message: str = ""
    details_name: str = ""
    details_kind: str = ""
    causes: tuple[str, ...] = ()
    retry_after: float | None = None
    body: str = ""

    @property
    def missing_resource(self) -> bool:
        """A 404 for the URL itself (API group or CRD not served), not for one object.

        A Status without ``details.name``/``details.kind``, the mux's ``text/plain``
        "404 page not found", and an empty body all say so.
        """
        return self.code == 404 and not self.details_name and not self.details_kind

    @property
    def missing_namespace(self) -> bool:
        return self.code == 404 and self.details_kind == "namespaces"

    @property
    def uid_precondition_failed(self) -> bool:
        return self.code == 409 and "Precondition failed: UID" in self.message

    def said(self) -> str:
        """For messages: the server's (cleaned) message, else what kind of body came."""
        if self.message:
            return f"the server said: {self.message}"
        return self.body or "no message"

    def causes_text(self) -> str:
        return "; ".join(self.causes) or self.said()


def clean_text(text: str, limit: int = _MAX_TEXT) -> str:
    """Server text made safe to quote: no control characters, no credentials, bounded.

    Our own tokens go first, on the whole text, so that no cut can leave a piece of one.
    """
    text = _CONTROL.sub(" ", redact_sent(text)[: limit * 4])
    text = _CREDENTIAL.sub("[redacted]", text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text(value: object, limit: int = _MAX_TEXT) -> str:
    return clean_text(value, limit) if isinstance(value, str) else ""


def _causes(details: _wire.JsonObject) -> tuple[str, ...]:
    causes = details.get("causes")
    if not isinstance(causes, list):
        return ()
    found = []
    for cause in causes[:_MAX_CAUSES]:
        if isinstance(cause, dict):
            text = f"{_text(cause.get('field'), 100)}: {_text(cause.get('message'))}".strip(": ")
            if text:
                found.append(text)
    return tuple(found)


def _describe_body(response: Answer) -> str:
    size = len(response.content)
    if not size:
        return "an empty body"
    content_type = response.headers.get("content-type", "").split(";")[0].strip()
    if not _CONTENT_TYPE.fullmatch(content_type):
        content_type = "untyped"
    return f"a {content_type} body of {size:,} bytes"


def parse_status(response: Answer) -> ApiStatus:
    """Read a failure answer, whatever its body: never raises for any content or header.

    A body that is a ``Status`` gives its reason, message, details and causes (each field
    checked, wrong types ignored); any other body (not JSON, too large, HTML, another kind) is
    described, never quoted, and the reason is synthesised from the code.
    """
    code = response.status_code
    retry_after = _retry_after(response.headers.get("Retry-After"))
    body: object = None
    with contextlib.suppress(BackendProtocolError):  # not JSON: described below, never quoted
        body = _wire.load_json(response.content, "a failure answer")
    if not (isinstance(body, dict) and body.get("kind") == "Status"):
        return ApiStatus(
            code, _synthesised(code), retry_after=retry_after, body=_describe_body(response)
        )
    raw_details = body.get("details")
    details = raw_details if isinstance(raw_details, dict) else {}
    if retry_after is None:
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int) and not isinstance(seconds, bool) and 0 <= seconds < 10**9:
            retry_after = float(seconds)
    reason = body.get("reason")
    return ApiStatus(
        code=code,
        reason=reason
        if isinstance(reason, str) and _REASON.fullmatch(reason) and (redact_sent(reason) == reason)
        else _synthesised(code),
        message=_text(body.get("message")),
        details_name=_text(details.get("name"), 253),
        details_kind=_text(details.get("kind"), 63),
        causes=_causes(details),
        retry_after=retry_after,
    )


def _synthesised(code: int) -> str:
    if code in _SYNTHESISED:
        return _SYNTHESISED[code]
    return "InternalError" if code >= 500 else "Unknown"


def _retry_after(value: str | None) -> float | None:
    """Retry-After as delay-seconds; anything else (a date, -1, NaN, inf, 1e999, "1, 2", "")
    is no hint. Finite and >= 0 whenever it is a number."""
    if value is None:
        return None
    text = value.strip()
    if not _RETRY_AFTER.fullmatch(text):
        return None
    return float(text)


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
        return _not_found(status, ctx)
    if code == 401:
        return BackendAuthError(
            f"the API server rejected our credentials (401 Unauthorized) on {ctx.verb} of "
            f"{ctx.target}, even after re-reading them: the token or client certificate is "
            "expired or wrong; check the token file, kubeconfig user or exec plugin"
        )
    if code == 403:
        return BackendAuthError(
            f"forbidden: we may not {ctx.verb!r} resource {ctx.kind.plural!r} in API group "
            f"{ctx.kind.group!r} in namespace {ctx.namespace!r} ({status.said()}); "
            f"{_grant_hint(ctx)}"
        )
    if code in (400, 422):
        return LeaseConfigError(
            f"the API server rejected {ctx.verb} of {ctx.target} as invalid ({code} "
            f"{status.reason}): {status.causes_text()}"
        )
    if code == 429 or code >= 500:
        return BackendUnavailable(
            f"{ctx.verb} of {ctx.target} failed with {code} {status.reason} ({status.said()}); "
            "the outcome is unknown"
        )
    return BackendError(
        f"{ctx.verb} of {ctx.target} failed with {code} {status.reason} ({status.said()})"
    )


def _not_found(status: ApiStatus, ctx: RequestContext) -> LeaseError:
    """A 404: the namespace or the resource (configuration errors), else the object."""
    if status.missing_namespace:
        return LeaseConfigError(
            f"namespace {ctx.namespace!r} does not exist: create it or configure another "
            "namespace (the 'namespace' key)"
        )
    if not status.missing_resource:
        return ConflictError(f"{ctx.target} does not exist")
    if ctx.kind.group == "coordination.k8s.io":
        return LeaseConfigError(
            f"the API server does not serve {ctx.kind.api_version} leases "
            "(Kubernetes 1.14 or newer is needed): check the server URL"
        )
    return LeaseConfigError(
        f"the API server does not serve {ctx.kind.resource} ({ctx.kind.api_version}): "
        "the custom resource definition is missing; install it with "
        f"'trio-lease manifests --lease-kind {ctx.kind.api_version} | kubectl apply -f -' "
        "(needs cluster-admin once; the manifests ship in the package)"
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
    if isinstance(exc, httpx.ConnectError | ConnectFailed) and tls_verification_failed(exc):
        # Not transient: the next try meets the same certificate (the backend has already
        # re-read a CA file once). A LeaseConfigError ends a waiting contender's wait.
        reason = certificate_problem(exc)
        return LeaseConfigError(
            f"{ctx.verb} of {ctx.target}: could not verify the TLS certificate of the API "
            f"server {ctx.server or ''} ({reason}); "
            "configure the CA that signed it (certificate-authority in kubeconfig, ca.crt in "
            "cluster, or 'ca-file'), or 'tls-server-name' when the certificate names another "
            "host; retrying cannot fix this"
        )
    if isinstance(exc, httpx.TimeoutException | TimeoutError | ConnectTimedOut):
        what = "timed out"
    elif isinstance(exc, httpx.ConnectError | ConnectFailed):
        problem = connect_problem(exc, ctx.server) if ctx.server else None
        if problem is not None:  # nothing was sent: the outcome is known
            return BackendUnavailable(
                f"{ctx.verb} of {ctx.target}: could not connect to the API server: {problem}"
            )
        what = "could not connect to the API server"
    elif isinstance(exc, httpx.DecodingError | UndecodableBody | ValueError):
        what = "got an answer that is not valid JSON"
    elif isinstance(exc, httpx.TransportError | OSError | OutcomeUnknown):
        what = f"lost the connection ({type(exc).__name__})"
        problem = reply_problem(exc, ctx.server) if ctx.server else None
        if problem is not None:
            what += f": {problem}"
    else:
        what = f"failed ({type(exc).__name__})"
    return BackendUnavailable(f"{ctx.verb} of {ctx.target} {what}; the outcome is unknown")
