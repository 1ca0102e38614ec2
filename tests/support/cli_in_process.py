"""`edgekit ARGS` in the test's own process: the CLI's own error table and exit code, without a Python start-up."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import chdir, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest


def run_cli(*args: str, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """Like `subprocess.run([python, -m, edgekit, *args])`; stderr with its line wrapping undone."""
    from edgekit.cli import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(out), redirect_stderr(err):
        for key, value in (env or {}).items():
            if value is None:
                mp.delenv(key, raising=False)
            else:
                mp.setenv(key, value)
        mp.setattr(sys, "argv", ["edgekit", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), " ".join(err.getvalue().split()))


def edgekit(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """`edgekit ARGS` as `main()` runs it: (exit code, stdout, stderr)."""
    from edgekit.cli import cli
    from edgekit.cli.errors import run_reporting_errors

    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with redirect_stdout(out), redirect_stderr(err), chdir(cwd or os.getcwd()):
        try:
            run_reporting_errors(lambda: cli.main(list(args), prog_name="edgekit", standalone_mode=False))
        except SystemExit as exc:
            code = exc.code
    return (code if isinstance(code, int) else 1), out.getvalue(), err.getvalue()
