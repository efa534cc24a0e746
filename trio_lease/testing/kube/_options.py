"""The write verbs' query options: ``dryRun`` and ``fieldValidation``.

``handlers/create.go``, ``update.go``, ``patch.go`` and ``delete.go`` decode the options
(``CreateOptions``, ``UpdateOptions``, ``PatchOptions``, ``DeleteOptions``) from the query (a
DELETE from its body when it has one) and validate them before they read the object
(``apimachinery/pkg/apis/meta/v1/validation``): ``dryRun`` may only hold ``All``
(``ValidateDryRun``) and ``fieldValidation`` only ``Ignore``, ``Warn`` or ``Strict``
(``ValidateFieldValidation``); anything else is 422 ``Invalid`` on
``<Verb>Options.meta.k8s.io``: ``CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported
value: []string{"Bogus"}: supported values: "All"``.

With ``dryRun=All`` the request runs through decoding, defaulting, validation and admission
and is answered as if it were stored, but the storage layer (``registry/generic/registry/
dryrun.go``, ``DryRunnableStorage``) writes nothing: no new resourceVersion (a dry-run create
answers without one), no event, nothing a watch or a later read sees.
"""

from __future__ import annotations

import json
from typing import Any

from ._http import Request
from ._status import ApiError, FieldError, go_string_slice

__all__ = ["check_options", "dry_run_values", "option_errors"]

_OPTIONS_KIND = {
    "create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions",
    "delete": "DeleteOptions",
}
_FIELD_VALIDATION = ("", "Ignore", "Strict", "Warn")


def dry_run_values(verb: str, request: Request) -> list[str]:
    """The request's ``dryRun`` values: a DELETE's body wins over its query when it has one."""
    if verb == "delete" and request.body:
        try:
            body: Any = json.loads(request.body)
        except ValueError:
            body = None
        if isinstance(body, dict):
            values = body.get("dryRun") or []
            return [str(v) for v in values] if isinstance(values, list) else [str(values)]
    return [request.query["dryRun"]] if "dryRun" in request.query else []


def _delete_policy(request: Request) -> str | None:
    if request.body:
        try:
            body: Any = json.loads(request.body)
        except ValueError:
            return None
        policy = body.get("propagationPolicy") if isinstance(body, dict) else None
        return None if policy is None else str(policy)
    return request.query.get("propagationPolicy")


def option_errors(verb: str, request: Request) -> list[FieldError]:
    """``ValidateDryRun`` and ``ValidateFieldValidation`` of the verb's options."""
    errors = []
    values = dry_run_values(verb, request)
    if any(v != "All" for v in values):
        errors.append(FieldError(
            "dryRun", "NotSupported", 'supported values: "All"', go_string_slice(values)
        ))
    if verb == "delete":
        policy = _delete_policy(request)
        if policy is not None and policy not in ("Foreground", "Background", "Orphan"):
            errors.append(FieldError(
                "propagationPolicy", "NotSupported",
                'supported values: "Foreground", "Background", "Orphan", "nil"', policy,
            ))
    else:
        given = request.query.get("fieldValidation", "")
        if given not in _FIELD_VALIDATION:
            errors.append(FieldError(
                "fieldValidation", "NotSupported",
                'supported values: "", "Ignore", "Strict", "Warn"', given,
            ))
    return errors


def check_options(verb: str, request: Request, errors: list[FieldError] | None = None) -> bool:
    """422 on ``<Verb>Options`` if the options are invalid; else whether this is a dry run."""
    kind = _OPTIONS_KIND.get(verb)
    if kind is None:
        return False
    found = [*(errors or []), *option_errors(verb, request)]
    if found:
        raise ApiError.invalid(kind, "meta.k8s.io", "", found)
    return bool(dry_run_values(verb, request))
