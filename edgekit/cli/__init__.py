"""The `edgekit` command: parse, call the library, render. No pipeline logic lives here.

Commands live in `build` (build, plan, reference), `bundle` (inspect, toolchain), `ship` (keygen, sign,
verify, pack, install, status, rollback), `fleet` (push, pull, mender-module), `runtime` (run, serve,
bench, tune, numa: what a box runs, with no build-side imports) and `system` (doctor, schema). Output
rules (plain lines for pipes and CI, `--json`) are in `common`.
"""

from __future__ import annotations

import os
import sys

import click

from edgekit import __version__
from edgekit.cli import agent, build, bundle, fleet, runtime, ship, system
from edgekit.cli.errors import DEBUG_ENV, run_reporting_errors


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from edgekit.diagnose.doctor import backend_packages

    click.echo(f"edgekit {__version__} (Python {sys.version.split()[0]})")
    for name, packages in backend_packages().items():
        found = ", ".join(f"{p.dist} {p.version or 'missing'}" for p in packages)
        click.echo(f"  {name}: {found}")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show edgekit's version and each backend's packages, and exit.")  # fmt: skip
@click.option("-v", "--verbose", is_flag=True, help="Stream every library's output (also kept in the stage logs).")
@click.option("--debug", is_flag=True, help=f"Show tracebacks (or set {DEBUG_ENV}=1); with -v, everything.")
def cli(verbose: bool, debug: bool) -> None:
    """Turn a Hugging Face causal LM into a validated, ready-to-run CPU bundle."""
    from edgekit.observe import stagelog

    if debug:
        os.environ[DEBUG_ENV] = "1"
    stagelog.echo(sys.stderr if verbose else None)


for module in (build, bundle, ship, fleet, runtime, system, agent):
    for command in module.COMMANDS:
        cli.add_command(command)


def main() -> None:
    run_reporting_errors(lambda: cli.main(standalone_mode=False))
