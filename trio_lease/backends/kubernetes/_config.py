"""Where the cluster configuration comes from: explicit keys, in-cluster or a kubeconfig.

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
file; kubeconfig: the context's), else ``"default"``. An invalid namespace is an error naming
where it came from; a namespace file that exists but cannot be read or is not UTF-8 is an error
naming the file, never a silent ``"default"``. Paths (``~`` expanded by
:func:`~trio_lease._paths.user_path`), ``KUBERNETES_SERVICE_PORT`` and the server URL are
checked as they are read, and a problem names the key or variable.

The types built here (:class:`ClusterConfig`, :class:`Credentials`) are in :mod:`._cluster`;
kubeconfig files are read by :mod:`._kubeconfig`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..._exceptions import LeaseConfigError
from ..._paths import user_path
from ._cluster import DEFAULT_TOKEN_REFRESH, ClusterConfig, Credentials, url_problem
from ._kubeconfig import load_kubeconfig

__all__ = ["SERVICE_ACCOUNT_DIR", "explicit_config", "in_cluster_config", "resolve_config"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_SECTION_NAMESPACE = "'namespace' in the kubernetes section"


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _namespace_file(path: Path) -> str | None:
    """The service account's namespace file, stripped; None when it is missing or empty.

    A file that exists but cannot be read or is not UTF-8 is an error naming it: falling back
    to ``default`` would put the leases in another namespace without a word.
    """
    try:
        return path.read_bytes().decode("utf-8").strip() or None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LeaseConfigError(
            f"cannot read the service account's namespace file {path}: "
            f"{exc.strerror or type(exc).__name__}; set POD_NAMESPACE or 'namespace'"
        ) from None
    except UnicodeDecodeError:
        raise LeaseConfigError(
            f"the service account's namespace file {path} is not UTF-8 text; set "
            "POD_NAMESPACE or 'namespace'"
        ) from None


def _service_port(port: str) -> str:
    """``KUBERNETES_SERVICE_PORT``, checked: a number from 1 to 65535."""
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise LeaseConfigError(
            f"KUBERNETES_SERVICE_PORT={port!r} is not a port number from 1 to 65535; the "
            "kubelet sets it in every pod: fix or unset it"
        )
    return port


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
    server = f"https://{_bracket(host)}:{_service_port(port)}"
    problem = url_problem(server)
    if problem is not None:
        raise LeaseConfigError(
            f"KUBERNETES_SERVICE_HOST={host!r} does not make a server URL: it {problem}; the "
            "kubelet sets it in every pod: fix or unset it"
        )
    ca_file = root / "ca.crt"
    namespace, namespace_source = env.get("POD_NAMESPACE"), "POD_NAMESPACE"
    if not namespace:
        namespace_file = root / "namespace"
        namespace = _namespace_file(namespace_file)
        namespace_source = f"the service account's namespace file {namespace_file}"
    return ClusterConfig(
        server=server,
        namespace=namespace or "default",
        credentials=Credentials(token_file=token_file, origin="the in-cluster service account"),
        ca_file=ca_file if ca_file.exists() else None,
        source="in-cluster",
        namespace_source=namespace_source if namespace else "",
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
    return user_path(value, f"'{key}' in the kubernetes section") if value else None


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
    namespace = _opt_str(section, "namespace")
    return ClusterConfig(
        server=server,
        namespace=namespace or "default",
        namespace_source=_SECTION_NAMESPACE if namespace else "",
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
    env = os.environ if env is None else env
    in_cluster = _bool(section, "in-cluster")
    namespace = _opt_str(section, "namespace")
    context = _opt_str(section, "context")
    paths = _listed_paths(section)

    def defaults() -> list[Path]:
        return _default_kubeconfig_paths(env, home)

    def pod() -> ClusterConfig:
        return in_cluster_config(env, service_account_dir)

    #: (whether the step applies, how it builds the configuration), in precedence order.
    steps: tuple[tuple[bool, Callable[[], ClusterConfig]], ...] = (
        (bool(section.get("server")), lambda: explicit_config(section)),
        (bool(in_cluster), pod),
        (bool(paths or context), lambda: load_kubeconfig(paths or defaults(), context=context)),
        (bool(env.get("KUBECONFIG")), lambda: _named_by_kubeconfig_variable(defaults())),
        (in_cluster is None and bool(env.get("KUBERNETES_SERVICE_HOST")), pod),
    )
    build = next((build for applies, build in steps if applies), None)
    config = build() if build is not None else _home_kubeconfig(defaults())
    if namespace:
        config = dataclasses.replace(
            config, namespace=namespace, namespace_source=_SECTION_NAMESPACE
        )
    return config


def _named_by_kubeconfig_variable(paths: list[Path]) -> ClusterConfig:
    """The kubeconfig files KUBECONFIG lists; an error about them names the variable."""
    try:
        return load_kubeconfig(paths)
    except LeaseConfigError as exc:
        raise LeaseConfigError(f"KUBECONFIG: {exc}") from None


def _split(listed: str, where: str) -> list[Path]:
    return [user_path(p, where) for p in listed.split(os.pathsep) if p]


def _listed_paths(section: Mapping[str, Any]) -> list[Path]:
    """The section's ``kubeconfig``: a path list (``os.pathsep``) or a list of paths."""
    raw_paths = section.get("kubeconfig")
    if raw_paths is None:
        return []
    where = "'kubeconfig' in the kubernetes section"
    if isinstance(raw_paths, str):
        return _split(raw_paths, where)
    if isinstance(raw_paths, list) and all(isinstance(p, str) for p in raw_paths):
        return [user_path(p, where) for p in raw_paths]
    raise LeaseConfigError("'kubeconfig' must be a path or a list of paths")


def _default_kubeconfig_paths(env: Mapping[str, str], home: Path | None) -> list[Path]:
    listed = env.get("KUBECONFIG")
    if listed:
        return _split(listed, "KUBECONFIG")
    return [(home or user_path("~", "the default kubeconfig ~/.kube/config")) / ".kube" / "config"]


def _home_kubeconfig(default: list[Path]) -> ClusterConfig:
    """The last step: ~/.kube/config, which must exist."""
    if not any(p.exists() for p in default):
        raise LeaseConfigError(
            "no Kubernetes configuration found: set 'server' (and 'token-file') in the "
            "section, run in a pod (in-cluster), or provide a kubeconfig (KUBECONFIG or "
            "~/.kube/config)"
        )
    return load_kubeconfig(default)
