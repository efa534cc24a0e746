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
import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml

from ..._exceptions import LeaseConfigError
from ..._paths import user_path
from ._cluster import PROXY_SCHEMES, ClusterConfig, Credentials, ExecConfig, checked_url

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
    """The files read so far, merged by clientcmd's rules: the first definition of a name wins."""

    def __init__(self) -> None:
        # name -> (entry, the file that defined it)
        self.clusters: dict[str, tuple[dict[str, Any], Path]] = {}
        self.users: dict[str, tuple[dict[str, Any], Path]] = {}
        self.contexts: dict[str, tuple[dict[str, Any], Path]] = {}
        self.current_context: str | None = None
        self.files: list[Path] = []

    def add(self, data: dict[str, Any], path: Path) -> None:
        """Merge one file's document (already read as a mapping)."""
        where = f"kubeconfig {path}"
        self.files.append(path)
        for section, key, target in (
            ("clusters", "cluster", self.clusters),
            ("users", "user", self.users),
            ("contexts", "context", self.contexts),
        ):
            for index, item in enumerate(_items(data.get(section), where, section)):
                named = _named_entry(item, where, f"{section}[{index}]", section, key)
                if named is not None:
                    target.setdefault(named[0], (named[1], path))
        current = data.get("current-context")
        if current is not None and not isinstance(current, str):
            raise _wrong(where, "current-context", "a string", current)
        if self.current_context is None and current:
            self.current_context = current


def _named_entry(
    item: object, where: str, field: str, section: str, key: str
) -> tuple[str, dict[str, Any]] | None:
    """(name, entry) of one list item of ``clusters``, ``users`` or ``contexts``.

    None for an item without a name: nothing can refer to it.
    """
    item = _mapping(item, where, field)
    name = item.get("name")
    if name is None or name == "":
        return None
    if not isinstance(name, str):
        raise _wrong(where, f"{field}.name", "a string", name)
    return name, _mapping(item.get(key), where, f"{section}[{name}].{key}")


def _read_document(path: Path) -> dict[str, Any] | None:
    """The YAML mapping in ``path``; None when the file does not exist."""
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LeaseConfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from None
    try:
        # Bytes: PyYAML detects the encoding and reports bad bytes as a ReaderError.
        data = yaml.safe_load(content)
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError) as exc:
        raise _yaml_error(path, exc) from None
    return _mapping(data, f"kubeconfig {path}", "the document")


def _load(paths: list[Path]) -> _Merged:
    merged = _Merged()
    for path in paths:
        data = _read_document(path)
        if data is not None:
            merged.add(data, path)
    return merged


def _resolve(base: Path, value: str | None, where: str) -> Path | None:
    if not value:
        return None
    path = user_path(value, where)
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
        # As client-go (clientcmd's ResolvePaths): a command with a separator is a path from
        # the kubeconfig's folder (``base`` is absolute, so ``./plugin`` keeps its folder);
        # one without is looked up on PATH.
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
    try:
        return ExecConfig(
            command=command,
            args=_strings(raw, "args", where, prefix),
            env=tuple(env),
            api_version=str(api_version),
            install_hint=_string(raw, "installHint", where, prefix) or "",
            provide_cluster_info=_flag(raw, "provideClusterInfo", where, prefix),
            interactive_mode=mode,
        )
    except LeaseConfigError as exc:  # a field no process can be started with
        raise LeaseConfigError(f"{exc} (in {where})") from None


@dataclasses.dataclass(frozen=True)
class _Entry:
    """A merged entry (a context, cluster or user): its fields, its file's folder, its name."""

    fields: dict[str, Any]
    base: Path
    #: For messages: "kubeconfig cluster 'c1' (/home/me/.kube/config)".
    where: str

    def string(self, key: str, prefix: str = "") -> str | None:
        return _string(self.fields, key, self.where, prefix)

    def path(self, key: str) -> Path | None:
        """A path field, relative to the file that named it."""
        return _resolve(self.base, self.string(key), f"{key} in {self.where}")

    def data(self, key: str) -> bytes | None:
        """A base64 ``*-data`` field, decoded."""
        return _b64(self.string(key), key, self.where)


@dataclasses.dataclass(frozen=True)
class _Selected:
    """The context ``where`` names, and its cluster and user."""

    where: str
    context: _Entry
    cluster_name: str
    cluster: _Entry
    user: _Entry


def _folder(path: Path) -> Path:
    """The absolute folder of the kubeconfig ``path``: what its relative paths start from."""
    return path.absolute().parent


