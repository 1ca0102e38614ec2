"""What a box says about itself when it joins a build cluster (`edgekit agent`): name and labels.

Labels are read from the machine (CPU model, cores, NUMA nodes, arch, memory) and one short memory
bandwidth probe; `fingerprint` is the key bench results are cached by (`runtime.machine.fingerprint`),
and the runtime loader picks `runtime/<box>.toml` by the box's name or by this fingerprint.
Values are cut to what cluster labels allow: letters, digits, `-`, `_`, `.`, at most 63 characters.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from edgekit.errors import ClusterError, UsageError
from edgekit.runtime import machine
from edgekit.runtime.bench.bandwidth import best_rate, probe

LABEL_KEYS = ("cpu-model", "arch", "physical-cores", "logical-cores", "numa-nodes", "memory-mib", "bandwidth-gib-s",
              "fingerprint")  # fmt: skip


def label_value(text: str) -> str:
    """`text` as a label value: runs of other characters become `-`, trimmed to 63 characters."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")[:63].strip("-_.")
    return value or "unknown"


def box_labels(bandwidth_mib: int = 64) -> dict[str, str]:
    """This machine's labels; `bandwidth_mib` sizes the bandwidth probe's arrays (0 skips it)."""
    info = machine.describe()
    labels = {
        "cpu-model": label_value(info["cpu_model"]),
        "arch": label_value(info["arch"]),
        "physical-cores": str(info["physical_cores"]),
        "logical-cores": str(info["logical_cores"]),
        "numa-nodes": str(info["numa_nodes"]),
        "memory-mib": str(info["memory_total_mib"]),
        "fingerprint": info["fingerprint"],
    }
    if bandwidth_mib:
        labels["bandwidth-gib-s"] = f"{best_rate(probe(bandwidth_mib, runs=3)):.1f}"
    return labels


BOX_RESOURCE = "box:"  # the custom resource a box offers, one unit: `box:NAME`
LABEL_PREFIX = "edgekit.box/"  # the node labels `edgekit agent` sets


def ray_executable() -> str:
    """The `ray` command of this Python environment (installed with `edgekit[cluster]`)."""
    beside = Path(sys.executable).parent / "ray"
    found = str(beside) if beside.is_file() else shutil.which("ray")
    try:
        import ray  # noqa: F401  (the command without its package cannot start a node)
    except ImportError:
        found = None
    if not found:
        raise ClusterError("`edgekit agent` needs Ray, which is not installed", "pip install 'edgekit[cluster]'")
    return found


def agent_command(box: str, address: str, labels: dict[str, str], *, block: bool = True,
                  extra: tuple[str, ...] = (), ray: str = "ray") -> list[str]:  # fmt: skip
    """`ray start` joining the cluster at `address` as a node offering `box:NAME` with these labels."""
    if address.startswith("ray://"):
        raise UsageError(f"{address} is a Ray Client address; a box joins through the head's own address",
                         "pass --address HOST:6379 (what `ray start --head` printed)")  # fmt: skip
    return [
        ray, "start", "--address", address,
        "--resources", json.dumps({f"{BOX_RESOURCE}{box}": 1}),
        "--labels", ",".join(f"{LABEL_PREFIX}{k}={v}" for k, v in labels.items()),
        "--disable-usage-stats", *(["--block"] if block else []), *extra,
    ]  # fmt: skip
