"""Commands on bundles and tools: verify, sign, keygen, inspect, toolchain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from edgekit.cli.common import bundle_argument, console, emit_json, json_option


@click.command()
@bundle_argument
@click.option("--key", "public_key", type=click.Path(dir_okay=False, exists=True), help="Also check the signature.")
@json_option("verify")
def verify(bundle: str, public_key: str | None, as_json: bool) -> None:
    """Check every file of BUNDLE against its manifest (and its signature with --key)."""
    from edgekit.errors import IntegrityError
    from edgekit.manifest import check_bundle

    check = check_bundle(Path(bundle))
    signature, failure = _signature(Path(bundle), public_key) if public_key and not check.problems else (None, None)
    if as_json:
        emit_json("verify", {"bundle": bundle, "ok": not check.problems and failure is None, "files": check.files,
                             "problems": check.problems, "signature": signature})  # fmt: skip
    if check.problems:
        raise IntegrityError(Path(bundle), check.problems)
    if failure is not None:
        raise failure
    if not as_json:
        signed = " and its signature by that key" if public_key else ""
        console.print(f"[green]ok[/]: {len(check.files)} files match {escape(str(Path(bundle) / 'manifest.json'))}"
                      f"{signed}")  # fmt: skip


def _signature(bundle: Path, public_key: str) -> tuple[dict[str, Any], Exception | None]:
    from edgekit.errors import EdgekitError
    from edgekit.signing import verify_signature

    try:
        verify_signature(bundle, Path(public_key))
    except EdgekitError as exc:
        return {"key": public_key, "ok": False, "problem": exc.message}, exc
    return {"key": public_key, "ok": True, "problem": None}, None


@click.command()
@bundle_argument
@click.option("--key", "private_key", required=True, type=click.Path(dir_okay=False), help="Ed25519 private key.")
def sign(bundle: str, private_key: str) -> None:
    """Sign BUNDLE's manifest (Ed25519, detached manifest.sig) after checking every file against it."""
    from edgekit.signing import sign_bundle

    path = sign_bundle(Path(bundle), Path(private_key))
    console.print(f"signed: {path}  (check with: edgekit verify {bundle} --key PUBLIC_KEY)")


@click.command()
@click.option("--out", "out_dir", default=".", show_default=True, type=click.Path(file_okay=False))
@click.option("--name", default="edgekit", show_default=True, help="Writes NAME.key (private) and NAME.pub.")
def keygen(out_dir: str, name: str) -> None:
    """Make an Ed25519 key pair for `edgekit sign` / `edgekit verify --key`."""
    from edgekit.signing import generate_keypair

    private, public = Path(out_dir) / f"{name}.key", Path(out_dir) / f"{name}.pub"
    generate_keypair(private, public)
    console.print(f"private key: {private} (keep it secret; mode 600)\npublic key:  {public} (give it to the boxes)")


@click.command()
@bundle_argument
@json_option("inspect")
def inspect(bundle: str, as_json: bool) -> None:
    """Summarise BUNDLE (verified first): artifacts, sizes, tensor types, verdicts."""
    from edgekit.inspect import summarise
    from edgekit.manifest import verify_bundle

    verify_bundle(Path(bundle))
    summary = summarise(Path(bundle))
    if as_json:
        emit_json("inspect", summary)
        return
    console.print(
        f"[bold]{escape(str(summary['name']))}[/]  built {summary['created']} with edgekit {summary['edgekit_version']}"
    )
    console.print(f"source: {escape(summary['source'])}", highlight=False)
    if summary.get("reconstructed_from"):
        console.print(f"[yellow]reference reconstructed from {escape(summary['reconstructed_from'])}[/]")
    table = Table("artifact", "size", "bits/weight", "tensor types", "KLD", "top-1", "verdict")
    for a in summary["artifacts"]:
        table.add_row(
            escape(a["name"]) + (" *" if a["name"] == summary["default_artifact"] else ""),
            f"{a['size'] / 2**20:,.1f} MiB" if isinstance(a["size"], int | float) else "—",
            _number(a["bits_per_weight"], ".2f"),
            escape(a["type_mix"]),
            _number(a["kld_mean"], ".4g"),
            _number(a["top1"], ".4g"),
            escape(str(a["verdict"])),
        )
    console.print(table)
    console.print(f"runtime: {escape(summary['runtime'])}", highlight=False)
    console.print("* the artifact run/serve use by default")


def _number(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


@click.command()
@click.option("--llama-cpp-dir", type=click.Path(file_okay=False, exists=True), help="Use this llama.cpp checkout.")
@json_option("toolchain")
def toolchain(llama_cpp_dir: str | None, as_json: bool) -> None:
    """Fetch (once) and show llama.cpp's HF→GGUF converter matching the installed llama-cpp-python."""
    from edgekit.toolchain import get_converter

    converter = get_converter(llama_cpp_dir)
    if as_json:
        emit_json("toolchain", {"converter": str(converter.script), "origin": converter.origin,
                                "llama_cpp_commit": converter.llama_cpp_commit,
                                "script_sha256": converter.script_sha256})  # fmt: skip
        return
    console.print(f"converter: {escape(str(converter.script))}", highlight=False)
    console.print(f"from: {escape(converter.origin)}; llama.cpp commit {converter.llama_cpp_commit or 'unknown'}")


COMMANDS = (verify, sign, keygen, inspect, toolchain)
