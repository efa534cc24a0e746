"""kubeconfig loading with clientcmd's merge rules.

- ``KUBECONFIG`` is a list of files (``os.pathsep``); missing files are skipped.
- For clusters, users and contexts (maps by name) the *first* file defining a name wins; the
  first file that sets ``current-context`` wins.
- Relative paths (``certificate-authority``, ``client-certificate``, ``client-key``,
  ``tokenFile``, an exec ``command`` containing a separator) resolve against the directory of
  the file that named them.
- ``*-data`` fields win over paths; ``tokenFile`` wins over ``token`` (it is re-read);
  ``insecure-skip-tls-verify`` with a CA is an error.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

import yaml

from ..._exceptions import LeaseConfigError
from ._config import ClusterConfig, Credentials, ExecConfig

__all__ = ["load_kubeconfig"]

_EXEC_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class _Merged:
    def __init__(self) -> None:
        # name -> (entry, directory of the file that defined it)
        self.clusters: dict[str, tuple[dict[str, Any], Path]] = {}
        self.users: dict[str, tuple[dict[str, Any], Path]] = {}
        self.contexts: dict[str, dict[str, Any]] = {}
        self.current_context: str | None = None
        self.files: list[Path] = []


def _load(paths: list[Path]) -> _Merged:
    merged = _Merged()
    for path in paths:
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise LeaseConfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise LeaseConfigError(f"kubeconfig {path} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise LeaseConfigError(f"kubeconfig {path} is not a mapping")
        merged.files.append(path)
        base = path.parent
        for section, key, target in (
            ("clusters", "cluster", merged.clusters),
            ("users", "user", merged.users),
        ):
            for item in data.get(section) or []:
                if isinstance(item, dict) and isinstance(item.get("name"), str):
                    target.setdefault(item["name"], (item.get(key) or {}, base))
        for item in data.get("contexts") or []:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                merged.contexts.setdefault(item["name"], item.get("context") or {})
        current = data.get("current-context")
        if merged.current_context is None and isinstance(current, str) and current:
            merged.current_context = current
    return merged


def _resolve(base: Path, value: object) -> Path | None:
    if not isinstance(value, str) or not value:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _b64(value: object, what: str, where: str) -> bytes | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        raise LeaseConfigError(f"{what} in {where} is not valid base64") from None


def _exec(raw: object, base: Path, where: str) -> ExecConfig | None:
    if not isinstance(raw, dict):
        return None
    command = raw.get("command")
    if not isinstance(command, str) or not command:
        raise LeaseConfigError(f"the exec plugin in {where} has no command")
    api_version = raw.get("apiVersion")
    if api_version not in _EXEC_VERSIONS:
        raise LeaseConfigError(
            f"the exec plugin in {where} has apiVersion {api_version!r}; use "
            "client.authentication.k8s.io/v1"
        )
    if "/" in command and not Path(command).is_absolute():
        command = str(base / command)
    env = tuple(
        (str(e["name"]), str(e.get("value", "")))
        for e in raw.get("env") or []
        if isinstance(e, dict) and "name" in e
    )
    return ExecConfig(
        command=command,
        args=tuple(str(a) for a in raw.get("args") or []),
        env=env,
        api_version=str(api_version),
        install_hint=str(raw.get("installHint") or ""),
        provide_cluster_info=bool(raw.get("provideClusterInfo")),
        interactive_mode=str(raw.get("interactiveMode") or "Never"),
    )


def load_kubeconfig(paths: list[Path], *, context: str | None = None) -> ClusterConfig:
    """Merge ``paths`` and resolve ``context`` (default: the current context)."""
    merged = _load(paths)
    shown = ", ".join(str(p) for p in paths)
    if not merged.files:
        raise LeaseConfigError(f"no kubeconfig file found (looked at {shown})")
    name = context or merged.current_context
    if not name:
        raise LeaseConfigError(f"kubeconfig ({shown}) sets no current-context; set 'context'")
    ctx = merged.contexts.get(name)
    if ctx is None:
        raise LeaseConfigError(f"context {name!r} is not defined in kubeconfig ({shown})")
    where = f"kubeconfig context {name!r}"
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if not isinstance(cluster_name, str) or cluster_name not in merged.clusters:
        raise LeaseConfigError(f"{where} names cluster {cluster_name!r}, which is not defined")
    cluster, cluster_base = merged.clusters[cluster_name]
    user: dict[str, Any] = {}
    user_base = cluster_base
    if isinstance(user_name, str) and user_name:
        if user_name not in merged.users:
            raise LeaseConfigError(f"{where} names user {user_name!r}, which is not defined")
        user, user_base = merged.users[user_name]

    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise LeaseConfigError(f"cluster {cluster_name!r} in {where} has no server")
    ca_data = _b64(cluster.get("certificate-authority-data"), "certificate-authority-data", where)
    ca_file = None if ca_data else _resolve(cluster_base, cluster.get("certificate-authority"))
    cert_data = _b64(user.get("client-certificate-data"), "client-certificate-data", where)
    key_data = _b64(user.get("client-key-data"), "client-key-data", where)
    token_file = _resolve(user_base, user.get("tokenFile"))
    token = user.get("token") if isinstance(user.get("token"), str) else None
    if user.get("username") or user.get("password"):
        raise LeaseConfigError(
            f"{where} uses username/password, which Kubernetes removed in 1.19: use a token, "
            "a client certificate or an exec plugin"
        )
    if user.get("auth-provider"):
        raise LeaseConfigError(
            f"{where} uses a legacy auth-provider: switch the user to an exec plugin "
            "(for example kubelogin, gke-gcloud-auth-plugin, aws eks get-token)"
        )
    groups = user.get("as-groups") or []
    credentials = Credentials(
        token=None if token_file else token,
        token_file=token_file,
        client_cert_file=None if cert_data else _resolve(user_base, user.get("client-certificate")),
        client_key_file=None if key_data else _resolve(user_base, user.get("client-key")),
        client_cert_data=cert_data,
        client_key_data=key_data,
        exec=_exec(user.get("exec"), user_base, where),
        impersonate_user=user.get("as") if isinstance(user.get("as"), str) else None,
        impersonate_groups=tuple(str(g) for g in groups if isinstance(g, str)),
    )
    namespace = ctx.get("namespace")
    return ClusterConfig(
        server=server,
        namespace=namespace if isinstance(namespace, str) and namespace else "default",
        credentials=credentials,
        ca_data=ca_data,
        ca_file=ca_file,
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy_url=cluster.get("proxy-url") or None,
        source=f"{where} ({merged.files[0]})",
    )
