"""Options shared by the commands, and how they resolve to a backend and its settings.

Every option but ``release --force`` can come from the command line or from an environment
variable ``TRIO_LEASE_<OPTION>`` (``TRIO_LEASE_SQLITE_PATH``, ``TRIO_LEASE_OWNER``,
``TRIO_LEASE_NO_WAIT=1``); the environment gives the parser's defaults, so the command line
wins. The backend comes from ``--config FILE --section PATH`` (a LeaseProvider TOML section),
else from ``--backend NAME``, else from the backend whose options are given
(:data:`BACKEND_FLAGS`: kubectl's and etcdctl's names; :func:`chosen_backend`), else
``sqlite`` at the per-user path (an explicit ``--sqlite-path`` must be in a folder that
exists). The etcd password comes only from ``--password-file`` or ``TRIO_LEASE_PASSWORD``,
never from the command line. Timings: the command
line, else the environment, else the ``--config`` section (as LeaseProvider reads it), else,
without ``--config``, :data:`CLI_DEFAULTS`; but when the heartbeat timeout is given and another
timing is not, that one follows from it as in :class:`~trio_lease.LeaseSettings` (R = L/10 ...),
so ``--heartbeat-timeout 3s`` alone is valid. ``--anyio-backend`` picks the event loop.

A bad value is a configuration error (exit 78) naming where it came from: the variable for a
value from the environment (:func:`env_value`, :func:`env_flag`; argparse checks neither types
nor choices on a default), the option or variable for a path (:func:`source_of`).
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .._abc import LeaseBackend
from .._exceptions import LeaseConfigError
from .._paths import user_path
from .._provider import LeaseProvider, build_backend, load_backend_class
from .._settings import LeaseSettings, parse_duration
from ._backend_flags import BACKEND_FLAGS, PASSWORD_VARIABLE, BackendFlag

__all__ = [
    "ANYIO_BACKENDS",
    "CLI_DEFAULTS",
    "add_backend_options",
    "add_owner_option",
    "check_settings",
    "default_owner",
    "duration",
    "env",
    "env_flag",
    "env_value",
    "lease_name",
    "open_backend",
    "run_settings",
    "source_of",
]

T = TypeVar("T")

#: The event loops ``--anyio-backend`` offers.
ANYIO_BACKENDS = ("asyncio", "trio")

#: Timings when neither the command line, the environment nor a --config section sets them.
CLI_DEFAULTS: dict[str, str] = {
    "heartbeat_timeout": "15s",
    "heartbeat_interval": "2s",
    "lease_operation_timeout": "1s",
    "stop_timeout": "2s",
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env(name: str, default: str | None = None) -> str | None:
    """The option ``name`` from the environment (``TRIO_LEASE_<NAME>``), else ``default``."""
    return os.environ.get(_env_name(name), default)


def _env_name(name: str) -> str:
    return f"TRIO_LEASE_{name.upper().replace('-', '_')}"


def env_value(name: str, convert: Callable[[str], T]) -> T | None:
    """The option ``name`` from the environment, converted as its flag's argparse type does;
    None if unset. A bad value is a :class:`LeaseConfigError` naming the variable (exit 78)."""
    value = env(name)
    if value is None:
        return None
    try:
        return convert(value)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise LeaseConfigError(f"{_env_name(name)}={value!r}: {exc}") from None


def source_of(args: argparse.Namespace, name: str) -> str:
    """Where the option ``name`` got its value, for messages: its flag if it was given on the
    command line (:class:`_Given` noted it), else its environment variable."""
    flag = f"--{name.replace('_', '-')}"
    return flag if name in getattr(args, _GIVEN, ()) else _env_name(name)


_GIVEN = "given_on_command_line"


class _Given(argparse.Action):
    """``store``, noting that the option was given on the command line (see :func:`source_of`)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, _GIVEN, {*getattr(namespace, _GIVEN, ()), self.dest})


def env_flag(name: str) -> bool | None:
    """A boolean option from the environment (1/true/yes/on, 0/false/no/off), None if unset."""
    value = env(name)
    if value is None:
        return None
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise LeaseConfigError(f"{_env_name(name)}={value!r}: use 1/true/yes/on or 0/false/no/off")


def default_owner() -> str:
    """``TRIO_LEASE_OWNER``, else ``POD_NAME`` (Kubernetes downward API), else the hostname."""
    return env("owner") or os.environ.get("POD_NAME") or socket.gethostname()


