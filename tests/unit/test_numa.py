"""NUMA placement from sysfs-style fixture trees of 1, 2 and 4 nodes (this box has one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgekit.runtime.numa import Node, Topology, choose_policy, parse_cpulist, read_topology

GIB = 2**30


def make_sysfs(root: Path, nodes: dict[int, tuple[str, int]]) -> Path:
    """nodes: id → (cpulist, MemTotal in GiB), written the way Linux lays out /sys/devices/system/node."""
    base = root / "node"
    for node_id, (cpulist, gib) in nodes.items():
        d = base / f"node{node_id}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpulist + "\n")
        kib = gib * 1024 * 1024
        (d / "meminfo").write_text(
            f"Node {node_id} MemTotal:       {kib} kB\nNode {node_id} MemFree:        {kib // 2} kB\n"
        )
    (base / "online").write_text(f"0-{max(nodes)}\n")
    return base


def test_parse_cpulist_ranges_and_singles() -> None:
    assert parse_cpulist("0-3,8-9,12\n") == (0, 1, 2, 3, 8, 9, 12)
    assert parse_cpulist("") == ()


def test_one_node_needs_no_placement(tmp_path: Path) -> None:
    topology = read_topology(make_sysfs(tmp_path, {0: ("0-7", 32)}))
    assert [n.cpus for n in topology.nodes] == [tuple(range(8))]
    plan = choose_policy(topology, model_bytes=100 * 2**20)
    assert plan.policy == "none" and plan.numactl == () and "1 NUMA node" in plan.reason


def test_two_nodes_bind_a_model_that_fits_to_the_node_with_most_free_memory(tmp_path: Path) -> None:
    topology = read_topology(make_sysfs(tmp_path, {0: ("0-7,16-23", 32), 1: ("8-15,24-31", 64)}))
    assert topology.nodes[1].mem_total == 64 * GIB and len(topology.nodes[0].cpus) == 16
    plan = choose_policy(topology, model_bytes=4 * GIB)
    assert plan.policy == "isolate" and plan.node == 1
    assert plan.numactl == ("numactl", "--cpunodebind=1", "--membind=1")
    assert plan.cpus == tuple(range(8, 16)) + tuple(range(24, 32))


def test_two_nodes_distribute_a_model_larger_than_any_node(tmp_path: Path) -> None:
    topology = read_topology(make_sysfs(tmp_path, {0: ("0-3", 8), 1: ("4-7", 8)}))
    plan = choose_policy(topology, model_bytes=12 * GIB)
    assert plan.policy == "distribute" and plan.node is None
    assert plan.numactl == ("numactl", "--interleave=all") and "interleave" in plan.reason


def test_four_nodes_respect_a_pinned_node_and_the_none_policy(tmp_path: Path) -> None:
    nodes = {i: (f"{4 * i}-{4 * i + 3}", 16) for i in range(4)}
    topology = read_topology(make_sysfs(tmp_path, nodes))
    assert len(topology.nodes) == 4
    pinned = choose_policy(topology, model_bytes=GIB, requested="isolate", node=2)
    assert pinned.policy == "isolate" and pinned.node == 2 and pinned.cpus == (8, 9, 10, 11)
    assert choose_policy(topology, model_bytes=GIB, requested="none").policy == "none"
    assert choose_policy(topology, model_bytes=GIB, requested="distribute").policy == "distribute"
    missing = choose_policy(topology, model_bytes=GIB, requested="isolate", node=7)
    assert missing.policy == "distribute" and "numa_node 7" in missing.reason


def test_memory_only_nodes_are_not_candidates() -> None:
    topology = Topology((Node(0, (0, 1), 4 * GIB), Node(1, (), 256 * GIB)))  # e.g. CXL memory without CPUs
    assert choose_policy(topology, model_bytes=GIB).policy == "none"


def test_missing_sysfs_means_one_node(tmp_path: Path) -> None:
    topology = read_topology(tmp_path / "absent")
    assert len(topology.nodes) == 1 and topology.nodes[0].cpus


def test_unknown_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="numa policy"):
        choose_policy(read_topology(make_sysfs(tmp_path, {0: ("0", 1)})), 1, requested="sideways")
