"""Commands on bundles and tools: verify, sign, keygen, inspect, toolchain."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from edgekit.cli.common import console, err_console


@click.command()
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


@click.command()
@click.argument("bundle", type=click.Path(file_okay=False))
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


@click.command()
@click.option("--llama-cpp-dir", type=click.Path(file_okay=False, exists=True), help="Use this llama.cpp checkout.")
@click.option("--tools", is_flag=True, help="Also build llama-quantize, llama-imatrix, llama-perplexity, llama-bench.")
@click.option("--server", is_flag=True, help="Also build llama-server.")
@click.option("--jobs", type=click.IntRange(min=1), help="Parallel compile jobs (default: every CPU).")
def toolchain(llama_cpp_dir: str | None, tools: bool, server: bool, jobs: int | None) -> None:
    """Fetch (once) llama.cpp's converter, and build (once) its tools, for the installed llama-cpp-python."""
    from edgekit.progress import RichProgressReporter
    from edgekit.toolchain import TOOL_SETS, build_tools, get_converter, tools_dir, tools_info

    converter = get_converter(llama_cpp_dir)
    console.print(f"converter: {converter.script}")
    console.print(f"from: {converter.origin}; llama.cpp commit {converter.llama_cpp_commit or 'unknown'}")
    wanted = [name for name, flag in (("tools", tools), ("server", server)) if flag]
    if wanted:
        with RichProgressReporter(err_console) as progress:
            build_tools(wanted, progress, jobs)
    for name, toolset in TOOL_SETS.items():
        info = tools_info(name)
        state = f"{tools_dir(name)} (built in {info['build_seconds']:.0f} s)" if info else "not built"
        console.print(
            f"{', '.join(toolset.targets)}: {state}" + ("" if info else f" (edgekit toolchain {toolset.flag})")
        )


COMMANDS = (verify, sign, keygen, inspect, toolchain)
