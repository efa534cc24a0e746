"""The provider's TOML section for ``lease-class = "kubernetes"``: keys and their checks.

Connection keys are read by :func:`resolve_config` (see :mod:`._config`); the backend's own keys
are turned into :class:`KubernetesBackend` arguments here. A key nobody knows is an error naming
the key, so a typo does not silently fall back to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._exceptions import LeaseConfigError
from ..._settings import SECTION_KEYS, parse_duration
from ._models import kind_named

__all__ = ["BACKEND_KEYS", "CONNECTION_KEYS", "backend_kwargs", "check_section"]

CONNECTION_KEYS = frozenset(
    {
        "server", "token", "token-file", "token-refresh-interval", "ca-file",
        "client-certificate", "client-key", "insecure-skip-tls-verify", "tls-server-name",
        "proxy-url", "kubeconfig", "context", "in-cluster", "namespace",
    }
)
BACKEND_KEYS = frozenset(
    {
        "lease-kind", "request-timeout", "map-names", "watch", "watch-poll-interval",
        "preferred-holder-grace",
    }
)
#: Keys of the section that are not the backend's: the provider's and LeaseSettings' (the
#: Kubernetes CLI hands the whole section to the backend), and ``owner``, accepted and ignored.
_OTHER_KEYS = SECTION_KEYS | {"owner"}


def check_section(section: Mapping[str, Any]) -> None:
    """Raise :class:`LeaseConfigError` naming the first key that is not known."""
    known = CONNECTION_KEYS | BACKEND_KEYS | _OTHER_KEYS
    for key in section:
        if key not in known:
            near = key.replace("_", "-")
            hint = f" (did you mean {near!r}?)" if near in known else ""
            raise LeaseConfigError(
                f"unknown key {key!r} in the kubernetes lease section{hint}; known keys: "
                + ", ".join(sorted(CONNECTION_KEYS | BACKEND_KEYS))
            )


def _seconds(section: Mapping[str, Any], key: str) -> float | None:
    if key not in section:
        return None
    try:
        value = parse_duration(section[key])
    except ValueError as exc:
        raise LeaseConfigError(f"'{key}': {exc}") from None
    if value <= 0:
        raise LeaseConfigError(f"'{key}' must be positive, got {section[key]!r}")
    return value


def _flag(section: Mapping[str, Any], key: str, default: bool) -> bool:
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise LeaseConfigError(f"'{key}' must be true or false, got {value!r}")
    return value


def backend_kwargs(section: Mapping[str, Any]) -> dict[str, Any]:
    """KubernetesBackend keyword arguments from the section's backend keys."""
    kind = section.get("lease-kind", "coordination.k8s.io/v1")
    if not isinstance(kind, str):
        raise LeaseConfigError(f"'lease-kind' must be a string, got {kind!r}")
    if kind_named(kind) is None:
        raise LeaseConfigError(
            f"'lease-kind' is {kind!r}: use 'coordination.k8s.io/v1' (default) or 'akka.io/v1'"
        )
    timeout = _seconds(section, "request-timeout")
    if timeout is None:
        timeout = _seconds(section, "lease-operation-timeout")
    poll = _seconds(section, "watch-poll-interval")
    grace = 0.0
    if "preferred-holder-grace" in section:
        try:
            grace = parse_duration(section["preferred-holder-grace"])
        except ValueError as exc:
            raise LeaseConfigError(f"'preferred-holder-grace': {exc}") from None
        if grace < 0:
            raise LeaseConfigError("'preferred-holder-grace' must not be negative")
    return {
        "lease_kind": kind,
        "request_timeout": timeout,
        "map_names": _flag(section, "map-names", True),
        "watch": _flag(section, "watch", True),
        "watch_poll_interval": 5.0 if poll is None else poll,
        "preferred_holder_grace": grace,
    }
