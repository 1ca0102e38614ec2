"""The `edgekit` command: parse, call the library, render. No pipeline logic lives here."""

from __future__ import annotations

import errno
import json
import os
import shlex
import sys
import traceback
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from edgekit import __version__
from edgekit.errors import EdgekitError, ExitCode

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

DEBUG_ENV = "EDGEKIT_DEBUG"


def _debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgekit")
@click.option("--debug", is_flag=True, help=f"Show tracebacks (or set {DEBUG_ENV}=1).")
def cli(debug: bool) -> None:
    """Turn a Hugging Face causal LM into a validated, ready-to-run CPU bundle."""
    if debug:
        os.environ[DEBUG_ENV] = "1"


def _recipe_arg(recipe: str | None) -> Path:
    from edgekit.recipe import DEFAULT_RECIPE

    return Path(recipe) if recipe else DEFAULT_RECIPE


def _cache(cache_dir: str | None) -> Any:
    from edgekit.cache import StageCache

    return StageCache(Path(cache_dir) if cache_dir else None)


cache_option = click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    envvar="EDGEKIT_CACHE",
    help="Stage cache (default ~/.cache/edgekit).",
)


@cli.command()
@click.argument("recipe", required=False, type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write the bundle under DIR/<name>/.")
@cache_option
@click.option("--threads", type=click.IntRange(1, 1024), help="Threads for validation (default: physical cores).")
@click.option("--reference", "reference_dir", type=click.Path(exists=True, file_okay=False),
              help="Import a reference exported by `edgekit reference --export` first.")  # fmt: skip
def build(
    recipe: str | None, out_dir: str | None, cache_dir: str | None, threads: int | None, reference_dir: str | None
) -> None:
    """Build the bundle described by RECIPE (default: the embedded SmolLM2-135M recipe)."""
    from edgekit.pipeline import build as run_build
    from edgekit.progress import RichProgressReporter
    from edgekit.recipe import load_recipe

    loaded = load_recipe(_recipe_arg(recipe))
    cache = _cache(cache_dir)
    if reference_dir:
        from edgekit.stages.validate import import_reference

        import_reference(Path(reference_dir), cache)
    command = "edgekit build " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    with RichProgressReporter(err_console) as progress:
        result = run_build(
            loaded,
            cache=cache,
            progress=progress,
            out_dir=Path(out_dir) if out_dir else None,
            command=command.strip(),
            threads=threads,
        )
    optional = {t.name for t in loaded.targets if not t.required}
    _render_verdicts(result.verdicts, result.excluded, optional)
    console.print(f"bundle: [bold]{result.bundle}[/]  ({result.seconds:.1f} s); the reasons: report.md, report.html")
    if result.failed_required:
        from edgekit.errors import GateFailure

        raise GateFailure(result.failed_required, result.bundle)


def _render_verdicts(verdicts: dict[str, str], excluded: list[str], optional: set[str]) -> None:
    if not verdicts:
        return
    table = Table("artifact", "verdict", title="accuracy sign-off")
    colours = {"pass": "green", "fail": "red", "inconclusive": "yellow"}
    for name, verdict in verdicts.items():
        note = " (left out of the bundle)" if name in excluded else ""
        if name in optional and verdict != "pass":
            note += " (required = false: does not fail the build)"
        table.add_row(name, f"[{colours.get(verdict, 'white')}]{verdict}[/]{note}")
    console.print(table)


@cli.command()
@click.argument("recipe", required=False, type=click.Path(dir_okay=False))
@cache_option
@click.option("--threads", type=click.IntRange(1, 1024))
@click.option("--export", "export_dir", type=click.Path(file_okay=False), help="Copy the reference to DIR.")
def reference(recipe: str | None, cache_dir: str | None, threads: int | None, export_dir: str | None) -> None:
    """Compute (or reuse) the reference for RECIPE, e.g. on a GPU box, and optionally export it."""
    from edgekit.progress import RichProgressReporter
    from edgekit.recipe import load_recipe
    from edgekit.stages import fetch, validate

    loaded = load_recipe(_recipe_arg(recipe))
    cache = _cache(cache_dir)
    with RichProgressReporter(err_console) as progress:
        checkpoint = fetch.run(loaded, cache, progress)
        ref = validate.reference(loaded, checkpoint, cache, progress, threads)
    meta = ref.meta
    took = f"computed in {ref.entry.meta.get('seconds', 0):.1f} s"
    console.print(
        f"reference {ref.key[:16]}: torch {meta['device']} {meta['dtype']} ({meta['device_name']}), "
        f"{meta['scored_tokens']} scored tokens, " + (f"reused from the cache ({took})" if ref.entry.reused else took)
    )
    if export_dir:
        target = validate.export_reference(ref.entry, Path(export_dir))
        console.print(f"exported to {target}; on the build box: edgekit build RECIPE --reference {target}")


@cli.command()
@click.argument("bundle", type=click.Path(file_okay=False))
@click.option("--key", "public_key", type=click.Path(dir_okay=False, exists=True), help="Also check the signature.")
def verify(bundle: str, public_key: str | None) -> None:
    """Check every file of BUNDLE against its manifest (and its signature with --key)."""
    from edgekit.manifest import verify_bundle

    manifest = verify_bundle(Path(bundle))
    if public_key:
        from edgekit.signing import verify_signature

        verify_signature(Path(bundle), Path(public_key))
    signed = " and its signature by that key" if public_key else ""
    console.print(f"[green]ok[/]: {len(manifest['files'])} files match {Path(bundle) / 'manifest.json'}{signed}")


@cli.command()
@click.argument("bundle", type=click.Path(file_okay=False))
@click.option("--key", "private_key", required=True, type=click.Path(dir_okay=False), help="Ed25519 private key.")
def sign(bundle: str, private_key: str) -> None:
    """Sign BUNDLE's manifest (Ed25519, detached manifest.sig) after checking every file against it."""
    from edgekit.signing import sign_bundle

    path = sign_bundle(Path(bundle), Path(private_key))
    console.print(f"signed: {path}  (check with: edgekit verify {bundle} --key PUBLIC_KEY)")


@cli.command()
@click.option("--out", "out_dir", default=".", show_default=True, type=click.Path(file_okay=False))
@click.option("--name", default="edgekit", show_default=True, help="Writes NAME.key (private) and NAME.pub.")
def keygen(out_dir: str, name: str) -> None:
    """Make an Ed25519 key pair for `edgekit sign` / `edgekit verify --key`."""
    from edgekit.signing import generate_keypair

    private, public = Path(out_dir) / f"{name}.key", Path(out_dir) / f"{name}.pub"
    generate_keypair(private, public)
    console.print(f"private key: {private} (keep it secret; mode 600)\npublic key:  {public} (give it to the boxes)")


@cli.command()
@click.argument("bundle", type=click.Path(file_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest summary as JSON.")
def inspect(bundle: str, as_json: bool) -> None:
    """Summarise BUNDLE: artifacts, sizes, tensor types, verdicts."""
    from edgekit.inspect import summarise

    summary = summarise(Path(bundle))
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    console.print(f"[bold]{summary['name']}[/]  built {summary['created']} with edgekit {summary['edgekit_version']}")
    console.print(f"source: {summary['source']}")
    if summary.get("reconstructed_from"):
        console.print(f"[yellow]reference reconstructed from {summary['reconstructed_from']}[/]")
    table = Table("artifact", "size", "bits/weight", "tensor types", "KLD", "top-1", "verdict")
    for a in summary["artifacts"]:
        table.add_row(
            a["name"] + (" *" if a["name"] == summary["default_artifact"] else ""),
            f"{a['size'] / 2**20:,.1f} MiB",
            f"{a['bits_per_weight']:.2f}" if a.get("bits_per_weight") else "—",
            a["type_mix"],
            a.get("kld_mean", "—"),
            a.get("top1", "—"),
            a["verdict"],
        )
    console.print(table)
    console.print(f"runtime: {summary['runtime']}")
    console.print("* the artifact run/serve use by default")


@cli.command()
@cache_option
@click.option("--llama-cpp-dir", type=click.Path(file_okay=False, exists=True), help="Use this llama.cpp checkout.")
def toolchain(cache_dir: str | None, llama_cpp_dir: str | None) -> None:
    """Fetch (once) and show llama.cpp's HF→GGUF converter matching the installed llama-cpp-python."""
    from edgekit.toolchain import get_converter

    converter = get_converter(_cache(cache_dir).root, llama_cpp_dir)
    console.print(f"converter: {converter.script}")
    console.print(f"from: {converter.origin}; llama.cpp commit {converter.llama_cpp_commit or 'unknown'}")


# The edge-box commands (run, serve, bench, tune, numa) live in their own module: no build imports.
from edgekit.cli_runtime import register as _register_runtime_commands  # noqa: E402

_register_runtime_commands(cli)


def main() -> None:
    """Entry point: one clear message and exit code per typed error; tracebacks only with --debug."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(ExitCode.BAD_INPUT)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        err_console.print("interrupted; nothing half-written was left behind")
        sys.exit(ExitCode.INTERRUPTED)
    except EdgekitError as exc:
        if _debug_enabled():
            traceback.print_exc()
        err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False)
        if exc.hint:
            err_console.print(f"  [bold]→[/] {escape(exc.hint)}", highlight=False)
        sys.exit(exc.exit_code)
    except OSError as exc:
        if exc.errno not in ENVIRONMENT_ERRNOS:
            _internal_error(exc)
        _environment_error(exc)
    except Exception as exc:  # a bug: say so, and how to see the details
        _internal_error(exc)


# The disk or the permissions, not a bug: exit 3 with what to do.
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS})


def _environment_error(exc: OSError) -> None:
    if _debug_enabled():
        traceback.print_exc()
    where = f" {escape(str(exc.filename))}" if exc.filename else ""
    message = escape(exc.strerror or str(exc))
    err_console.print(f"[bold red]error:[/] cannot write or read{where}: {message}", highlight=False)
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    fix = "free some space, or point EDGEKIT_CACHE / --out at a larger disk" if full else "check its permissions"
    err_console.print(f"  [bold]→[/] {fix}; nothing half-written was kept", highlight=False)
    sys.exit(ExitCode.ENVIRONMENT)


def _internal_error(exc: BaseException) -> None:
    if _debug_enabled():
        traceback.print_exc()
    err_console.print(f"[bold red]internal error:[/] {type(exc).__name__}: {escape(str(exc))}", highlight=False)
    err_console.print(f"  → this is a bug in edgekit; rerun with --debug (or {DEBUG_ENV}=1) for the traceback")
    sys.exit(ExitCode.RUNTIME)
