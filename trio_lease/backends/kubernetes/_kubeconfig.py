"""kubeconfig loading with clientcmd's merge rules.

- ``KUBECONFIG`` is a list of files (``os.pathsep``); missing files are skipped.
- For clusters, users and contexts (maps by name) the *first* file defining a name wins; the
  first file that sets ``current-context`` wins.
- Relative paths (``certificate-authority``, ``client-certificate``, ``client-key``,
  ``tokenFile``, an exec ``command`` containing a separator) resolve against the directory of
  the file that named them.
- ``*-data`` fields win over paths; ``tokenFile`` wins over ``token`` (it is re-read);
  ``insecure-skip-tls-verify`` with a CA is an error.

A kubeconfig holds secrets (tokens, client keys), so no error quotes it: a file PyYAML cannot
parse is reported by path, line, column and PyYAML's description of the problem (never the
exception's ``str()``, which shows the offending lines), and a field of the wrong type by its
path in the file (``users[u1].user.as-groups``) and the type found, never the value. Fields are
checked by type where we read them: a YAML ``insecure-skip-tls-verify: "false"`` (a string) is
an error, not a true value, and ``as-groups: admins`` (not a list) is an error, not six groups of
one letter. The token's characters are checked where it is used (:mod:`._auth`).
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path
from typing import Any

import yaml

from ..._exceptions import LeaseConfigError
from ._config import ClusterConfig, Credentials, ExecConfig

__all__ = ["load_kubeconfig"]

_EXEC_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
_INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
#: Quoted parts of a PyYAML problem kept in messages: its token names (``'<block end>'``) and
#: single characters (``'\t'``); anything longer (an alias, a tag) may be file content.
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _safe(description: str) -> str:
    def keep(match: re.Match[str]) -> str:
        inner = match.group(0)[1:-1]
        return match.group(0) if len(inner) <= 6 or re.fullmatch(r"<[a-z ]+>", inner) else "'…'"

    return _QUOTED.sub(keep, description)


def _yaml_error(path: Path, exc: BaseException) -> LeaseConfigError:
    """A message for a file PyYAML refused: where and what, never the file's lines."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = _safe(exc.problem or exc.context or "unreadable")
        context = f" ({_safe(exc.context)})" if exc.problem and exc.context else ""
        return LeaseConfigError(f"kubeconfig {path} is not valid YAML{where}: {what}{context}")
    if isinstance(exc, yaml.reader.ReaderError):
        return LeaseConfigError(
            f"kubeconfig {path} is not valid UTF-8 text or holds a character YAML does not "
            f"allow, at offset {exc.position}"
        )
    if isinstance(exc, RecursionError):
        return LeaseConfigError(f"kubeconfig {path} nests too deeply to be read")
    # ValueError and the like from PyYAML's constructors (a date such as 2001-13-45).
    return LeaseConfigError(f"kubeconfig {path} holds a value YAML cannot construct")


