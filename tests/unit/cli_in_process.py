"""`edgekit ARGS` in the test's own process: the CLI's own error table and exit code, without a Python start-up."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

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
