"""Commands on bundles and tools: inspect, toolchain (signing and shipping: `edgekit.cli.ship`)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from edgekit.cli.common import bundle_argument, console, emit_json, json_option


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
        f"[bold]{escape(str(summary['name']))}[/] release {summary['release']}  built {summary['created']} "
        f"with edgekit {summary['edgekit_version']}"
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


COMMANDS = (inspect, toolchain)