def add_owner_option(parser: argparse.ArgumentParser) -> None:
    """``--owner``: the owner name a command holds the lease as, or asks for it as."""
    parser.add_argument(
        "--owner",
        default=default_owner(),
        help="owner name (default: TRIO_LEASE_OWNER, else POD_NAME, else the hostname)",
    )


def duration(value: str) -> float:
    """An argparse type: seconds or a duration (``30``, ``30s``, ``2m``), 0 or more."""
    if value.strip().startswith("-"):
        raise argparse.ArgumentTypeError(
            f"durations must be positive, got {value!r} (seconds or '1.5s', '250ms', '2m')"
        )
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_duration(value: str) -> float:
    """An argparse type: a duration above zero (a wait of 0 s or less is a typo)."""
    seconds = duration(value)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(
            f"durations must be positive (more than 0 s), got {value!r}"
        )
    return seconds


def slot_count(value: str) -> int:
    """An argparse type: a whole number of slots, at least 1."""
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value!r}")
    return count


def _anyio_backend(value: str) -> str:
    if value not in ANYIO_BACKENDS:
        raise argparse.ArgumentTypeError(f"use {' or '.join(ANYIO_BACKENDS)}")
    return value


def lease_name(value: str) -> str:
    """An argparse type: a lease name that is not blank."""
    if not value.strip():
        raise argparse.ArgumentTypeError("a lease name cannot be blank")
    return value


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """The backend and timing options of every command that touches leases."""
    group = parser.add_argument_group("backend")
    group.add_argument("--config", default=env("config"), help="LeaseProvider TOML file")
    group.add_argument(
        "--section", default=env("section"), help="section path in --config (needs --config)"
    )
    group.add_argument(
        "--backend",
        action=_Given,
        default=env("backend"),
        help="backend name when no --config is given (default: the backend whose options are "
        "given, else sqlite)",
    )
    group.add_argument(
        "--sqlite-path",
        action=_Given,
        default=env("sqlite_path"),
        help="SQLite file; its folder must exist (default: a per-user path, created)",
    )
    for backend in ("kubernetes", "etcd"):
        options = parser.add_argument_group(f"{backend} (naming one selects {backend})")
        for backend_flag in BACKEND_FLAGS:
            if backend_flag.backend == backend:
                options.add_argument(
                    backend_flag.flag,
                    dest=backend_flag.dest,
                    action=_Given,
                    default=env(backend_flag.dest),
                    metavar=backend_flag.metavar,
                    help=backend_flag.help,
                )
    group.add_argument(
        "--anyio-backend",
        choices=ANYIO_BACKENDS,
        # argparse checks choices on the command line only, never on a default.
        default=env_value("anyio_backend", _anyio_backend) or "asyncio",
        help="event loop to run on (default: asyncio)",
    )
    add_timing_options(parser)


def add_timing_options(parser: argparse.ArgumentParser) -> None:
    """The timing options (``check`` has them too, to check a set of timings)."""
    timing = parser.add_argument_group("timing (seconds or '1.5s', '250ms', '2m')")
    for option, default in [*CLI_DEFAULTS.items(), ("holder_deadline", "")]:
        flag = option.replace("_", "-")
        kind = duration if option == "stop_timeout" else positive_duration
        # None means "not given": the --config section, else CLI_DEFAULTS, decides.
        timing.add_argument(
            f"--{flag}",
            dest=option,
            type=kind,
            action=_Given,
            default=env_value(option, kind),
            help=_TIMING_HELP[option].format(default=default),
        )


_TIMING_HELP = {
    "heartbeat_timeout": "how long a silent holder keeps the lease (default: {default})",
    "heartbeat_interval": (
        "how often the holder renews (default: {default}, or a tenth of the heartbeat timeout "
        "when that is given)"
    ),
    "lease_operation_timeout": (
        "the longest one request may take (default: {default}, or half the heartbeat interval, "
        "at most 5s, when the heartbeat timeout is given)"
    ),
    "stop_timeout": (
        "how long the command has from SIGTERM to SIGKILL (default: {default}, or 1s when the "
        "heartbeat timeout is given and the safety margin holds it)"
    ),
    "holder_deadline": (
        "how long after its last confirmed renewal the holder still counts itself the holder "
        "(default: max(2/3 of the heartbeat timeout, interval + 2 operation timeouts); for "
        "--lease-kind akka.io/v1 at most heartbeat timeout - 3 intervals)"
    ),
}

