"""NUMA: read the box's nodes from sysfs and choose how the model and its threads are placed.

Policy (runtime.toml `numa`):
    none        one node, or asked for: nothing to do
    isolate     the model (plus headroom for the KV cache) fits in one node's memory: bind threads and
                memory to that node (`numactl --cpunodebind=N --membind=N`, llama.cpp numa=numactl;
                without numactl, llama.cpp numa=isolate keeps threads on the node it started on)
    distribute  it does not fit in any single node: interleave memory over all nodes
                (`numactl --interleave=all`, llama.cpp numa=distribute)
    auto        decide on the box with the rules above (what a bundle ships with)

The sysfs root is a parameter so tests can build fixture trees of 1, 2 and 4 nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

SYSFS_NODES = Path("/sys/devices/system/node")
# The model must fit in this share of a node's memory, beside the OS and the KV cache.
NODE_MEMORY_SHARE = 0.8
# Model bytes are multiplied by this for the KV cache, compute buffers and the Python process.
HEADROOM = 1.25
POLICIES = ("auto", "none", "isolate", "distribute")


@dataclass(frozen=True)
class Node:
    id: int
    cpus: tuple[int, ...]
    mem_total: int  # bytes
    mem_free: int | None = None  # bytes


@dataclass(frozen=True)
class Topology:
    nodes: tuple[Node, ...]

    @property
    def usable(self) -> tuple[Node, ...]:
        """Nodes with both CPUs and memory (memory-only nodes, e.g. CXL or HBM, cannot run threads)."""
        return tuple(n for n in self.nodes if n.cpus and n.mem_total > 0)


@dataclass(frozen=True)
class NumaPlan:
    policy: str  # none | isolate | distribute
    node: int | None
    reason: str
    numactl: tuple[str, ...] = ()  # the numactl arguments that apply it ("" when none)
    cpus: tuple[int, ...] = field(default=())  # the CPUs threads will run on (empty: all)

    def as_dict(self) -> dict[str, object]:
        return {"policy": self.policy, "node": self.node, "reason": self.reason, "numactl": " ".join(self.numactl)}


def parse_cpulist(text: str) -> tuple[int, ...]:
    """'0-3,8-11,16' → (0, 1, 2, 3, 8, 9, 10, 11, 16)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(part))
    return tuple(sorted(set(cpus)))


def _meminfo_value(text: str, key: str) -> int | None:
    match = re.search(rf"\b{key}:\s+(\d+)\s*kB", text)
    return int(match.group(1)) * 1024 if match else None


def read_topology(root: Path = SYSFS_NODES) -> Topology:
    """The NUMA nodes under `root` (a sysfs-style tree). No tree (not Linux, or a container hiding
    it) means one node holding every CPU and all memory."""
    nodes = []
    if root.is_dir():
        for path in sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
            cpulist = path / "cpulist"
            meminfo = path / "meminfo"
            cpus = parse_cpulist(cpulist.read_text()) if cpulist.is_file() else ()
            text = meminfo.read_text() if meminfo.is_file() else ""
            total = _meminfo_value(text, "MemTotal") or 0
            nodes.append(Node(int(path.name[4:]), cpus, total, _meminfo_value(text, "MemFree")))
    if not nodes:
        nodes.append(_whole_machine())
    return Topology(tuple(nodes))


def _whole_machine() -> Node:
    import os

    cpus = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        text = ""
    return Node(0, cpus or tuple(range(os.cpu_count() or 1)), _meminfo_value(text, "MemTotal") or 0)


def choose_policy(topology: Topology, model_bytes: int, requested: str = "auto", node: int | None = None) -> NumaPlan:
    """Where to run a model of `model_bytes` on `topology`, given runtime.toml's `numa` and `numa_node`."""
    if requested not in POLICIES:
        raise ValueError(f"numa policy {requested!r}; expected one of {', '.join(POLICIES)}")
    usable = topology.usable
    if requested == "none":
        return NumaPlan("none", None, "NUMA placement disabled in runtime config")
    if len(usable) <= 1:
        return NumaPlan("none", None, f"{len(topology.nodes)} NUMA node: nothing to place")
    need = int(model_bytes * HEADROOM)
    if requested == "distribute":
        return _distribute(usable, "distribute requested in runtime config")
    candidates = [n for n in usable if n.id == node] if node is not None else list(usable)
    if node is not None and not candidates:
        known = ", ".join(str(n.id) for n in usable)
        return _distribute(usable, f"numa_node {node} has no CPUs or memory on this box (nodes: {known})")
    fitting = [n for n in candidates if need <= n.mem_total * NODE_MEMORY_SHARE]
    if not fitting:
        biggest = max(candidates, key=lambda n: n.mem_total)
        return _distribute(
            usable,
            f"the model needs ~{need / 2**30:.1f} GiB; the largest node ({biggest.id}) has "
            f"{biggest.mem_total / 2**30:.1f} GiB (of which {NODE_MEMORY_SHARE:.0%} is usable): interleave",
        )
    # Most free memory first (fewer remote allocations), then most CPUs, then the lowest id.
    best = max(fitting, key=lambda n: (n.mem_free or n.mem_total, len(n.cpus), -n.id))
    return NumaPlan(
        "isolate",
        best.id,
        f"the model (~{need / 2**20:,.0f} MiB with headroom) fits in node {best.id} "
        f"({best.mem_total / 2**30:.1f} GiB, {len(best.cpus)} CPUs): bind threads and memory to it",
        ("numactl", f"--cpunodebind={best.id}", f"--membind={best.id}"),
        best.cpus,
    )


def _distribute(usable: tuple[Node, ...], reason: str) -> NumaPlan:
    cpus = tuple(sorted(c for n in usable for c in n.cpus))
    return NumaPlan("distribute", None, reason, ("numactl", "--interleave=all"), cpus)
