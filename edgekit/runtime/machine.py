"""What this box is: CPU model, cores, memory, NUMA nodes; and the fingerprint bench results are cached by."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from edgekit._util.arch import arch_name
from edgekit._util.hashing import sha256_json
from edgekit.runtime.numa import read_topology


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        for line in text.splitlines():
            if line.split(":", 1)[0].strip() == key and ":" in line:
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


# The ISA a CPU's /proc/cpuinfo flags reveal, by a flag only that ISA has.
_ISA_FLAGS = {"x86_64": "sse2", "aarch64": "asimd"}


def emulated() -> bool:
    """This process runs under user-mode emulation (qemu-user): it sees the host's /proc/cpuinfo, whose flags
    belong to another instruction set than the one it executes. Its timings describe the emulator."""
    arch = arch_name()
    flags = cpu_flags()
    return bool(flags) and arch in _ISA_FLAGS and _ISA_FLAGS[arch] not in flags


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as the kernel lists them (x86 `flags`, Arm `Features`), lower case."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.lower().split())
    return frozenset()


def has_int8_dot_product() -> bool:
    """A CPU with 8-bit dot-product instructions: x86 VNNI (AVX-512 or AVX) or Arm dotprod (`asimddp`)."""
    flags = cpu_flags()
    return bool(flags & {"avx512_vnni", "avx_vnni", "asimddp"}) or platform.machine() not in ("x86_64", "AMD64")


def logical_cores() -> int:
    """CPUs this process may run on (its affinity: a container or numactl may give fewer)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on."""
    logical = logical_cores()
    try:
        import psutil

        physical = psutil.cpu_count(logical=False) or logical
        total_logical = psutil.cpu_count(logical=True) or logical
    except ImportError:
        return logical
    threads_per_core = max(1, round(total_logical / physical))
    return max(1, min(physical, logical // threads_per_core or 1))


def memory_total() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def describe() -> dict[str, Any]:
    """The machine section of a bench result."""
    topology = read_topology()
    info: dict[str, Any] = {
        "cpu_model": cpu_model(),
        "arch": platform.machine(),
        "physical_cores": physical_cores(),
        "logical_cores": logical_cores(),
        "numa_nodes": len(topology.nodes),
        "memory_total_mib": round(memory_total() / 2**20),
        "system": platform.system(),
        "emulated": emulated(),
    }
    info["fingerprint"] = fingerprint(info)
    return info


def fingerprint(info: dict[str, Any] | None = None) -> str:
    """Bench results are reused only on a machine with the same CPU model, core counts and NUMA nodes."""
    info = info or describe()
    keys = ("cpu_model", "arch", "physical_cores", "logical_cores", "numa_nodes")
    return sha256_json({k: info[k] for k in keys})[:16]


def thread_candidates(physical: int, logical: int) -> list[int]:
    """Thread counts to sweep: every count up to 8, then a geometric ladder to the physical cores,
    and the logical CPUs where SMT gives more than the physical cores."""
    counts = set(range(1, min(physical, 8) + 1))
    step = 8
    while step < physical:
        step = int(step * 1.5)
        counts.add(min(step, physical))
    counts.add(physical)
    if logical > physical:
        counts.add(logical)
    return sorted(counts)
