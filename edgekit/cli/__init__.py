"""The `edgekit` command: parse, call the library, render. No pipeline logic lives here.

Commands live in `build` (build, plan, reference), `bundle` (verify, sign, keygen, inspect, toolchain)
and `runtime` (run, serve, bench, tune, numa: what a box runs, with no build-side imports).
"""

from __future__ import annotations

import os

import click

from edgekit import __version__
from edgekit.cli import agent, build, bundle, runtime
from edgekit.cli.errors import DEBUG_ENV, run_reporting_errors


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgekit")
@click.option("--debug", is_flag=True, help=f"Show tracebacks (or set {DEBUG_ENV}=1).")
def cli(debug: bool) -> None:
    """Turn a Hugging Face causal LM into a validated, ready-to-run CPU bundle."""
    if debug:
        os.environ[DEBUG_ENV] = "1"


for module in (build, bundle, runtime, agent):
    for command in module.COMMANDS:
        cli.add_command(command)


def main() -> None:
    run_reporting_errors(lambda: cli.main(standalone_mode=False))