#: The timing options, CLI_DEFAULTS' and holder_deadline (which has no fixed default).
TIMINGS = (*CLI_DEFAULTS, "holder_deadline")

#: --lease-kind values whose expiry is judged by wall clocks (Akka's CRD): the holder's
#: deadline must leave room for clock skew (see KubernetesBackend.validate_settings).
WALL_CLOCK_KINDS = ("akka.io/v1",)


def check_settings(args: argparse.Namespace) -> Callable[[LeaseBackend], LeaseSettings]:
    """:func:`run_settings` for the backend ``check`` builds from the same options, with the
    ``--config`` section's timings as ``run`` reads them: given to ``check`` as
    ``args.run_settings``."""

    def settings(backend: LeaseBackend) -> LeaseSettings:
        section = LeaseProvider(args.config)._settings_for(args.section) if args.config else None
        return run_settings(args, backend, section)

    return settings


def run_settings(
    args: argparse.Namespace, backend: LeaseBackend, section: LeaseSettings | None = None
) -> LeaseSettings:
    """The timings ``run`` holds a lease with, checked against ``backend``'s rules (a
    Kubernetes lease kind's): :func:`settings_from` the options over ``section`` (the
    ``--config`` section's timings), then the backend's own check, as the lease makes it.
    ``check`` checks the same. A broken rule is a configuration error naming the section's
    TOML keys and the options that set what it names."""
    settings = settings_from(args, section)
    try:
        backend.validate_settings(settings)
    except LeaseConfigError as exc:
        raise LeaseConfigError(_named_flags(str(exc), args)) from None
    return settings


def settings_from(args: argparse.Namespace, base: LeaseSettings | None = None) -> LeaseSettings:
    """Timings given on the command line or in the environment, over ``base`` (a section).

    Without a section and without ``--holder-deadline``, a wall-clock lease kind
    (``--lease-kind akka.io/v1``) gets the longest deadline its rule allows when the default
    one is longer, so the defaults work for every lease kind. Rules the timings break are a
    configuration error naming the options that fix them.
    """
    given = {option: getattr(args, option, None) for option in TIMINGS}
    given = {option: value for option, value in given.items() if value is not None}
    try:
        if base is None:
            if "heartbeat_timeout" in given:  # the rest follows from it, as in LeaseSettings
                settings = LeaseSettings.from_mapping(given)
            else:
                settings = LeaseSettings.from_mapping(CLI_DEFAULTS | given)
            return _fit_wall_clock_kind(args, settings)
        if not given:
            return base
        return LeaseSettings.from_mapping(base.model_dump(exclude_unset=True) | given)
    except LeaseConfigError as exc:
        problems = [_named_flags(problem, args) for problem in exc.problems]
        raise LeaseConfigError(_named_flags(str(exc), args), problems=problems) from None


def _named_flags(message: str, args: argparse.Namespace) -> str:
    """A settings message followed by what sets the settings it names: the option (or
    variable) that gave it, else the ``--config`` section's TOML key (and the option that
    would override it)."""
    sources, keys, flags = [], [], []
    for option in TIMINGS:
        if option not in message:
            continue
        flag = f"--{option.replace('_', '-')}"
        if option in getattr(args, _GIVEN, ()):
            sources.append(flag)
        elif env(option) is not None:
            sources.append(_env_name(option))
        elif getattr(args, "config", None):
            keys.append(option.replace("_", "-"))
            flags.append(flag)
        else:
            sources.append(flag)
    named = [", ".join(sources)] if sources else []
    if keys:
        where = f"{args.config} [{args.section}]"
        named.append(f"{', '.join(keys)} in {where}, or {', '.join(flags)} over it")
    return f"{message} (set by {'; '.join(named)})" if named else message


