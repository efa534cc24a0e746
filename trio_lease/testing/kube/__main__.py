"""``python -m trio_lease.testing.kube emulate ...``: the emulator without the main CLI."""

from __future__ import annotations

import argparse
import sys

from ._cli import add_emulate_command


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` with just the ``emulate`` subcommand and run it."""
    parser = argparse.ArgumentParser(prog="python -m trio_lease.testing.kube")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_emulate_command(subparsers)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
