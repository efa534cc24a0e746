"""``trio-lease check``: run :func:`check` from the command line.

Exit status: 0 when everything needed works, 1 when a problem was found (each is printed with
its fix), 78 for a configuration that cannot even be loaded (from the main command's handler).

The backend comes from ``--config FILE --section PATH`` (a LeaseProvider TOML section with
``lease-class = "kubernetes"``), or from the options below (``--server``, ``--kubeconfig``,
``--context``, ``--namespace``, ``--lease-kind``, ``--token-file``), or, with neither, from the
usual precedence (KUBECONFIG, in-cluster, ~/.kube/config).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from ..._exceptions import LeaseConfigError
from ..._settings import LeaseSettings
from ..._toml import load_toml
from ._backend import KubernetesBackend
from ._check import CheckProblem, CheckReport

__all__ = ["add_check_command", "run_check"]

#: The section keys ``check`` also takes as options, with their help.
_OPTIONS = {
    "server": "API server URL (default: the kubeconfig's or in-cluster)",
    "kubeconfig": "kubeconfig file (default: KUBECONFIG, else ~/.kube/config)",
    "context": "kubeconfig context (default: the current one)",
    "namespace": "namespace of the leases (default: the context's or the pod's, else default)",
    "lease-kind": "coordination.k8s.io/v1 (the default) or akka.io/v1",
    "token-file": "bearer token file, read again when it changes",
    "ca-file": "CA bundle that signs the API server's certificate",
}


def add_check_command(subparsers: Any) -> None:
    """Register ``check`` on the ``trio-lease`` command's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="check the Kubernetes backend: server, credentials, RBAC, CRD",
        description=(
            "Check the Kubernetes backend's configuration without writing anything: the server "
            "is reachable, the credentials are accepted, the lease kind is served and the "
            "identity may use every verb the backend needs. Exit 0 when all is well, 1 when a "
            "problem was found (each printed with its fix), 78 when the configuration cannot "
            "be loaded."
        ),
    )
    parser.add_argument("--config", help="LeaseProvider TOML file")
    parser.add_argument("--section", help="section path in --config (e.g. leases.nightly)")
    for option, text in _OPTIONS.items():
        parser.add_argument(f"--{option}", dest=option.replace("-", "_"), default=None, help=text)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run_check)


def _section(args: argparse.Namespace) -> dict[str, Any]:
    """The backend's keys: the ``--config`` section, if any, with the options given over it."""
    section = _config_section(args.config, args.section) if args.config else {}
    for option in _OPTIONS:
        value = getattr(args, option.replace("-", "_"), None)
        if value is not None:
            section[option] = value
    return section


def _config_section(config: str, path: str | None) -> dict[str, Any]:
    """The table at the dotted ``path`` in the TOML file ``config``."""
    if not path:
        raise LeaseConfigError("--config needs --section (the TOML section of the lease)")
    data: Any = load_toml(Path(config))
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            raise LeaseConfigError(f"{config} has no section [{path}]")
        data = data[part]
    if not isinstance(data, dict):
        raise LeaseConfigError(f"[{path}] in {config} is not a table")
    return dict(data)


def run_check(args: argparse.Namespace) -> int:
    """Build the backend, run the check, print the report; 0 if fine, 1 if not."""
    backend = _backend(args)
    report = anyio.run(_check, backend)
    timing = _timing_problem(args, backend)
    if timing is not None:
        report.problems.append(timing)
    print(json.dumps(_as_json(report), indent=2) if args.json else report)
    return 0 if report.ok else 1


def _timing_problem(args: argparse.Namespace, backend: KubernetesBackend) -> CheckProblem | None:
    """The timings ``trio-lease run`` would use with these options (the ``--config``
    section's, else its defaults, under the timing options given) checked against the lease
    kind's rules; None if they hold.

    ``args.run_settings`` (set by the ``trio-lease`` command, which owns the timing options)
    is the function ``run`` gets its timings from; without it there is nothing to check.
    """
    run_settings: Callable[[KubernetesBackend], LeaseSettings] | None = getattr(
        args, "run_settings", None
    )
    if run_settings is None:
        return None
    try:
        run_settings(backend)
    except LeaseConfigError as exc:
        return CheckProblem(
            f"the timings do not work for {backend.kind.name} leases: {exc}",
            "change a setting the message names where it says it is set (set by ...)",
        )
    return None


def _backend(args: argparse.Namespace) -> KubernetesBackend:
    """The backend the options and section name; a configuration error names the options
    given (``--kubeconfig: no kubeconfig file found ...``)."""
    section = _section(args)
    given = [f"--{option}" for option in _OPTIONS if getattr(args, option.replace("-", "_"))]
    try:
        return KubernetesBackend.from_config(section)
    except LeaseConfigError as exc:
        if not given:
            raise
        raise LeaseConfigError(f"{', '.join(given)}: {exc}") from None


async def _check(backend: KubernetesBackend) -> CheckReport:
    async with backend:
        return await backend.check()


def _as_json(report: CheckReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "server": report.server,
        "namespace": report.namespace,
        "lease_kind": report.lease_kind,
        "source": report.source,
        "problems": [_problem(p) for p in report.problems],
        "notes": report.notes,
        "optional": [_problem(p) for p in report.optional],
    }


def _problem(problem: CheckProblem) -> dict[str, str]:
    """One problem for ``--json``: what and fix, and the Role rule (YAML) when one grants it."""
    out = {"what": problem.what, "fix": problem.fix}
    if problem.rule:
        out["rule"] = problem.rule
    return out