def _fit_wall_clock_kind(args: argparse.Namespace, settings: LeaseSettings) -> LeaseSettings:
    """``settings`` for the lease kind: a wall-clock kind's rule on holder_deadline checked
    here, naming the options (the backend's own check names the settings only)."""
    kind = getattr(args, "lease_kind", None)
    if kind not in WALL_CLOCK_KINDS:
        return settings
    L, R = settings.heartbeat_timeout, settings.heartbeat_interval
    limit = L - 3 * R
    if getattr(args, "holder_deadline", None) is None and settings.deadline > limit:
        fitted = settings.model_dump(exclude_unset=True) | {"holder_deadline": limit}
        try:
            return LeaseSettings.from_mapping(fitted)
        except LeaseConfigError:
            pass  # too short for the other rules: reported below
    if settings.deadline > limit:
        raise LeaseConfigError(
            f"--lease-kind {kind}: these leases expire by wall clocks, so the holder's deadline "
            f"must be <= heartbeat timeout - 3 * heartbeat interval: {settings.deadline:g} s > "
            f"{limit:g} s; lower --holder-deadline (at most {limit:g}s) or --heartbeat-interval, "
            "or raise --heartbeat-timeout"
        )
    return settings


def open_backend(args: argparse.Namespace) -> tuple[LeaseBackend, LeaseSettings]:
    """The backend and settings the options name (not entered yet: ``async with`` it).

    Entering an SQLite backend creates its database: the commands that only read ask
    :func:`missing_database` first.
    """
    if args.section and not args.config:
        raise LeaseConfigError(
            "--section needs --config (the TOML file the section is in); without --config, "
            "use --backend"
        )
    if args.config:
        return _open_from_section(args)
    settings_from(args)  # validate before opening anything
    name = chosen_backend(args)
    config, sources = _backend_config(args, name)
    where = ", ".join(sources) or f"the {name} backend"
    cls = load_backend_class(name, source_of(args, "backend"))
    backend = build_backend(cls, config, where)
    return backend, run_settings(args, backend)


def _open_from_section(args: argparse.Namespace) -> tuple[LeaseBackend, LeaseSettings]:
    """The backend and settings of ``--config FILE --section S``: no backend option beside it."""
    if not args.section:
        raise LeaseConfigError("--config needs --section (the TOML section of the lease)")
    given = [flag.flag for flag in BACKEND_FLAGS if _on_command_line(args, flag.dest)]
    if _on_command_line(args, "sqlite_path"):
        given.insert(0, "--sqlite-path")
    if _on_command_line(args, "backend"):
        given.insert(0, "--backend")
    if given:
        raise LeaseConfigError(
            f"{', '.join(given)}: with --config the section configures the backend; set "
            "the key there, or leave out --config"
        )
    # The same options from the environment: ignoring them would use another store than the
    # one the variable names, without a word.
    variables = [
        _env_name(dest)
        for dest in ("backend", "sqlite_path", *(flag.dest for flag in BACKEND_FLAGS))
        if getattr(args, dest, None) is not None
    ]
    if variables:
        them = "it" if len(variables) == 1 else "them"
        raise LeaseConfigError(
            f"{', '.join(variables)} set in the environment: with --config the section "
            f"configures the backend; unset {them} (set the key in the section instead), or "
            "leave out --config"
        )
    provider = LeaseProvider(args.config)
    backend, section_settings = provider._backend_for(args.section)
    return backend, run_settings(args, backend, section_settings)


def _backend_config(args: argparse.Namespace, name: str) -> tuple[dict[str, Any], list[str]]:
    """The constructor keys of backend ``name`` its options and variables give, and their
    sources (flags and variables, for messages)."""
    config: dict[str, Any] = {}
    sources: list[str] = []
    if name == "sqlite" and args.sqlite_path:
        config["path"] = str(_explicit_sqlite_path(args))
    for flag in BACKEND_FLAGS:
        value = getattr(args, flag.dest, None)
        if flag.backend == name and value is not None:
            if flag.dest == "endpoints":
                check_endpoints(value, source_of(args, flag.dest))
            config[flag.key] = value
            sources.append(source_of(args, flag.dest))
    if name == "etcd":
        _etcd_credentials(args, config, sources)
    return config, sources


def _etcd_credentials(args: argparse.Namespace, config: dict[str, Any], sources: list[str]) -> None:
    """The etcd password from its variable (unless a file gives it); a user name that carries a
    password is refused without echoing it."""
    password = os.environ.get(PASSWORD_VARIABLE)
    if "password-file" not in config and password is not None:
        config["password"] = password
        sources.append(PASSWORD_VARIABLE)
    if ":" in str(config.get("username", "")):  # never echo the value
        raise LeaseConfigError(
            f"{source_of(args, 'user')}: give the user name only; its password goes in "
            f"--password-file or {PASSWORD_VARIABLE}, never on a command line"
        )


