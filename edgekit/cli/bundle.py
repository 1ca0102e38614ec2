"""Commands on bundles and tools: inspect, toolchain (signing and shipping: `edgekit.cli.ship`)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from edgekit.cli.common import bundle_argument, console, emit_json, json_option, progress_reporter


@click.command()
@bundle_argument
@json_option("inspect")
def inspect(bundle: str, as_json: bool) -> None:
    """Summarise BUNDLE (verified first): artifacts, sizes, tensor types, verdicts."""
    from edgekit.diagnose.inspect import summarise
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
@click.option("--tools", is_flag=True, help="Also build llama-quantize, llama-imatrix, llama-perplexity, llama-bench.")
@click.option("--server", is_flag=True, help="Also build llama-server.")
@click.option("--jobs", type=click.IntRange(min=1), help="Parallel compile jobs (default: every CPU).")
@click.option("--box", "box_arch", metavar="ARCH", help="Also build the runtime for boxes of this CPU architecture "
              "(aarch64): llama-cpp-python cross-compiled, and every wheel of edgekit[runtime] (what `edgekit pack "
              "--box` carries).")  # fmt: skip
@click.option("--march", help="With --box: the -march llama.cpp is compiled for (default: the architecture's "
              "baseline, armv8-a).")  # fmt: skip
@json_option("toolchain")
def toolchain(llama_cpp_dir: str | None, tools: bool, server: bool, jobs: int | None, box_arch: str | None,
              march: str | None, as_json: bool) -> None:  # fmt: skip
    """Fetch (once) llama.cpp's converter, and build (once) its tools, for the installed llama-cpp-python."""
    from edgekit.errors import UsageError
    from edgekit.toolchain import TOOL_SETS, build_tools, get_converter, tools_dir, tools_info
    from edgekit.toolchain.box import box_runtime

    if march and not box_arch:
        raise UsageError("--march is for --box", "add --box ARCH, or leave --march out")
    converter = get_converter(llama_cpp_dir)
    wanted = [name for name, flag in (("tools", tools), ("server", server)) if flag]
    box = None
    with progress_reporter() as progress:
        if wanted:
            build_tools(wanted, progress, jobs)
        if box_arch:
            box = box_runtime(box_arch, ("runtime",), progress, march=march, jobs=jobs)
    built = {name: tools_info(name) for name in TOOL_SETS}
    if as_json:
        emit_json("toolchain", {"converter": str(converter.script), "origin": converter.origin,
                                "llama_cpp_commit": converter.llama_cpp_commit,
                                "script_sha256": converter.script_sha256,
                                "tools": {name: {"targets": list(toolset.targets),
                                                 "dir": str(tools_dir(name)) if built[name] else None,
                                                 "build_seconds": (built[name] or {}).get("build_seconds")}
                                          for name, toolset in TOOL_SETS.items()},
                                "box": {**box.describe(), "dir": str(box.folder)} if box else None})  # fmt: skip
        return
    console.print(f"converter: {escape(str(converter.script))}", highlight=False)
    console.print(f"from: {escape(converter.origin)}; llama.cpp commit {converter.llama_cpp_commit or 'unknown'}")
    for name, toolset in TOOL_SETS.items():
        info = built[name]
        state = f"{escape(str(tools_dir(name)))} (built in {info['build_seconds']:.0f} s)" if info else "not built"
        console.print(
            f"{', '.join(toolset.targets)}: {state}" + ("" if info else f" (edgekit toolchain {toolset.flag})"),
            highlight=False,
        )
    if box:
        what = f"box runtime ({box.arch}, -march={box.march}, Python {box.python}): {len(box.wheels)} wheels"
        console.print(f"{what} in {escape(str(box.folder))} (edgekit pack BUNDLE --box {box.arch})", highlight=False)


COMMANDS = (inspect, toolchain)