def _type(value: object) -> str:
    for kind, name in ((bool, "a boolean"), (int, "a number"), (float, "a number"),
                       (str, "a string"), (list, "a list"), (dict, "a mapping"),
                       (bytes, "binary data")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def _wrong(where: str, field: str, expected: str, value: object) -> LeaseConfigError:
    return LeaseConfigError(f"{field} in {where} must be {expected}, got {_type(value)}")


def _mapping(value: object, where: str, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _wrong(where, field, "a mapping", value)
    return value


def _items(value: object, where: str, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _wrong(where, field, "a list", value)
    return value


def _string(entry: dict[str, Any], key: str, where: str, prefix: str = "") -> str | None:
    """``entry[key]`` as a non-empty string, None when absent, null or empty."""
    value = entry.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _wrong(where, prefix + key, "a string (quote it in YAML)", value)
    return value


def _flag(entry: dict[str, Any], key: str, where: str, prefix: str = "") -> bool:
    value = entry.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _wrong(where, prefix + key, "true or false", value)
    return value


def _strings(entry: dict[str, Any], key: str, where: str, prefix: str = "") -> tuple[str, ...]:
    values = _items(entry.get(key), where, prefix + key)
    if not all(isinstance(v, str) for v in values):
        raise LeaseConfigError(f"{prefix}{key} in {where} must be a list of strings")
    return tuple(values)


class _Merged:
    def __init__(self) -> None:
        # name -> (entry, the file that defined it)
        self.clusters: dict[str, tuple[dict[str, Any], Path]] = {}
        self.users: dict[str, tuple[dict[str, Any], Path]] = {}
        self.contexts: dict[str, tuple[dict[str, Any], Path]] = {}
        self.current_context: str | None = None
        self.files: list[Path] = []


def _load(paths: list[Path]) -> _Merged:
    merged = _Merged()
    for path in paths:
        try:
            content = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise LeaseConfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from None
        try:
            # Bytes: PyYAML detects the encoding and reports bad bytes as a ReaderError.
            data = yaml.safe_load(content)
        except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError) as exc:
            raise _yaml_error(path, exc) from None
        where = f"kubeconfig {path}"
        data = _mapping(data, where, "the document")
        merged.files.append(path)
        for section, key, target in (
            ("clusters", "cluster", merged.clusters),
            ("users", "user", merged.users),
            ("contexts", "context", merged.contexts),
        ):
            for index, item in enumerate(_items(data.get(section), where, section)):
                field = f"{section}[{index}]"
                item = _mapping(item, where, field)
                name = item.get("name")
                if name is None or name == "":
                    continue  # nothing can refer to an entry without a name
                if not isinstance(name, str):
                    raise _wrong(where, f"{field}.name", "a string", name)
                entry = _mapping(item.get(key), where, f"{section}[{name}].{key}")
                target.setdefault(name, (entry, path))
        current = data.get("current-context")
        if current is not None and not isinstance(current, str):
            raise _wrong(where, "current-context", "a string", current)
        if merged.current_context is None and current:
            merged.current_context = current
    return merged


def _resolve(base: Path, value: str | None) -> Path | None:
    if not value:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _b64(value: str | None, what: str, where: str) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        raise LeaseConfigError(f"{what} in {where} is not valid base64") from None


def _exec(raw: dict[str, Any], base: Path, where: str) -> ExecConfig | None:
    if not raw:
        return None
    prefix = "exec."
    command = _string(raw, "command", where, prefix)
    if command is None:
        raise LeaseConfigError(f"the exec plugin in {where} has no command")
    api_version = raw.get("apiVersion")
    if api_version not in _EXEC_VERSIONS:
        shown = repr(api_version) if isinstance(api_version, str) else _type(api_version)
        raise LeaseConfigError(
            f"the exec plugin in {where} has apiVersion {shown}; use "
            "client.authentication.k8s.io/v1"
        )
    if "/" in command and not Path(command).is_absolute():
        command = str(base / command)
    env: list[tuple[str, str]] = []
    for index, item in enumerate(_items(raw.get("env"), where, "exec.env")):
        item = _mapping(item, where, f"exec.env[{index}]")
        name = _string(item, "name", where, f"exec.env[{index}].")
        value = item.get("value")
        if name is None or not isinstance(value, str | None):
            raise LeaseConfigError(
                f"exec.env[{index}] in {where} must have a string name and a string value"
            )
        env.append((name, value or ""))
    mode = _string(raw, "interactiveMode", where, prefix) or "Never"
    if mode not in _INTERACTIVE_MODES:
        raise LeaseConfigError(
            f"exec.interactiveMode in {where} must be one of {', '.join(_INTERACTIVE_MODES)}"
        )
    return ExecConfig(
        command=command,
        args=_strings(raw, "args", where, prefix),
        env=tuple(env),
        api_version=str(api_version),
        install_hint=_string(raw, "installHint", where, prefix) or "",
        provide_cluster_info=_flag(raw, "provideClusterInfo", where, prefix),
        interactive_mode=mode,
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
    if name not in merged.contexts:
        raise LeaseConfigError(f"context {name!r} is not defined in kubeconfig ({shown})")
    ctx, ctx_file = merged.contexts[name]
    where = f"kubeconfig context {name!r}"
    ctx_where = f"{where} ({ctx_file})"
    cluster_name = _string(ctx, "cluster", ctx_where, "context.")
    user_name = _string(ctx, "user", ctx_where, "context.")
    if cluster_name is None or cluster_name not in merged.clusters:
        raise LeaseConfigError(f"{where} names cluster {cluster_name!r}, which is not defined")
    cluster, cluster_file = merged.clusters[cluster_name]
    cluster_where = f"kubeconfig cluster {cluster_name!r} ({cluster_file})"
    user: dict[str, Any] = {}
    user_file = cluster_file
    if user_name is not None:
        if user_name not in merged.users:
            raise LeaseConfigError(f"{where} names user {user_name!r}, which is not defined")
        user, user_file = merged.users[user_name]
    user_where = f"kubeconfig user {user_name!r} ({user_file})"
    cluster_base, user_base = cluster_file.parent, user_file.parent

    server = _string(cluster, "server", cluster_where)
    if server is None:
        raise LeaseConfigError(f"cluster {cluster_name!r} in {where} has no server")
    ca_data = _b64(
        _string(cluster, "certificate-authority-data", cluster_where),
        "certificate-authority-data",
        cluster_where,
    )
    ca_file = None
    if not ca_data:
        ca_file = _resolve(cluster_base, _string(cluster, "certificate-authority", cluster_where))
    cert_data = _b64(
        _string(user, "client-certificate-data", user_where), "client-certificate-data",
        user_where,
    )
    key_data = _b64(_string(user, "client-key-data", user_where), "client-key-data", user_where)
    cert_file = _resolve(user_base, _string(user, "client-certificate", user_where))
    key_file = _resolve(user_base, _string(user, "client-key", user_where))
    token_file = _resolve(user_base, _string(user, "tokenFile", user_where))
    token = _string(user, "token", user_where)
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
    credentials = Credentials(
        token=None if token_file else token,
        token_file=token_file,
        client_cert_file=None if cert_data else cert_file,
        client_key_file=None if key_data else key_file,
        client_cert_data=cert_data,
        client_key_data=key_data,
        exec=_exec(_mapping(user.get("exec"), user_where, "exec"), user_base, user_where),
        impersonate_user=_string(user, "as", user_where),
        impersonate_groups=_strings(user, "as-groups", user_where),
        origin=user_where,
    )
    namespace = _string(ctx, "namespace", ctx_where, "context.")
    return ClusterConfig(
        server=server,
        namespace=namespace or "default",
        credentials=credentials,
        ca_data=ca_data,
        ca_file=ca_file,
        insecure_skip_tls_verify=_flag(cluster, "insecure-skip-tls-verify", cluster_where),
        tls_server_name=_string(cluster, "tls-server-name", cluster_where),
        proxy_url=_string(cluster, "proxy-url", cluster_where),
        source=f"{where} ({merged.files[0]})",
    )
