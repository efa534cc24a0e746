"""The cluster-configuration types: one API server, and how requests to it authenticate.

:class:`ClusterConfig` (the server, its TLS settings, the namespace), :class:`Credentials` (a
token, a token file, a client certificate or an exec plugin, and impersonation) and
:class:`ExecConfig` (a kubeconfig ``exec`` plugin). Where a configuration comes from
(explicit keys, in-cluster, a kubeconfig) is :mod:`._config` and :mod:`._kubeconfig`; these
types only check that their fields fit together.

The ``server`` and ``proxy-url`` URLs are checked when the configuration is made: scheme, a
host, and a port from 1 to 65535 if one is given (:func:`url_problem`), so a typo is a
:class:`LeaseConfigError` naming the source instead of a failure on the first request.

:class:`ClusterConfig` never shows a token, key or exec plugin argument in its ``repr``, and a
URL is never shown with its user info (``http://user:password@proxy``; :func:`redact_url`):
not in the ``repr``, not in a message, not in :attr:`ClusterConfig.server_url` (which requests,
``trio-lease check`` and the backend's ``repr`` use). The API server's user info is never sent
either: Kubernetes removed basic authentication in 1.19. A proxy's is sent, to the proxy. Token
contents are checked where they are read (:mod:`._tokens`), not here, so a token file is
checked on every re-read and a :class:`Credentials` built by hand is checked the same way.
"""

from __future__ import annotations

import dataclasses
import functools
import urllib.parse
from pathlib import Path

from ..._endpoints import SERVER_SCHEMES, checked_url, redact_url, url_problem
from ..._exceptions import LeaseConfigError
from ._names import validate_namespace

__all__ = [
    "DEFAULT_TOKEN_REFRESH",
    "PROXY_SCHEMES",
    "SERVER_SCHEMES",
    "ClusterConfig",
    "Credentials",
    "ExecConfig",
    "checked_url",
    "redact_url",
    "url_problem",
]

#: client-go re-reads a token file every minute; so do we, and at once after a 401.
DEFAULT_TOKEN_REFRESH = 60.0
#: The proxy schemes httpx speaks (SOCKS needs its ``socks`` extra).
PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


@dataclasses.dataclass(frozen=True)
class ExecConfig:
    """A kubeconfig ``exec`` credential plugin (``client.authentication.k8s.io/v1``).

    Messages and the ``repr`` name the ``command`` only: ``args`` and ``env`` may carry secrets
    (``--client-secret=...``), so they are never shown. What no process can be started with (a
    NUL character anywhere, an environment variable name with ``=`` or empty) is refused here,
    by field and index, never by value.
    """

    command: str
    args: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    env: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)
    api_version: str = "client.authentication.k8s.io/v1"
    install_hint: str = ""
    provide_cluster_info: bool = False
    interactive_mode: str = "Never"

    def __post_init__(self) -> None:
        problems = ["exec.command contains a NUL character"] if "\0" in self.command else []
        problems += [
            f"exec.args[{index}] contains a NUL character"
            for index, arg in enumerate(self.args)
            if "\0" in arg
        ]
        for index, (name, value) in enumerate(self.env):
            if not name or "=" in name or "\0" in name:
                problems.append(
                    f"exec.env[{index}].name is empty or contains '=' or a NUL character"
                )
            if "\0" in value:
                problems.append(f"exec.env[{index}].value contains a NUL character")
        if problems:
            raise LeaseConfigError(
                f"the exec plugin cannot be started: {'; '.join(problems)}; fix these fields"
            )


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


@dataclasses.dataclass(frozen=True, repr=False)
class ClusterConfig:
    """One API server and how to talk to it (its ``repr`` shows no secret: module docstring)."""

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
    #: Where the namespace came from, for its message ("POD_NAMESPACE", "'namespace' in the
    #: section"); empty: ``source``.
    namespace_source: str = dataclasses.field(default="", compare=False)

    def __post_init__(self) -> None:
        checked_url(self.server, "server", self.source)
        if self.proxy_url is not None:
            checked_url(self.proxy_url, "proxy-url", self.source, PROXY_SCHEMES)
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
        try:
            validate_namespace(self.namespace)
        except LeaseConfigError as exc:
            raise LeaseConfigError(
                f"{exc} (the namespace comes from {self.namespace_source or self.source})"
            ) from None

    def __repr__(self) -> str:
        proxy = None if self.proxy_url is None else redact_url(self.proxy_url)
        return (
            f"ClusterConfig(server={redact_url(self.server)!r}, namespace={self.namespace!r}, "
            f"credentials={self.credentials!r}, ca_file={self.ca_file!r}, "
            f"insecure_skip_tls_verify={self.insecure_skip_tls_verify!r}, "
            f"tls_server_name={self.tls_server_name!r}, proxy_url={proxy!r}, "
            f"source={self.source!r})"
        )

    @functools.cached_property
    def server_url(self) -> str:
        """``server`` without user info and a trailing slash: the base of every request path,
        and what messages show."""
        parts = urllib.parse.urlsplit(self.server)
        if "@" not in parts.netloc:
            return self.server.rstrip("/")
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
        return urllib.parse.urlunsplit(parts).rstrip("/")
