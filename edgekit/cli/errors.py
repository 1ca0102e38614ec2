"""The one place errors become messages: each typed error is one line with what to do, and its exit code.

Anything untyped is a bug and says so; `--debug` (or EDGEKIT_DEBUG=1) shows the traceback.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import click
from rich.markup import escape

from edgekit.cli.common import err_console, json_error, reset_json
from edgekit.errors import (
    BoxesMissing,
    BoxMismatch,
    DowngradeError,
    EdgekitError,
    ExitCode,
    NoCudaDevice,
    NotABundleError,
    NotAKey,
    NotAnInstallRoot,
    NotASignature,
    NothingToRollBack,
    PackError,
    PackUnsigned,
    ReferenceExportError,
    ReferenceMemoryError,
    ReferenceMismatchError,
    ToolsNotBuilt,
    UnsignedBundle,
)

DEBUG_ENV = "EDGEKIT_DEBUG"
EXPORT = "`edgekit reference RECIPE --export DIR`"
# The hints that name a command: the library's errors carry the data (and say what to do in words), this table
# says which command does it. Looked up by the error's class, then its bases.
COMMAND_HINTS: dict[type[EdgekitError], Callable[[Any], str]] = {
    ReferenceMismatchError: lambda e: (
        f"export it again from this recipe ({EXPORT} where it can run), or make the "
        "recipe match the one it was computed for; nothing was built"
    ),
    ReferenceExportError: lambda e: f"copy it again, or export it again with {EXPORT}",
    ReferenceMemoryError: lambda e: e.ways(
        f"compute it where memory or a GPU is: {EXPORT} there (reference_device = "
        '"cuda" on a GPU box), then `edgekit build RECIPE --reference DIR` here'
    ),
    NoCudaDevice: lambda e: (
        "use 'auto' to fall back to the CPU, or run `edgekit reference` on a GPU box and copy the cache"
    ),
    ToolsNotBuilt: lambda e: (
        f"run `edgekit toolchain {e.flag}` once (it compiles llama.cpp's tools from the source "
        "package of the installed version, a few minutes)"
    ),
    NotABundleError: lambda e: (
        "give the folder `edgekit build` wrote (dist/<name>/ by default), the one holding manifest.json"
    ),
    BoxesMissing: lambda e: (
        "start `edgekit agent --box NAME --address HEAD` on that box, or choose others with "
        "--boxes (--boxes local benchmarks on the build machine)"
    ),
    PackError: lambda e: (
        "copy the pack again from the build machine (compare its sha256 with what `edgekit pack` printed)"
    ),
    PackUnsigned: lambda e: f"sign it first: edgekit sign {e.bundle} --key edgekit.key",
    UnsignedBundle: lambda e: f"sign it on the build machine: edgekit sign {e.bundle.name} --key edgekit.key",
    NotASignature: lambda e: (
        "sign the bundle again with `edgekit sign` (signatures of edgekit 0.1, manifest.sig, are not read)"
    ),
    NotAKey: lambda e: (
        "make a key pair with `edgekit keygen` (edgekit.key is private, edgekit.pub goes to the "
        "boxes); keys of edgekit 0.1 (Ed25519) are not supported by OpenSSF model signing"
    ),
    NotAnInstallRoot: lambda e: f"install a pack first: edgekit install NAME-RELEASE.edgekit --root {e.root}",
    NothingToRollBack: lambda e: (
        "install the release you want with `edgekit install` (--allow-downgrade for an older one)"
    ),
    BoxMismatch: lambda e: f"pack it for this box on the build machine: edgekit pack BUNDLE --box {e.machine}",
    DowngradeError: lambda e: (
        "to go back to the previous release use `edgekit rollback`; to install this one anyway, --allow-downgrade"
        if e.release < e.running
        else "build it with --release N (or [bundle] release in the recipe), or pass --allow-downgrade"
    ),
}
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


def hint(exc: EdgekitError) -> str | None:
    """What to do: the hint this table writes for the error (naming the command), else the error's own; and where
    the logs of the stage that failed are kept."""
    write = next((COMMAND_HINTS[kind] for kind in type(exc).__mro__ if kind in COMMAND_HINTS), None)
    said = write(exc) if write is not None else exc.hint
    return "; ".join(h for h in (said, f"logs: {exc.logs}" if exc.logs else None) if h) or None


def _typed_error(exc: EdgekitError) -> None:
    if debug_enabled():
        traceback.print_exc()
    err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False)
    fix = hint(exc)
    if fix:
        err_console.print(f"  [bold]→[/] {escape(fix)}", highlight=False)
    json_error(exc.exit_code, type(exc).__name__, exc.message, fix)
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
