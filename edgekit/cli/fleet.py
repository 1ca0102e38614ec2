"""The fleet's channels: an OCI registry (push on the build machine, pull for hand-carry; `edgekit install
oci://…` is in `ship`) and Mender (`pack --mender` is in `ship`; the box's update module here). Parse, call
`edgekit.ship.oci` / `edgekit.ship.mender`, render."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from edgekit.cli.common import bundle_argument, console, emit_json, json_option, mib, progress_reporter


def connection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--insecure", is_flag=True,
        help="Plain HTTP, for a registry on loopback only (127.0.0.1, ::1, localhost).",
    )(command)  # fmt: skip
    return click.option(
        "--ca-file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
        help="Verify the registry's TLS certificate against this CA (PEM) instead of the system's.",
    )(command)  # fmt: skip


def connection(ca_file: Path | None, insecure: bool) -> Any:
    from edgekit.ship.oci.client import Connection

    return Connection(ca_file=ca_file, insecure=insecure)


@click.command()
@bundle_argument
@click.argument("reference", metavar="oci://HOST[:PORT]/REPO:TAG")
@connection_options
@json_option("push")
def push(bundle: str, reference: str, ca_file: Path | None, insecure: bool, as_json: bool) -> None:
    """Push the signed BUNDLE to an OCI registry as a ModelPack artifact; print its digest.

    Credentials: $EDGEKIT_REGISTRY_USER and $EDGEKIT_REGISTRY_PASSWORD, else ~/.docker/config.json (docker login).
    """
    from edgekit.ship.oci.push import push_bundle

    with progress_reporter() as progress:
        pushed = push_bundle(Path(bundle), reference, connection(ca_file, insecure), progress)
    if as_json:
        return emit_json("push", pushed.as_dict())
    console.print(f"{pushed.digest}  {reference}", highlight=False)
    console.print(f"[dim]{pushed.name} release {pushed.release}: {pushed.layers} layers, {mib(pushed.size)}, "
                  f"{mib(pushed.uploaded)} sent (the registry held the rest); pin boxes to {pushed.reference}[/]",
                  highlight=False)  # fmt: skip


@click.command()
@click.argument("reference", metavar="oci://HOST[:PORT]/REPO:TAG|@sha256:DIGEST")
@click.option("-o", "--out", type=click.Path(path_type=Path), help="The pack file, or a folder (default: here).")
@connection_options
@json_option("pull")
def pull(reference: str, out: Path | None, ca_file: Path | None, insecure: bool, as_json: bool) -> None:
    """Fetch an artifact without installing it, as an .edgekit pack to carry to a box (edgekit install PACK)."""
    from edgekit.ship.oci.carry import pull_pack

    with progress_reporter() as progress:
        result = pull_pack(reference, connection(ca_file, insecure), out, progress)
    if as_json:
        return emit_json("pull", result)
    console.print(f"{result['sha256']}  {result['path']}", highlight=False)
    console.print(f"[dim]{result['name']} release {result['release']} from {result['digest']}; "
                  f"{mib(result['transfer']['fetched'])} fetched[/]", highlight=False)  # fmt: skip


@click.command("mender-module")
@click.option("--root", default="/var/lib/edgekit", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="The install root the module installs into.")  # fmt: skip
@click.option("--modules-dir", default="/usr/share/mender/modules/v3", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Mender's update modules folder.")  # fmt: skip
@click.option("--trust-dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="The trusted public keys, if not /etc/edgekit/trusted-keys.")  # fmt: skip
def mender_module(root: Path, modules_dir: Path, trust_dir: Path | None) -> None:
    """On the box: install the `edgekit-bundle` Mender update module, for `edgekit pack --mender` artifacts."""
    from edgekit.ship.mender.artifact import install_module

    path = install_module(root, modules_dir, trust_dir)
    console.print(f"{path}: installs into {root} (mender install NAME.mender, then mender commit or rollback)",
                  highlight=False)  # fmt: skip


COMMANDS = (push, pull, mender_module)
