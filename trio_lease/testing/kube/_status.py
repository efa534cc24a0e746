"""``metav1.Status`` bodies exactly as kube-apiserver writes them.

Field order follows the Go struct (kind, apiVersion, metadata, status, message, reason, details,
code) and empty fields are omitted as ``omitempty`` does. Messages are built the way
``k8s.io/apimachinery/pkg/api/errors`` builds them: ``NewNotFound`` gives
``leases.coordination.k8s.io "x" not found``, ``NewConflict`` prefixes ``Operation cannot be
fulfilled on ...``, ``NewInvalid`` names the *kind* (``Lease.coordination.k8s.io "x" is
invalid: ...``) and lists one cause per field error. A core-group resource has no group suffix
(``namespaces "jobs" not found``) and no ``group`` key in ``details``.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "JSON", "ApiError", "FieldError", "GoLiteral", "go_string_slice", "status_body",
    "storage_invalid_obj",
]

#: A decoded JSON object, as every module of the emulator handles objects and bodies.
JSON = dict[str, Any]


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _go_quote(value: str) -> str:
    """Go's ``%q`` for the plain strings we meet (JSON escaping is close enough)."""
    return json.dumps(value, ensure_ascii=False)


def status_body(
    code: int,
    reason: str,
    message: str,
    details: JSON | None = None,
    *,
    success: bool = False,
) -> JSON:
    """One Status object in the server's field order; ``details`` None means omitted."""
    body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
    body["status"] = "Success" if success else "Failure"
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    if not success:
        body["code"] = code
    return body


def _details(name: str, group: str, kind: str, **extra: Any) -> JSON:
    details: JSON = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    details.update({k: v for k, v in extra.items() if v})
    return details


class FieldError:
    """One ``field.Error``: renders ``<field>: <body>`` like apimachinery's ``Error()``."""

    field: str
    #: "Invalid", "Required", "Forbidden", "NotSupported" or "TooLong".
    kind: str
    detail: str
    value: Any

    def __init__(self, field: str, kind: str, detail: str = "", value: Any = None) -> None:
        self.field = field
        self.kind = kind
        self.detail = detail
        self.value = value

    @property
    def reason(self) -> str:
        return {
            "Invalid": "FieldValueInvalid",
            "Required": "FieldValueRequired",
            "Forbidden": "FieldValueForbidden",
            "NotSupported": "FieldValueNotSupported",
            "TooLong": "FieldValueTooLong",
        }[self.kind]

    def body(self) -> str:
        """``ErrorBody()``: strings are quoted, small ints bare, uint64 in ``%#v`` (``0x0``)."""
        if self.kind in ("Required", "Forbidden"):
            text = "Required value" if self.kind == "Required" else "Forbidden"
        elif self.kind == "TooLong":  # ErrorBody prints no value for TooLong
            text = "Too long"
        else:
            label = {"Invalid": "Invalid value", "NotSupported": "Unsupported value"}.get(
                self.kind, "Too long"
            )
            value = self.value
            if isinstance(value, str):
                shown = _go_quote(value)
            elif isinstance(value, _GoHex):
                shown = value.text
            else:
                shown = "null" if value is None else str(value)
            text = f"{label}: {shown}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


class _GoHex:
    """A Go ``uint64`` printed by ``%#v`` (the resourceVersion in "must be specified")."""

    def __init__(self, number: int) -> None:
        self.text = hex(number)


GO_UINT64_ZERO = _GoHex(0)


class GoLiteral(_GoHex):
    """A value printed as Go's ``%#v`` writes it, given as text (``[]string{"Bogus"}``)."""

    def __init__(self, text: str) -> None:
        self.text = text


def go_string_slice(values: list[str]) -> GoLiteral:
    """``%#v`` of a ``[]string``: ``[]string{"a", "b"}``."""
    return GoLiteral("[]string{" + ", ".join(_go_quote(v) for v in values) + "}")


def storage_invalid_obj(key: str, message: str) -> str:
    """``StorageError.Error()`` of ``NewInvalidObjError`` (``apiserver/pkg/storage/errors.go``)."""
    return (
        f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, "
        f"AdditionalErrorMsg: {message}"
    )


