"""`edgekit agent`: run on a target box; it joins the build cluster as a node that benchmarks only there."""

from __future__ import annotations

import re
import subprocess

import click
from rich.table import Table

from edgekit.cli.common import console


@click.command()
@click.option("--box", "box", required=True, help="This box's name, as recipes name it in [[bench.boxes]].")
@click.option(
    "--address",
    envvar="EDGEKIT_CLUSTER",
    required=True,
    help="The head's address, HOST:6379 (as `ray start --head` printed it); or set EDGEKIT_CLUSTER.",
)
@click.option("--num-cpus", type=click.IntRange(1), help="CPUs this node offers (default: all).")
@click.option("--object-store-memory", type=click.IntRange(78 * 2**20), help="Bytes for Ray's object store.")
@click.option("--node-ip-address", help="The address other nodes reach this one at (default: Ray's guess).")
@click.option(
    "--bandwidth-mib",
    type=click.IntRange(0, 4096),
    default=64,
    show_default=True,
    help="Array size of the bandwidth probe whose result becomes a label (0: skip the probe).",
)
@click.option(
    "--block/--no-block",
    default=True,
    show_default=True,
    help="Stay until stopped (Ctrl-C); --no-block returns once joined (`ray stop` leaves).",
)
def agent(box: str, address: str, num_cpus: int | None, object_store_memory: int | None,
          node_ip_address: str | None, bandwidth_mib: int, block: bool) -> None:  # fmt: skip
    """Join the build cluster at ADDRESS as box NAME: it offers the resource box:NAME and labels read from
    this machine (CPU model, cores, NUMA nodes, arch, memory, measured bandwidth)."""
    from edgekit.errors import ClusterError, UsageError
    from edgekit.recipe.problems import NAME_PATTERN
    from edgekit.runtime.box import agent_command, box_labels, ray_executable

    if not re.fullmatch(NAME_PATTERN, box) or box == "local":
        raise UsageError(f"box name {box!r} is not usable", "use letters, digits, '.', '_' or '-' (not 'local')")
    ray = ray_executable()
    labels = box_labels(bandwidth_mib)
    table = Table("label", "value", title=f"box {box}")
    for key, value in labels.items():
        table.add_row(key, value)
    console.print(table)
    extra: list[str] = []
    given: dict[str, int | str | None] = {
        "--num-cpus": num_cpus, "--object-store-memory": object_store_memory, "--node-ip-address": node_ip_address,
    }  # fmt: skip
    for flag, given_value in given.items():
        extra += [flag, str(given_value)] if given_value is not None else []
    command = agent_command(box, address, labels, block=block, extra=tuple(extra), ray=ray)
    console.print(f"joining {address} as box:{box}" + (" (Ctrl-C to leave)" if block else ""))
    try:
        done = subprocess.run(command, capture_output=not block, text=True)
    except KeyboardInterrupt:
        return
    if done.returncode != 0:
        tail = "\n".join(((done.stderr or "") + (done.stdout or "")).strip().splitlines()[-5:])
        raise ClusterError(f"`ray start` could not join {address} (exit {done.returncode}): {tail}",
                           "check the address, and that the head runs the same Ray version")  # fmt: skip
    if not block:
        console.print(f"joined {address} as box:{box}; `ray stop` on this box leaves the cluster")


COMMANDS = (agent,)
