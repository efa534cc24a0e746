"""``trio-lease emulate``: run the Kubernetes API emulator on a loopback port.

It starts the HTTPS server (or plain HTTP with ``--plain-http``), creates the namespace,
optionally applies manifests (``--apply lease.yml``), writes a kubeconfig whose user is a
cluster admin authenticated by a bearer token, prints how to use it, and serves until SIGINT
(Ctrl-C) or SIGTERM, then exits 0. The token is written only to the kubeconfig (mode 0600) and
never printed.
"""

from __future__ import annotations

import argparse
import secrets
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

__all__ = ["add_emulate_command", "run_emulate"]


def add_emulate_command(subparsers: Any) -> None:
    """Register the ``emulate`` subcommand on an argparse ``subparsers`` object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "emulate",
        help="run a Kubernetes API emulator (leases, CRDs, RBAC) on a loopback port",
        description=__doc__,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one")
    parser.add_argument(
        "--kubeconfig", type=Path, default=None,
        help="where to write the kubeconfig (default: a new file in the temp directory)",
    )
    parser.add_argument("--plain-http", action="store_true", help="serve HTTP instead of HTTPS")
    parser.add_argument("--namespace", default="default", help="namespace to create and use")
    parser.add_argument(
        "--token", default=None, help="bearer token of the admin user (default: random)"
    )
    parser.add_argument(
        "--apply", type=Path, action="append", default=[], metavar="MANIFEST",
        help="apply a YAML manifest at start (repeatable), e.g. lease.yml",
    )
    parser.add_argument(
        "--crd-establish-delay", type=float, default=0.0, metavar="SECONDS",
        help="seconds before a new CRD is Established and served (404 until then; default 0)",
    )
    parser.add_argument(
        "--coordinated-leader-election", action="store_true",
        help="turn the CoordinatedLeaderElection feature gate on (off: Lease strategy and "
        "preferredHolder are dropped, as on real clusters up to 1.35)",
    )
    parser.set_defaults(func=run_emulate)


def run_emulate(args: argparse.Namespace) -> int:
    """Serve until interrupted; 0 on a clean stop, 2 on a bad manifest."""
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
        print(f"trio-lease emulate: cannot apply manifest: {exc}", file=sys.stderr)
        return 2
    kubeconfig: Path = args.kubeconfig or Path(
        tempfile.mkstemp(prefix="trio-lease-emulator-", suffix=".kubeconfig")[1]
    )

    async def main() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with emulator.serve(args.host, args.port, tls=not args.plain_http) as server:
                server.write_kubeconfig(kubeconfig, token, args.namespace)
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
        print("Kubernetes API emulator stopped.", flush=True)

    anyio.run(main, backend="trio")
    return 0
