"""The cluster-configuration types: one API server, and how requests to it authenticate.

:class:`ClusterConfig` (the server, its TLS settings, the namespace), :class:`Credentials` (a
token, a token file, a client certificate or an exec plugin, and impersonation) and
:class:`ExecConfig` (a kubeconfig ``exec`` plugin). Where a configuration comes from
(explicit keys, in-cluster, a kubeconfig) is :mod:`._config` and :mod:`._kubeconfig`; these
types only check that their fields fit together.

:class:`ClusterConfig` never shows a token, key or exec plugin argument in its ``repr``. Token
contents are checked where they are read (:mod:`._tokens`), not here, so a token file is checked
on every re-read and a :class:`Credentials` built by hand is checked the same way.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..._exceptions import LeaseConfigError
from ._names import validate_namespace

__all__ = ["DEFAULT_TOKEN_REFRESH", "ClusterConfig", "Credentials", "ExecConfig"]

#: client-go re-reads a token file every minute; so do we, and at once after a 401.
DEFAULT_TOKEN_REFRESH = 60.0


@dataclasses.dataclass(frozen=True)
class ExecConfig:
    """A kubeconfig ``exec`` credential plugin (``client.authentication.k8s.io/v1``).

    Messages and the ``repr`` name the ``command`` only: ``args`` and ``env`` may carry secrets
    (``--client-secret=...``), so they are never shown.
    """

    command: str
    args: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    env: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)
    api_version: str = "client.authentication.k8s.io/v1"
    install_hint: str = ""
    provide_cluster_info: bool = False
    interactive_mode: str = "Never"


@dataclasses.dataclass(frozen=True)
class Credentials:
    """How requests authenticate. Secrets are excluded from ``repr``."""

    token: str | None = dataclasses.field(default=None, repr=False)
    token_file: Path | None = None
    token_refresh: float = DEFAULT_TOKEN_REFRESH
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    client_cert_data: bytes | None = dataclasses.field(default=None, repr=False)
    client_key_data: bytes | None = dataclasses.field(default=None, repr=False)
    exec: ExecConfig | None = None
    impersonate_user: str | None = None
    impersonate_groups: tuple[str, ...] = ()
    #: Where these credentials were configured, for messages ("kubeconfig user 'dev'
    #: (/home/me/.kube/config)", "the in-cluster service account"); never a secret. Empty: the
    #: cluster configuration's ``source`` is named instead.
    origin: str = ""

    @property
    def kind(self) -> str:
        """A name for the method, for messages: "token-file", "exec", ..."""
        if self.token_file is not None:
            return "token-file"
        if self.token is not None:
            return "token"
        if self.exec is not None:
            return "exec"
        if self.client_cert_file is not None or self.client_cert_data is not None:
            return "client-certificate"
        return "none"


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """One API server and how to talk to it."""

    server: str
    namespace: str = "default"
    credentials: Credentials = dataclasses.field(default_factory=Credentials)
    ca_data: bytes | None = dataclasses.field(default=None, repr=False)
    ca_file: Path | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    #: Where this came from, for messages ("in-cluster", "kubeconfig ~/.kube/config context x").
    source: str = "explicit"

    def __post_init__(self) -> None:
        if not self.server.startswith(("https://", "http://")):
            raise LeaseConfigError(
                f"server {self.server!r} must be an http:// or https:// URL ({self.source})"
            )
        if self.insecure_skip_tls_verify and (self.ca_data or self.ca_file):
            raise LeaseConfigError(
                "specifying a root certificate with insecure-skip-tls-verify is not allowed "
                f"({self.source}): drop one of them"
            )
        has_cert = self.credentials.client_cert_file or self.credentials.client_cert_data
        has_key = self.credentials.client_key_file or self.credentials.client_key_data
        if bool(has_cert) != bool(has_key):
            raise LeaseConfigError(
                f"a client certificate needs its key and a key its certificate ({self.source})"
            )
        validate_namespace(self.namespace)

    @property
    def server_url(self) -> str:
        """``server`` without a trailing slash: the base of every request path."""
        return self.server.rstrip("/")
