"""The command that `trio-lease run` runs in the CLI tests; it logs what happens to it.

    python tests/cli/child.py LOG [--sleep S] [--exit N] [--kill-self N] [--ignore-term]

Appends one JSON line per event to LOG, each with a ``time.monotonic()`` stamp (CLOCK_MONOTONIC
is system-wide on Linux, so stamps of different processes compare): "start" (with the pid and
the TRIO_LEASE_* variables it was given), "sigterm" when SIGTERM arrives (then it exits 0,
unless --ignore-term), "end" when its sleep is over (then it exits N).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from types import FrameType


def log(path: str, event: str, **fields: object) -> None:
    line = json.dumps({"event": event, "t": time.monotonic(), **fields}) + "\n"
    with open(path, "a") as file:  # O_APPEND: one small write per line stays whole
        file.write(line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    parser.add_argument("--sleep", type=float, default=60.0)
    parser.add_argument("--exit", type=int, default=0)
    parser.add_argument("--kill-self", type=int, default=None)
    parser.add_argument("--ignore-term", action="store_true")
    args = parser.parse_args()

    def on_term(signum: int, frame: FrameType | None) -> None:
        log(args.log, "sigterm")
        if not args.ignore_term:
            os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    log(
        args.log,
        "start",
        pid=os.getpid(),
        token=int(os.environ["TRIO_LEASE_FENCING_TOKEN"]),
        owner=os.environ["TRIO_LEASE_OWNER"],
        name=os.environ["TRIO_LEASE_NAME"],
        slot=os.environ.get("TRIO_LEASE_SLOT"),
    )
    if args.kill_self is not None:
        os.kill(os.getpid(), args.kill_self)
    deadline = time.monotonic() + args.sleep
    while (left := deadline - time.monotonic()) > 0:  # a signal handler may interrupt sleep
        time.sleep(left)
    log(args.log, "end")
    sys.exit(args.exit)


if __name__ == "__main__":
    main()
