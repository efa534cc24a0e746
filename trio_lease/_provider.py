"""LeaseProvider: load leases by (name, config section, owner) from a TOML file.

A section names its backend and settings in Akka's kebab-case keys::

    [leases.nightly]
    lease-class = "sqlite"              # a registered name, or "package.module:Class"
    heartbeat-timeout = "15s"
    heartbeat-interval = "1.5s"
    lease-operation-timeout = "500ms"
    path = "/var/lib/myapp/leases.sqlite3"   # every other key goes to the backend

``provider.get_lease("report", "leases.nightly", "worker-1")`` returns the same :class:`Lease`
for the same triple. Leases of one section share one backend object (one connection pool).
Backends are found by name in the entry point group ``trio_lease.backends``, loaded lazily, and
built by :meth:`LeaseBackend.from_config` from the section's backend keys (by default, their
constructor gets them as snake_case keyword arguments).

``async with provider:`` opens the task group that hosts the heartbeats of ``acquire()`` on
every lease it hands out, and closes the backends on exit.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from collections.abc import Iterable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from ._abc import LeaseBackend
from ._exceptions import LeaseConfigError
from ._host import close_host, open_host
from ._lease import Lease, end_hosted_hold
from ._observer import LeaseObserver, observers_of
from ._outcome import ExcInfo
from ._settings import SECTION_KEYS, SETTINGS_KEYS, LeaseSettings
from ._toml import load_toml

__all__ = ["LeaseProvider", "load_backend_class"]

ENTRY_POINT_GROUP = "trio_lease.backends"

# Built-in backends, so a source checkout works without installed entry-point metadata.
_BUILTIN = {
    "memory": "trio_lease.backends.memory:MemoryBackend",
    "sqlite": "trio_lease.backends.sqlite:SqliteBackend",
    "kubernetes": "trio_lease.backends.kubernetes:KubernetesBackend",
    "etcd": "trio_lease.backends.etcd:EtcdBackend",
}


def _import_target(target: str, where: str) -> type[LeaseBackend]:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise LeaseConfigError(f"{where}: lease-class {target!r} must be a name or 'module:Class'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LeaseConfigError(
            f"{where}: cannot import {module_name!r} for lease-class {target!r} ({exc}); "
            "install the package that provides it"
        ) from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, LeaseBackend)):
        raise LeaseConfigError(f"{where}: {target!r} is not a trio_lease.abc.LeaseBackend subclass")
    return cls


def load_backend_class(lease_class: str, where: str = "lease-class") -> type[LeaseBackend]:
    """Resolve ``lease_class``: an entry point name, a built-in name, or ``module:Class``."""
    if ":" in lease_class:
        return _import_target(lease_class, where)
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == lease_class:
            return _import_target(entry.value, where)
    if lease_class in _BUILTIN:
        return _import_target(_BUILTIN[lease_class], where)
    known = sorted(
        {e.name for e in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)} | set(_BUILTIN)
    )
    raise LeaseConfigError(
        f"{where}: unknown lease-class {lease_class!r}; registered backends: {', '.join(known)} "
        "(or give 'module:Class')"
    )


def build_backend(cls: type[LeaseBackend], config: Mapping[str, Any], where: str) -> LeaseBackend:
    """Construct a backend from a section's backend keys (:meth:`LeaseBackend.from_config`).

    A TypeError or ValueError is quoted (it names a keyword or a setting), except a
    UnicodeError: its text quotes the offending byte or character and its position, which may
    be part of a secret (a password or token file that is not UTF-8), so only its kind is named.
    """
    undecodable = ""
    try:
        backend: object = cls.from_config(config)
    except LeaseConfigError as exc:
        raise LeaseConfigError(f"{where}: {exc}") from None
    except UnicodeError as exc:
        undecodable = type(exc).__name__  # raised below: not chained to the quoting error
    except (TypeError, ValueError) as exc:
        raise LeaseConfigError(f"{where}: cannot build {cls.__name__}: {exc}") from None
    if undecodable:
        raise LeaseConfigError(
            f"{where}: cannot build {cls.__name__}: a setting or a file it names is not valid "
            f"text ({undecodable}; the details are left out, they may quote a secret)"
        )
    if not isinstance(backend, LeaseBackend):
        raise LeaseConfigError(f"{where}: {cls.__name__}.from_config did not return a backend")
    return backend


class LeaseProvider:
    """Loads and caches leases from a TOML configuration (a file path or a parsed mapping)."""

    def __init__(
        self,
        config: str | os.PathLike[str] | Mapping[str, Any],
        *,
        observers: Iterable[LeaseObserver] = (),
    ) -> None:
        #: Observers given to every lease this provider loads (:class:`LeaseObserver`).
        self.observers: tuple[LeaseObserver, ...] = observers_of(observers)
        if isinstance(config, Mapping):
            self._source: str = "<configuration mapping>"
            self._config: Mapping[str, Any] = config
        else:
            path = Path(config)
            self._source = str(path)
            self._config = load_toml(path)
        self._leases: dict[tuple[str, str, str], Lease] = {}
        self._backends: dict[str, tuple[LeaseBackend, LeaseSettings]] = {}
        self._stack: AsyncExitStack | None = None
        self._host: anyio.abc.TaskGroup | None = None

    def _section(self, config_path: str) -> Mapping[str, Any]:
        node: Any = self._config
        walked: list[str] = []
        for part in config_path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                here = ".".join(walked) or "the top level"
                options = (
                    sorted(k for k, v in node.items() if isinstance(v, Mapping))
                    if (isinstance(node, Mapping))
                    else []
                )
                raise LeaseConfigError(
                    f"{self._source}: no section [{config_path}] (no key {part!r} under {here}; "
                    f"sections there: {', '.join(options) or 'none'})"
                )
            node = node[part]
            walked.append(part)
        if not isinstance(node, Mapping):
            raise LeaseConfigError(f"{self._source}: [{config_path}] is a value, not a section")
        return node

    def _backend_for(self, config_path: str) -> tuple[LeaseBackend, LeaseSettings]:
        cached = self._backends.get(config_path)
        if cached is not None:
            return cached
        section = self._section(config_path)
        where = f"{self._source} [{config_path}]"
        lease_class = section.get("lease-class")
        if not isinstance(lease_class, str) or not lease_class:
            raise LeaseConfigError(
                f'{where}: lease-class must be set (e.g. lease-class = "sqlite")'
            )
        settings = self._settings_for(config_path)
        backend_keys = {k: v for k, v in section.items() if k not in SECTION_KEYS}
        backend = build_backend(load_backend_class(lease_class, where), backend_keys, where)
        self._backends[config_path] = (backend, settings)
        return backend, settings

    def _settings_for(self, config_path: str) -> LeaseSettings:
        """The timings the section at ``config_path`` sets (unset ones follow from those set)."""
        return _section_settings(self._section(config_path), f"{self._source} [{config_path}]")

    def get_lease(self, name: str, config_path: str, owner: str) -> Lease:
        """The lease ``name`` for ``owner``, configured by the section at ``config_path``.

        The same (name, config_path, owner) always returns the same :class:`Lease` object.
        """
        key = (name, config_path, owner)
        lease = self._leases.get(key)
        if lease is None:
            backend, settings = self._backend_for(config_path)
            lease = Lease(name, owner, backend, settings, observers=self.observers)
            lease.attach_host(self._host)
            self._leases[key] = lease
        return lease

    async def __aenter__(self) -> LeaseProvider:
        self._stack, self._host = await open_host()
        for lease in self._leases.values():
            lease.attach_host(self._host)
        return self

    async def __aexit__(self, *exc_info: *ExcInfo) -> bool | None:
        stack, self._stack = self._stack, None

        async def end_holds_and_close_backends() -> None:
            with anyio.CancelScope(shield=True):  # noqa: ASYNC912  a shield; each await in it is bounded
                for lease in self._leases.values():
                    await end_hosted_hold(lease)
                    lease.attach_host(None)
                for backend, _ in self._backends.values():
                    with anyio.move_on_after(5):
                        await backend.aclose()

        try:
            return await close_host(stack, end_holds_and_close_backends, *exc_info)  # noqa: ASYNC102  close_host: its cleanup is shielded above
        finally:
            self._host = None


def _section_settings(section: Mapping[str, Any], where: str) -> LeaseSettings:
    """The lease settings a configuration section gives (kebab-case keys only)."""
    snake = [k for k in section if "_" in k and k.replace("_", "-") in SETTINGS_KEYS]
    if snake:
        raise LeaseConfigError(f"{where}: use kebab-case keys: {', '.join(snake)}")
    try:
        return LeaseSettings.from_mapping({k: v for k, v in section.items() if k in SETTINGS_KEYS})
    except LeaseConfigError as exc:
        raise LeaseConfigError(f"{where}: {exc}") from None
