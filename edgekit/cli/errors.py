"""The one place errors become messages: each typed error is one line with what to do, and its exit code.

Anything untyped is a bug and says so; `--debug` (or EDGEKIT_DEBUG=1) shows the traceback.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Callable

import click
from rich.markup import escape

from edgekit.cli.common import err_console, json_error, reset_json
from edgekit.errors import EdgekitError, ExitCode

DEBUG_ENV = "EDGEKIT_DEBUG"
# The disk or the permissions, not a bug: exit 3 with what to do.
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS})


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def run_reporting_errors(command: Callable[[], object]) -> None:
    """Run the CLI: one clear message and exit code per typed error; tracebacks only with --debug."""
    reset_json()
    try:
        command()
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        json_error(ExitCode.BAD_INPUT, "UsageError", exc.format_message(), None)
        sys.exit(ExitCode.BAD_INPUT)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        err_console.print("interrupted; nothing half-written was left behind")
        sys.exit(ExitCode.INTERRUPTED)
    except EdgekitError as exc:
        _typed_error(exc)
    except OSError as exc:
        if exc.errno not in ENVIRONMENT_ERRNOS:
            _internal_error(exc)
        _environment_error(exc)
    except Exception as exc:  # a bug: say so, and how to see the details
        _internal_error(exc)


def _typed_error(exc: EdgekitError) -> None:
    if debug_enabled():
        traceback.print_exc()
    err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False)
    if exc.hint:
        err_console.print(f"  [bold]→[/] {escape(exc.hint)}", highlight=False)
    json_error(exc.exit_code, type(exc).__name__, exc.message, exc.hint)
    sys.exit(exc.exit_code)


def _environment_error(exc: OSError) -> None:
    if debug_enabled():
        traceback.print_exc()
    where = f" {escape(str(exc.filename))}" if exc.filename else ""
    message = escape(exc.strerror or str(exc))
    err_console.print(f"[bold red]error:[/] cannot write or read{where}: {message}", highlight=False)
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    fix = "free some space, or point EDGEKIT_CACHE / --out at a larger disk" if full else "check its permissions"
    err_console.print(f"  [bold]→[/] {fix}; nothing half-written was kept", highlight=False)
    json_error(ExitCode.ENVIRONMENT, type(exc).__name__, f"cannot write or read{where}: {message}", fix)
    sys.exit(ExitCode.ENVIRONMENT)


def _internal_error(exc: BaseException) -> None:
    if debug_enabled():
        traceback.print_exc()
    err_console.print(f"[bold red]internal error:[/] {type(exc).__name__}: {escape(str(exc))}", highlight=False)
    err_console.print(f"  → this is a bug in edgekit; rerun with --debug (or {DEBUG_ENV}=1) for the traceback")
    json_error(ExitCode.RUNTIME, "InternalError", f"{type(exc).__name__}: {exc}", "this is a bug in edgekit")
    sys.exit(ExitCode.RUNTIME)
