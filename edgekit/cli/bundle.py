"""Commands on bundles and tools: inspect, toolchain (signing and shipping: `edgekit.cli.ship`)."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from edgekit.cli.common import console


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
    console.print(
        f"[bold]{summary['name']}[/] release {summary['release']}  built {summary['created']} "
        f"with edgekit {summary['edgekit_version']}"
    )
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
def toolchain(llama_cpp_dir: str | None) -> None:
    """Fetch (once) and show llama.cpp's HF→GGUF converter matching the installed llama-cpp-python."""
    from edgekit.toolchain import get_converter

    converter = get_converter(llama_cpp_dir)
    console.print(f"converter: {converter.script}")
    console.print(f"from: {converter.origin}; llama.cpp commit {converter.llama_cpp_commit or 'unknown'}")


COMMANDS = (inspect, toolchain)
