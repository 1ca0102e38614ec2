"""What every command module shares: the consoles, plain or rich output, the recipe and cache arguments, `--json`.

**Plain output.** When the stream is not a terminal, or `TERM=dumb`, `NO_COLOR` or `CI` is set, output
has no ANSI escapes (rich's `color_system=None`, `force_terminal=False`) and progress is one plain line
per stage start and end (`edgekit.observe.progress.PlainProgressReporter`).

**`--json` for a command** (one decorator, one call; the schema is a file in `edgekit/cli/schemas/`):

    @click.command()
    @json_option("status")                   # adds --json; schemas/status.json is its JSON Schema
    def status(..., as_json: bool) -> None:
        result = library_call(...)
        if as_json:
            return emit_json("status", result)   # adds "schema": "edgekit.status", "version": N
        ...render for people...

`schemas/NAME.json` is a JSON Schema (draft 2020-12) whose `version` property is `{"const": N}`: bump N
when a field changes meaning or goes away (adding a field is not a new version). tests/unit/test_json_schemas.py
checks every schema file, and each command's tests validate real output against it. With `--json`, an
error is also printed on stdout as an `edgekit.error` document (schemas/error.json) before the exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, TextIO

import click
from rich.console import Console
from rich.markup import escape

SCHEMAS = Path(__file__).resolve().parent / "schemas"


def plain_output(stream: TextIO) -> bool:
    """Plain lines, no escapes: not a terminal, a dumb one, NO_COLOR (https://no-color.org) or a CI log."""
    env = os.environ
    ci = env.get("CI", "").strip().lower() in ("1", "true", "yes", "on")
    isatty = getattr(stream, "isatty", None)
    return not (isatty and isatty()) or env.get("TERM") == "dumb" or bool(env.get("NO_COLOR")) or ci


def console_options(stream: TextIO) -> dict[str, Any]:
    if plain_output(stream):
        return {"color_system": None, "force_terminal": False, "no_color": True, "highlight": False}
    return {}


# stdout and stderr follow sys.stdout/sys.stderr (click's test runner swaps them); their style is decided here.
console = Console(soft_wrap=True, **console_options(sys.stdout))
err_console = Console(stderr=True, soft_wrap=True, **console_options(sys.stderr))


def mib(size: int | None) -> str:
    return "—" if size is None else f"{size / 2**20:,.1f} MiB"


def progress_reporter() -> Any:
    """Live bars on a terminal; one plain line per stage start and end otherwise (and with --verbose, whose
    streamed library output would tear live bars). Bound to stderr as it is now, before a build routes it."""
    from edgekit.observe import stagelog
    from edgekit.observe.progress import PlainProgressReporter, RichProgressReporter

    stream = sys.stderr
    if plain_output(stream) or stagelog.echoing() is not None:
        return PlainProgressReporter(Console(file=stream, soft_wrap=True, **console_options(stream)))
    return RichProgressReporter(Console(file=stream, soft_wrap=True, log_path=False))


@contextlib.contextmanager
def steps(title: str) -> Iterator[Callable[[str], None]]:
    """A running command's current step: a spinner line on a terminal, one plain line per step otherwise."""
    if plain_output(sys.stderr):
        yield lambda message: err_console.print(f"{title}: {message}", markup=False, highlight=False)
        return
    with err_console.status(title) as status:
        yield lambda message: status.update(escape(message))


cache_option = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    envvar="EDGEKIT_CACHE",
    help="Stage cache (default ~/.cache/edgekit).",
)
recipe_argument = click.argument("recipe", required=False, type=click.Path(dir_okay=False))
# Not click's exists=True: a path that is not a bundle gets edgekit's own message and exit code (2).
bundle_argument = click.argument("bundle", type=click.Path())


def recipe_path(recipe: str | None) -> Path:
    from edgekit.recipe.load import DEFAULT_RECIPE

    return Path(recipe) if recipe else DEFAULT_RECIPE


def open_cache(cache_dir: str | None) -> Any:
    from edgekit.store.cache import StageCache

    return StageCache(Path(cache_dir) if cache_dir else None)


OUTPUT_ONLY = frozenset({"as_json"})  # options that change how a result is shown, not the result


def command_line(ctx: click.Context) -> str:
    """The command as typed, rebuilt from what click parsed: `edgekit build r.toml --out x`, whatever options
    came before the command name (`edgekit --debug build r.toml`) and leaving out values from the environment."""
    import shlex

    from click.core import ParameterSource

    words = ["edgekit", ctx.info_name or ""]
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        source = ctx.get_parameter_source(param.name or "")
        if source != ParameterSource.COMMANDLINE or value is None or param.name in OUTPUT_ONLY:
            continue
        values = list(value) if isinstance(value, tuple | list) else [value]
        if isinstance(param, click.Argument):
            words += [str(v) for v in values]
        elif isinstance(param, click.Option):
            flag = param.opts[0] if value is not False else (param.secondary_opts or param.opts)[0]
            words += [flag] if param.is_flag else [w for v in values for w in (flag, str(v))]
    return " ".join(shlex.quote(w) for w in words)


# --- --json -----------------------------------------------------------------------------------------

_json_state: dict[str, Any] = {"command": None, "emitted": False}


def reset_json() -> None:
    """At the start of a command line: no --json seen, nothing printed yet."""
    _json_state.update(command=None, emitted=False)


@cache
def load_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of `edgekit NAME --json` (edgekit/cli/schemas/NAME.json)."""
    return json.loads((SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))


def schema_names() -> list[str]:
    return sorted(p.stem for p in SCHEMAS.glob("*.json"))


def schema_version(name: str) -> int:
    return int(load_schema(name)["properties"]["version"]["const"])


def json_option(schema: str) -> Callable[[Any], Any]:
    """Add `--json` to a command: print one JSON document following schemas/SCHEMA.json (see emit_json)."""

    def remember(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        if value:
            _json_state["command"] = schema
        return value

    return click.option("--json", "as_json", is_flag=True, callback=remember,
                        help=f"Print the result as JSON (schema: `edgekit schema {schema}`).")  # fmt: skip


def emit_json(schema: str, payload: dict[str, Any]) -> None:
    """Print `payload` as the JSON document of `schema`, led by its name and version."""
    rest = {k: v for k, v in payload.items() if k not in ("schema", "version")}
    document = {"schema": f"edgekit.{schema}", "version": schema_version(schema), **rest}
    click.echo(json.dumps(document, indent=2, default=str))
    _json_state["emitted"] = True


def json_error(exit_code: int, kind: str, message: str, hint: str | None) -> None:
    """After a failure under --json: an `edgekit.error` document on stdout, unless a result was printed."""
    if _json_state["command"] is None or _json_state["emitted"]:
        return
    error = {"type": kind, "message": message, "hint": hint, "exit_code": exit_code}
    emit_json("error", {"command": _json_state["command"], "error": error})