def _select(merged: _Merged, shown: str, context: str | None) -> _Selected:
    """The context named ``context`` (default: the current one), its cluster and user."""
    if not merged.files:
        raise LeaseConfigError(f"no kubeconfig file found (looked at {shown})")
    name = context or merged.current_context
    if not name:
        raise LeaseConfigError(f"kubeconfig ({shown}) sets no current-context; set 'context'")
    if name not in merged.contexts:
        raise LeaseConfigError(f"context {name!r} is not defined in kubeconfig ({shown})")
    ctx, ctx_file = merged.contexts[name]
    where = f"kubeconfig context {name!r}"
    chosen = _Entry(ctx, _folder(ctx_file), f"{where} ({ctx_file})")
    cluster_name = chosen.string("cluster", "context.")
    user_name = chosen.string("user", "context.")
    if cluster_name is None or cluster_name not in merged.clusters:
        raise LeaseConfigError(f"{where} names cluster {cluster_name!r}, which is not defined")
    cluster, cluster_file = merged.clusters[cluster_name]
    user: dict[str, Any] = {}
    user_file = cluster_file
    if user_name is not None:
        if user_name not in merged.users:
            raise LeaseConfigError(f"{where} names user {user_name!r}, which is not defined")
        user, user_file = merged.users[user_name]
    return _Selected(
        where=where,
        context=chosen,
        cluster_name=cluster_name,
        cluster=_Entry(
            cluster, _folder(cluster_file), f"kubeconfig cluster {cluster_name!r} ({cluster_file})"
        ),
        user=_Entry(user, _folder(user_file), f"kubeconfig user {user_name!r} ({user_file})"),
    )


def _credentials(user: _Entry, where: str) -> Credentials:
    """The credentials of a kubeconfig user (``where``: its context, for messages)."""
    cert_data = user.data("client-certificate-data")
    key_data = user.data("client-key-data")
    cert_file = user.path("client-certificate")
    key_file = user.path("client-key")
    token_file = user.path("tokenFile")
    token = user.string("token")
    if user.fields.get("username") or user.fields.get("password"):
        raise LeaseConfigError(
            f"{where} uses username/password, which Kubernetes removed in 1.19: use a token, "
            "a client certificate or an exec plugin"
        )
    if user.fields.get("auth-provider"):
        raise LeaseConfigError(
            f"{where} uses a legacy auth-provider: switch the user to an exec plugin "
            "(for example kubelogin, gke-gcloud-auth-plugin, aws eks get-token)"
        )
    return Credentials(
        token=None if token_file else token,
        token_file=token_file,
        client_cert_file=None if cert_data else cert_file,
        client_key_file=None if key_data else key_file,
        client_cert_data=cert_data,
        client_key_data=key_data,
        exec=_exec(_mapping(user.fields.get("exec"), user.where, "exec"), user.base, user.where),
        impersonate_user=user.string("as"),
        impersonate_groups=_strings(user.fields, "as-groups", user.where),
        origin=user.where,
    )


def load_kubeconfig(paths: list[Path], *, context: str | None = None) -> ClusterConfig:
    """Merge ``paths`` and resolve ``context`` (default: the current context)."""
    merged = _load(paths)
    chosen = _select(merged, ", ".join(str(p) for p in paths), context)
    cluster = chosen.cluster
    server = cluster.string("server")
    if server is None:
        raise LeaseConfigError(f"cluster {chosen.cluster_name!r} in {chosen.where} has no server")
    checked_url(server, "server", cluster.where)
    proxy_url = cluster.string("proxy-url")
    if proxy_url is not None:
        checked_url(proxy_url, "proxy-url", cluster.where, PROXY_SCHEMES)
    ca_data = cluster.data("certificate-authority-data")
    ca_file = None if ca_data else cluster.path("certificate-authority")
    credentials = _credentials(chosen.user, chosen.where)
    namespace = chosen.context.string("namespace", "context.")
    return ClusterConfig(
        server=server,
        namespace=namespace or "default",
        credentials=credentials,
        ca_data=ca_data,
        ca_file=ca_file,
        insecure_skip_tls_verify=_flag(cluster.fields, "insecure-skip-tls-verify", cluster.where),
        tls_server_name=cluster.string("tls-server-name"),
        proxy_url=proxy_url,
        source=f"{chosen.where} ({merged.files[0]})",
        namespace_source=f"context.namespace in {chosen.context.where}" if namespace else "",
    )