class ApiError(Exception):
    """An HTTP error answer: the status code, a Status body (or plain text) and headers."""

    code: int
    body: JSON | str
    headers: list[tuple[str, str]]

    def __init__(
        self,
        code: int,
        body: JSON | str,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(body if isinstance(body, str) else body.get("message", ""))
        self.code = code
        self.body = body
        self.headers = headers or []

    # --- constructors, one per apimachinery errors.NewXxx -------------------------------

    @classmethod
    def not_found(cls, resource: str, group: str, name: str) -> ApiError:
        """``NewNotFound``: 404 with the resource and name in details."""
        message = f"{_qualified(resource, group)} {_go_quote(name)} not found"
        return cls(404, status_body(404, "NotFound", message, _details(name, group, resource)))

    @classmethod
    def no_route(cls) -> ApiError:
        """404 for an unknown path or API group (a CRD that is not installed): empty details."""
        message = "the server could not find the requested resource"
        return cls(404, status_body(404, "NotFound", message, {}))

    @classmethod
    def page_not_found(cls) -> ApiError:
        """Go's ``http.NotFound``: what the end of the handler chain answers for a path nobody
        serves (a group/version with no CRD; ``apiserver/pkg/util/notfoundhandler``). Plain text,
        not a Status."""
        headers = [
            ("Content-Type", "text/plain; charset=utf-8"), ("X-Content-Type-Options", "nosniff")
        ]
        return cls(404, "404 page not found\n", headers)

    @classmethod
    def unknown(cls, message: str) -> ApiError:
        """An error that is no Status (``ErrorToAPIStatus``): 500, no reason, no details."""
        return cls(500, status_body(500, "", message))

    @classmethod
    def already_exists(cls, resource: str, group: str, name: str) -> ApiError:
        """``NewAlreadyExists``: 409 reason AlreadyExists."""
        message = f"{_qualified(resource, group)} {_go_quote(name)} already exists"
        return cls(
            409, status_body(409, "AlreadyExists", message, _details(name, group, resource))
        )

    @classmethod
    def conflict(cls, resource: str, group: str, name: str, cause: str) -> ApiError:
        """``NewConflict``: 409 reason Conflict; ``cause`` ends the message."""
        message = (
            f"Operation cannot be fulfilled on {_qualified(resource, group)} "
            f"{_go_quote(name)}: {cause}"
        )
        return cls(409, status_body(409, "Conflict", message, _details(name, group, resource)))

    @classmethod
    def invalid(cls, kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
        """``NewInvalid``: 422; one error is shown bare, several as ``[a, b]``."""
        listed = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
        message = f"{_qualified(kind, group)} {_go_quote(name)} is invalid: {listed}"
        causes = [{"reason": e.reason, "message": e.body(), "field": e.field} for e in errors]
        details = _details(name, group, kind, causes=causes)
        return cls(422, status_body(422, "Invalid", message, details))

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        """``NewBadRequest``: 400 without details."""
        return cls(400, status_body(400, "BadRequest", message))

    @classmethod
    def unauthorized(cls) -> ApiError:
        """The authentication filter's 401: message and reason both ``Unauthorized``."""
        return cls(401, status_body(401, "Unauthorized", "Unauthorized"))

    @classmethod
    def forbidden(cls, resource: str, group: str, name: str, reason: str) -> ApiError:
        """``NewForbidden``: ``<resource> "<name>" is forbidden: <reason>`` (no name on create)."""
        subject = _qualified(resource, group)
        if name:
            subject = f"{subject} {_go_quote(name)}"
        message = f"{subject} is forbidden: {reason}"
        return cls(403, status_body(403, "Forbidden", message, _details(name, group, resource)))

    @classmethod
    def expired(cls, message: str) -> ApiError:
        """``NewResourceExpired``: 410 reason Expired, no details."""
        return cls(410, status_body(410, "Expired", message))

    @classmethod
    def entity_too_large(cls, limit: int) -> ApiError:
        """``NewRequestEntityTooLargeError``: 413 for a body over the handlers' read limit."""
        message = f"Request entity too large: limit is {limit}"
        return cls(413, status_body(413, "RequestEntityTooLarge", message))

    @classmethod
    def too_large_resource_version(cls, wanted: int, current: int, retry: int) -> ApiError:
        """``storage.NewTooLargeResourceVersionError``: a 504 Timeout with a cause."""
        message = f"Timeout: Too large resource version: {wanted}, current: {current}"
        details: JSON = {"causes": [
            {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
        ]}
        headers = []
        if retry:
            details["retryAfterSeconds"] = retry
            headers.append(("Retry-After", str(retry)))
        return cls(504, status_body(504, "Timeout", message, details), headers)

    @classmethod
    def timeout(cls) -> ApiError:
        """504 from ``finishRequest`` when the request's deadline (``?timeout=``) passes."""
        message = "Timeout: request did not complete within requested timeout - " + (
            "context deadline exceeded"
        )
        return cls(504, status_body(504, "Timeout", message, {}))

    @classmethod
    def internal(cls, cause: str) -> ApiError:
        """``NewInternalError``: 500 reason InternalError with the cause in details."""
        message = f"Internal error occurred: {cause}"
        details = {"causes": [{"message": cause}]}
        return cls(500, status_body(500, "InternalError", message, details))

    @classmethod
    def service_unavailable(cls, message: str) -> ApiError:
        """``NewServiceUnavailable``: 503 reason ServiceUnavailable."""
        return cls(503, status_body(503, "ServiceUnavailable", message))

    @classmethod
    def too_many_requests_text(cls, retry_after: int) -> ApiError:
        """The priority-and-fairness 429: plain text, not a Status, with ``Retry-After``."""
        headers = [("Retry-After", str(retry_after)), ("Content-Type", "text/plain; charset=utf-8")]
        return cls(429, "Too many requests, please try again later.\n", headers)

    @classmethod
    def too_many_requests_status(cls, retry_after: int) -> ApiError:
        """``NewTooManyRequests``: the Status-shaped 429 with ``details.retryAfterSeconds``."""
        body = status_body(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
            {"retryAfterSeconds": retry_after},
        )
        return cls(429, body, [("Retry-After", str(retry_after))])

    @classmethod
    def unsupported_media_type(cls, accepted: list[str] | tuple[str, ...]) -> ApiError:
        """415 for a PATCH content type the resource does not accept
        (``negotiation.NewUnsupportedMediaTypeError``: it names the accepted ones)."""
        message = (
            "the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(accepted)
        )
        return cls(415, status_body(415, "UnsupportedMediaType", message))

    @classmethod
    def method_not_allowed(cls, method: str) -> ApiError:
        """405 for a verb the path does not support."""
        message = f"the server does not allow this method on the requested resource ({method})"
        return cls(405, status_body(405, "MethodNotAllowed", message, {}))
