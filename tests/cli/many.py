"""Run many `trio-lease` command lines in one process: the wrong-inputs table's runner.

Usage: ``python many.py CASES.json RESULTS.json``. Each case is ``{"argv": [...], "env":
{...}}`` (a variable set to null is unset for the case); each result is ``{"code", "stdout",
"stderr"}``: what the console script would exit with and print. The entry point
(:func:`trio_lease._cli.main`) runs as the console script runs it, with ``sys.stdout`` and
``sys.stderr`` captured and logging sent to the captured stderr.
An exception that escapes it is written to the captured stderr as the interpreter would print
it (``Traceback (most recent call last): ...``), so the table sees every traceback a user
would. A process per case would cost about a second each on a loaded machine; this costs one.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import traceback
from pathlib import Path


def run_case(argv: list[str], env: dict[str, str | None]) -> dict[str, object]:
    """One command line, as the console script runs it: its exit code and output."""
    from trio_lease._cli import main

    saved = dict(os.environ)
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    for handler in list(root.handlers):  # main() configures logging on the captured stderr
        root.removeHandler(handler)
    code: object
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors, --help, --version
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # what the interpreter would print, and exit 1
            traceback.print_exc(file=err)
            code = 1
    os.environ.clear()
    os.environ.update(saved)
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    results = [run_case(case["argv"], case.get("env", {})) for case in cases]
    Path(sys.argv[2]).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
