"""Object metadata validation: labels, annotations and finalizers
(``apimachinery/pkg/api/validation/objectmeta.go``, ``apimachinery/pkg/apis/meta/v1/validation``,
``apimachinery/pkg/util/validation``), with the exact apimachinery messages.
"""

from __future__ import annotations

import re
from typing import Any

from ._status import JSON, FieldError
from ._validation import SUBDOMAIN_MSG, SUBDOMAIN_RE

__all__ = [
    "ANNOTATIONS_LIMIT",
    "LABEL_VALUE_MSG",
    "LABEL_VALUE_RE",
    "QNAME_RE",
    "qualified_name_errors",
    "validate_object_meta",
]


QNAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
#: ``TotalAnnotationSizeLimitB``: the keys' and values' bytes together.
ANNOTATIONS_LIMIT = 256 * 1024

def qualified_name_errors(value: str) -> list[str]:
    """``IsQualifiedName`` (``apimachinery/pkg/util/validation``): ``[prefix/]name``."""
    parts = value.split("/")
    if len(parts) > 2:
        return [
            f"a qualified name {_QNAME_MSG} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    errors = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errors.append("prefix part must be no more than 253 characters")
            if not SUBDOMAIN_RE.match(prefix):
                errors.append(f"prefix part {SUBDOMAIN_MSG}")
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if not QNAME_RE.match(name):
        errors.append(f"name part {_QNAME_MSG}")
    return errors


def validate_object_meta(metadata: JSON) -> list[FieldError]:
    """Labels, annotations and finalizers of ``ValidateObjectMetaAccessor``
    (``apimachinery/pkg/api/validation/objectmeta.go``, ``meta/v1/validation.ValidateLabels``).

    A label key and each finalizer is a qualified name; a label value at most 63 characters
    of ``[A-Za-z0-9_.-]`` starting and ending alphanumeric (or empty); an annotation key a
    qualified name (case-insensitive), and all annotations together at most 256 KiB.
    """
    return [
        *_label_errors(metadata.get("labels") or {}),
        *_annotation_errors(metadata.get("annotations") or {}),
        *_finalizer_errors(metadata.get("finalizers") or []),
    ]


def _label_errors(labels: JSON) -> list[FieldError]:
    """``ValidateLabels``: qualified-name keys, values of at most 63 label characters."""
    errors: list[FieldError] = []
    for key, value in labels.items():
        errors += [
            FieldError("metadata.labels", "Invalid", m, key) for m in qualified_name_errors(key)
        ]
        text = value or ""
        if len(text) > 63:
            errors.append(FieldError(
                "metadata.labels", "Invalid", "must be no more than 63 characters", text
            ))
        if not LABEL_VALUE_RE.match(text):
            errors.append(FieldError("metadata.labels", "Invalid", LABEL_VALUE_MSG, text))
    return errors


def _annotation_errors(annotations: JSON) -> list[FieldError]:
    """``ValidateAnnotations``: qualified-name keys (any case), 256 KiB in all."""
    errors: list[FieldError] = []
    for key in annotations:
        errors += [
            FieldError("metadata.annotations", "Invalid", m, key)
            for m in qualified_name_errors(key.lower())
        ]
    size = sum(len(k.encode()) + len((v or "").encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_LIMIT:
        errors.append(FieldError(
            "metadata.annotations", "TooLong", f"must have at most {ANNOTATIONS_LIMIT} bytes"
        ))
    return errors


def _finalizer_errors(finalizers: list[Any]) -> list[FieldError]:
    """Each finalizer a qualified name."""
    errors: list[FieldError] = []
    for finalizer in finalizers:
        text = finalizer if isinstance(finalizer, str) else ""
        errors += [
            FieldError("metadata.finalizers", "Invalid", m, text)
            for m in qualified_name_errors(text)
        ]
    return errors
