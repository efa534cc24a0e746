"""``trio-lease emulate``: run the Kubernetes API emulator on a loopback port.

It starts the HTTPS server (or plain HTTP with ``--plain-http``), creates the namespace,
optionally applies manifests (``--apply lease.yml``), writes a kubeconfig whose user is a
cluster admin authenticated by a bearer token, prints how to use it, and serves until SIGINT
(Ctrl-C) or SIGTERM, then exits 0. The token is written only to the kubeconfig (mode 0600) and
never printed.

Bad arguments are refused before anything starts with a one-line message and exit 78 (a
configuration error, as for the other commands): a port outside 0-65535, a namespace that is
not a DNS-1123 label, a negative CRD delay, a manifest that cannot be read or applied. So is an
address that cannot be listened on or a kubeconfig that cannot be written. A client whose TLS
handshake fails (plain HTTP on the HTTPS port, a client that does not trust the CA) is logged
as one line; the emulator goes on serving.
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ._validation import validate_namespace_name

if TYPE_CHECKING:
    from ._server import KubeServer

__all__ = ["add_emulate_command", "run_emulate"]

#: Exit status for a port that cannot be listened on or a kubeconfig that cannot be written.
EXIT_CONFIG = 78


def _port(value: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (0: any free port)."""
    if not (value.isascii() and value.isdigit() and int(value) <= 65535):
        raise argparse.ArgumentTypeError(f"a port is a number from 0 to 65535, got {value!r}")
    return int(value)


def _namespace(value: str) -> str:
    """An argparse type: a namespace name (a DNS-1123 label, as the API server requires)."""
    if validate_namespace_name(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a valid namespace: lowercase letters, digits and '-', starting "
            "and ending with a letter or digit, at most 63 characters"
        )
    return value


def _seconds(value: str) -> float:
    """An argparse type: seconds, 0 or more."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds < math.inf:
        raise argparse.ArgumentTypeError(f"must be seconds, 0 or more, got {value!r}")
    return seconds


def add_emulate_command(subparsers: Any) -> None:
    """Register the ``emulate`` subcommand on an argparse ``subparsers`` object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "emulate",
        help="run a Kubernetes API emulator (leases, CRDs, RBAC) on a loopback port",
        description=(
            "Serve the Kubernetes API emulator (HTTPS, or plain HTTP with --plain-http) on a "
            "loopback port, create the namespace, apply manifests (--apply lease.yml), write a "
            "kubeconfig whose user is a cluster admin with a bearer token (mode 0600, the "
            "token is never printed), and serve until Ctrl-C or SIGTERM. Bad arguments exit 78 "
            "before anything starts, as does an address that cannot be listened on or a "
            "kubeconfig that cannot be written."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    parser.add_argument("--port", type=_port, default=0, help="port; 0 picks a free one")
    parser.add_argument(
        "--kubeconfig", type=Path, default=None,
        help="where to write the kubeconfig (default: a new file in the temp directory)",
    )
    parser.add_argument("--plain-http", action="store_true", help="serve HTTP instead of HTTPS")
    parser.add_argument(
        "--namespace", type=_namespace, default="default", help="namespace to create and use"
    )
    parser.add_argument(
        "--token", default=None, help="bearer token of the admin user (default: random)"
    )
    parser.add_argument(
        "--apply", type=Path, action="append", default=[], metavar="MANIFEST",
        help="apply a YAML manifest at start (repeatable), e.g. lease.yml",
    )
    parser.add_argument(
        "--crd-establish-delay", type=_seconds, default=0.0, metavar="SECONDS",
        help="seconds before a new CRD is Established and served (404 until then; default 0)",
    )
    parser.add_argument(
        "--coordinated-leader-election", action="store_true",
        help="turn the CoordinatedLeaderElection feature gate on (off: Lease strategy and "
        "preferredHolder are dropped, as on real clusters up to 1.35)",
    )
    parser.set_defaults(func=run_emulate)


def run_emulate(args: argparse.Namespace) -> int:
    """Serve until interrupted; 0 on a clean stop, 78 on a bad manifest, an address that
    cannot be listened on or a kubeconfig that cannot be written."""
    import yaml

    from ._emulator import KubeEmulator
    from ._status import ApiError

    emulator = KubeEmulator(
        namespaces=["default", args.namespace], require_auth=True,
        crd_establish_delay=args.crd_establish_delay,
        coordinated_leader_election=args.coordinated_leader_election,
    )
    token: str = args.token or secrets.token_urlsafe(32)
    emulator.add_token(token, "emulator-admin", groups=("system:masters",))
    try:
        for manifest in args.apply:
            emulator.apply(manifest.read_text())
    except (OSError, ValueError, yaml.YAMLError, ApiError) as exc:
        print(
            f"trio-lease emulate: --apply {str(manifest)!r}: cannot apply it: "
            f"{_reason(exc)}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if args.kubeconfig is None:
        fd, name = tempfile.mkstemp(prefix="trio-lease-emulator-", suffix=".kubeconfig")
        os.close(fd)
        args.kubeconfig = Path(name)
    kubeconfig: Path = args.kubeconfig

    async def main() -> str | None:
        """Serve until a signal; what stopped it from serving, if anything."""
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            try:
                serving = emulator.serve(args.host, args.port, tls=not args.plain_http)
                async with serving as server:
                    problem = _write_kubeconfig(server, kubeconfig, token, args.namespace)
                    if problem is not None:
                        return problem
                    print(
                        f"Kubernetes API emulator serving at {server.url}\n"
                        f"kubeconfig (admin token inside, mode 0600): {kubeconfig}\n"
                        f"  export KUBECONFIG={kubeconfig}\n"
                        f"  kubectl get leases -n {args.namespace}\n"
                        f"  python: kubernetes.config.load_kube_config('{kubeconfig}')\n"
                        "Press Ctrl-C to stop.",
                        flush=True,
                    )
                    async for _ in signals:
                        break
            except OSError as exc:  # entering serve: the address cannot be listened on
                return (
                    f"cannot listen on {args.host}:{args.port} (--host, --port): "
                    f"{exc.strerror or type(exc).__name__}; pick a free port or another address"
                )
        print("Kubernetes API emulator stopped.", flush=True)
        return None

    problem = anyio.run(main, backend="trio")
    if problem is not None:
        print(f"trio-lease emulate: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def _reason(exc: Exception) -> str:
    """An error for a message: an OSError's reason without its errno, else its text."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _write_kubeconfig(server: KubeServer, path: Path, token: str, namespace: str) -> str | None:
    """Write the kubeconfig; what went wrong (None: nothing)."""
    try:
        server.write_kubeconfig(path, token, namespace)
    except OSError as exc:
        return (
            f"cannot write the kubeconfig {str(path)!r} (--kubeconfig): "
            f"{exc.strerror or type(exc).__name__}"
        )
    return None
