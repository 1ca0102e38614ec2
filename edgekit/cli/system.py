"""Commands about this box and edgekit itself: doctor, schema."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli.common import cache_option, console, emit_json, json_option, load_schema, schema_names

STYLES = {"ok": "green", "warn": "yellow", "missing": "red"}


@click.command()
@cache_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Output folder to check (default ./dist).")
@json_option("doctor")
def doctor(cache_dir: str | None, out_dir: str | None, as_json: bool) -> None:
    """What this box can do and what is missing: packages, toolchain, CPU, memory, disk; each with its fix."""
    from edgekit.diagnose.doctor import diagnose, summary

    checks = diagnose(Path(cache_dir) if cache_dir else None, Path(out_dir) if out_dir else None)
    if as_json:
        emit_json("doctor", summary(checks))
        return
    group = None
    for c in checks:
        if c.group != group:
            console.print(f"[bold]{c.group}[/]")
            group = c.group
        status = f"[{STYLES[c.status]}]{c.status:<8}[/]"
        console.print(f"  {status} {escape(c.name):<18} {escape(c.value)}", highlight=False)
        if c.fix:
            console.print(f"  {'':<8} {'':<18} → {escape(c.fix)}", highlight=False)
    counts = summary(checks)["summary"]
    console.print(f"{counts['ok']} ok, {counts['warn']} warn, {counts['missing']} missing")


@click.command()
@click.argument("name", required=False, type=click.Choice(schema_names()))
def schema(name: str | None) -> None:
    """Print the JSON Schema of `edgekit NAME --json` (without NAME: the schemas there are)."""
    if name is None:
        for known in schema_names():
            found = load_schema(known)
            click.echo(f"{known}  v{found['properties']['version']['const']}  {found['title']}")
        return
    click.echo(json.dumps(load_schema(name), indent=2))


COMMANDS = (doctor, schema)
