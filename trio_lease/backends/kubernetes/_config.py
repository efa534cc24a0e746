"""Where the API server is and how to authenticate: explicit, in-cluster or kubeconfig.

Precedence (the first that applies wins; documented in docs/kubernetes.md):

1. **explicit**: the section sets ``server`` (with ``token``, ``token-file``, ``ca-file``,
   ``client-certificate``/``client-key``, ``insecure-skip-tls-verify``, ``tls-server-name``,
   ``proxy-url`` as needed);
2. **kubeconfig named in the section**: ``kubeconfig`` (a path or a list) and/or ``context``;
3. **KUBECONFIG** set in the environment;
4. **in-cluster**: ``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT`` set (the service
   account's token, ``ca.crt`` and ``namespace`` files);
5. **~/.kube/config** if it exists.

``in-cluster = true`` forces step 4; ``in-cluster = false`` skips it. The namespace is the
section's ``namespace``, else the source's (in cluster: ``POD_NAMESPACE``, then the namespace
file; kubeconfig: the context's), else ``"default"``.

:class:`ClusterConfig` never shows a token, key or exec plugin argument in its ``repr``. Token
contents are checked where they are read (:mod:`._auth`), not here, so a token file is checked
on every re-read and a :class:`Credentials` built by hand is checked the same way.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..._exceptions import LeaseConfigError
from ._names import validate_namespace

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "ClusterConfig",
    "Credentials",
    "ExecConfig",
    "explicit_config",
    "in_cluster_config",
    "resolve_config",
]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
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
        return self.server.rstrip("/")


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):  # ValueError: not UTF-8
        return None


def in_cluster_config(
    env: Mapping[str, str] | None = None, root: Path = SERVICE_ACCOUNT_DIR
) -> ClusterConfig:
    """The service account's view of the cluster, as a pod sees it."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise LeaseConfigError(
            "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are "
            "not set; configure 'server' or a kubeconfig"
        )
    token_file = root / "token"
    if not token_file.exists():
        raise LeaseConfigError(
            f"in-cluster configuration needs the service account token at {token_file}; is "
            "automountServiceAccountToken disabled?"
        )
    ca_file = root / "ca.crt"
    namespace = env.get("POD_NAMESPACE") or _read_text(root / "namespace") or "default"
    return ClusterConfig(
        server=f"https://{_bracket(host)}:{port}",
        namespace=namespace,
        credentials=Credentials(token_file=token_file, origin="the in-cluster service account"),
        ca_file=ca_file if ca_file.exists() else None,
        source="in-cluster",
    )


def _bool(section: Mapping[str, Any], key: str) -> bool | None:
    value = section.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise LeaseConfigError(f"'{key}' must be true or false, got {value!r}")


def _opt_str(section: Mapping[str, Any], key: str) -> str | None:
    value = section.get(key)
    if value is None or isinstance(value, str):
        return value
    raise LeaseConfigError(f"'{key}' must be a string, got {type(value).__name__}")


def _path(section: Mapping[str, Any], key: str) -> Path | None:
    value = _opt_str(section, key)
    return Path(value).expanduser() if value else None


def explicit_config(section: Mapping[str, Any]) -> ClusterConfig:
    """Build a config from the section's explicit keys (``server`` is required)."""
    server = _opt_str(section, "server")
    if not server:
        raise LeaseConfigError("'server' is required for an explicit configuration")
    token = _opt_str(section, "token")
    token_file = _path(section, "token-file")
    refresh = section.get("token-refresh-interval", DEFAULT_TOKEN_REFRESH)
    if isinstance(refresh, bool) or not isinstance(refresh, int | float) or not 0 < refresh <= 60:
        raise LeaseConfigError("'token-refresh-interval' must be seconds in (0, 60]")
    return ClusterConfig(
        server=server,
        namespace=_opt_str(section, "namespace") or "default",
        credentials=Credentials(
            token=token,
            token_file=token_file,
            token_refresh=float(refresh),
            client_cert_file=_path(section, "client-certificate"),
            client_key_file=_path(section, "client-key"),
            origin="the explicit configuration",
        ),
        ca_file=_path(section, "ca-file"),
        insecure_skip_tls_verify=bool(_bool(section, "insecure-skip-tls-verify")),
        tls_server_name=_opt_str(section, "tls-server-name"),
        proxy_url=_opt_str(section, "proxy-url"),
        source="explicit configuration",
    )


def resolve_config(
    section: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    *,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    home: Path | None = None,
) -> ClusterConfig:
    """Pick the configuration by the documented precedence (module docstring)."""
    from ._kubeconfig import load_kubeconfig

    env = os.environ if env is None else env
    in_cluster = _bool(section, "in-cluster")
    namespace = _opt_str(section, "namespace")
    context = _opt_str(section, "context")
    raw_paths = section.get("kubeconfig")
    if isinstance(raw_paths, str):
        paths = [Path(p).expanduser() for p in raw_paths.split(os.pathsep) if p]
    elif isinstance(raw_paths, list) and all(isinstance(p, str) for p in raw_paths):
        paths = [Path(p).expanduser() for p in raw_paths]
    elif raw_paths is None:
        paths = []
    else:
        raise LeaseConfigError("'kubeconfig' must be a path or a list of paths")

    config: ClusterConfig
    if section.get("server"):
        config = explicit_config(section)
    elif in_cluster:
        config = in_cluster_config(env, service_account_dir)
    elif paths or context:
        if not paths:
            paths = _default_kubeconfig_paths(env, home)
        config = load_kubeconfig(paths, context=context)
    elif env.get("KUBECONFIG"):
        config = load_kubeconfig(_default_kubeconfig_paths(env, home))
    elif in_cluster is None and env.get("KUBERNETES_SERVICE_HOST"):
        config = in_cluster_config(env, service_account_dir)
    else:
        default = _default_kubeconfig_paths(env, home)
        if not any(p.exists() for p in default):
            raise LeaseConfigError(
                "no Kubernetes configuration found: set 'server' (and 'token-file') in the "
                "section, run in a pod (in-cluster), or provide a kubeconfig (KUBECONFIG or "
                "~/.kube/config)"
            )
        config = load_kubeconfig(default)
    if namespace:
        config = dataclasses.replace(config, namespace=namespace)
    return config


def _default_kubeconfig_paths(env: Mapping[str, str], home: Path | None) -> list[Path]:
    listed = env.get("KUBECONFIG")
    if listed:
        return [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
    return [(home or Path.home()) / ".kube" / "config"]