def _on_command_line(args: argparse.Namespace, dest: str) -> bool:
    return dest in getattr(args, _GIVEN, ())


given_on_command_line = _on_command_line


def check_endpoints(value: str, where: str) -> None:
    """etcd client URLs, comma-separated: each ``http://`` or ``https://`` with a host and a
    port from 1 to 65535 (default 2379), else a configuration error naming ``where``."""
    for endpoint in (part.strip() for part in value.split(",")):
        problem = _endpoint_problem(endpoint)
        if problem:
            raise LeaseConfigError(
                f"{where}: {endpoint!r} {problem}; an endpoint is http://HOST:PORT or "
                "https://HOST:PORT with a port from 1 to 65535, e.g. http://127.0.0.1:2379"
            )


def _endpoint_problem(endpoint: str) -> str:
    """What is wrong with one etcd endpoint ('' if nothing)."""
    try:
        url = urlsplit(endpoint)
        port = url.port
    except ValueError:  # a port that is not a number or out of range
        after_host = endpoint.partition("://")[2].split("/", 1)[0].rpartition(":")[2]
        return f"has port {after_host!r}, not a number from 1 to 65535"
    if url.scheme.lower() not in ("http", "https") or "://" not in endpoint:
        return "is not an http:// or https:// URL"
    if not url.hostname:
        return "has no host"
    if port == 0:
        return "has port '0', not a number from 1 to 65535"
    return ""


def missing_database(args: argparse.Namespace, backend: LeaseBackend) -> str | None:
    """For the commands that only read or change an existing record (``status``,
    ``handover``, ``release``): what to say when ``backend`` is SQLite and its database does
    not exist, so they do not enter it (entering creates it); None otherwise."""
    key = backend.store_key  # the SQLite backend's: ("sqlite", its database's path)
    if not (isinstance(key, tuple) and len(key) == 2 and key[0] == "sqlite"):
        return None
    path = Path(str(key[1]))
    if path.exists():
        return None
    if args.config:
        where = f"{args.config} [{args.section}]"
    elif args.sqlite_path:
        where = source_of(args, "sqlite_path")
    else:
        where = "the default database"
    return f"no SQLite database at {str(path)!r} ({where}): no lease was ever taken there"


def chosen_backend(args: argparse.Namespace) -> str:
    """The backend the options name: ``--backend``, else the one whose options are given (on
    the command line first, then in the environment), else ``sqlite``.

    A command-line option of another backend than ``--backend`` names, or options of two
    backends, are a configuration error: guessing would write the lease somewhere else.
    """
    typed = [flag for flag in BACKEND_FLAGS if _on_command_line(args, flag.dest)]
    if args.backend:
        wrong = [flag.flag for flag in typed if flag.backend != args.backend]
        if wrong:
            raise LeaseConfigError(
                f"{', '.join(wrong)}: not an option of the {args.backend} backend "
                f"({source_of(args, 'backend')}={args.backend})"
            )
        return str(args.backend)
    if _on_command_line(args, "sqlite_path"):
        if typed:
            typed_names = ", ".join(flag.flag for flag in typed)
            raise LeaseConfigError(
                f"--sqlite-path and {typed_names} name different backends; give one backend's "
                "options"
            )
        return "sqlite"
    from_env = [
        flag for flag in BACKEND_FLAGS if getattr(args, flag.dest, None) is not None
    ]
    if os.environ.get(PASSWORD_VARIABLE) is not None:
        from_env.append(BackendFlag("etcd", "password", "password", "", ""))
    for named in (typed, from_env):
        backends = sorted({flag.backend for flag in named})
        if len(backends) > 1:
            shown = ", ".join(sorted({source_of(args, flag.dest) for flag in named}))
            raise LeaseConfigError(
                f"{shown} name different backends ({' and '.join(backends)}); give one "
                "backend's options, or --backend"
            )
        if backends:
            return backends[0]
    return "sqlite"


def _explicit_sqlite_path(args: argparse.Namespace) -> Path:
    """``--sqlite-path``, whose folder must exist: only the default location is created, so a
    typo in a path never makes a second, empty database that another run also "holds"."""
    where = source_of(args, "sqlite_path")
    path = user_path(args.sqlite_path, where)
    if not path.parent.is_dir():
        raise LeaseConfigError(
            f"{where}: the folder of {str(path)!r} does not exist ({str(path.parent)!r}); "
            "create it, or fix the path"
        )
    return path
