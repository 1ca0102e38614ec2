"""Memory of the build: resident memory of this process tree while work runs, and how much is left to use.

`MemoryWatch` samples the resident set of this process and of every process it started (converters
and other children) from /proc, split as the kernel splits it: anonymous memory (what the process
allocated; only swap can take it back) and file-backed memory (pages of memory-mapped files such as
weights; clean ones are dropped and re-read under pressure). It reads `/proc/PID/status` (RssAnon,
RssFile, RssShmem) every 50 ms on a thread of its own, so each peak is that of the whole tree while
the watch ran: tasks that run side by side share their figures.

`available_memory` is what new allocations may take: MemAvailable, and less when a control group's
memory limit (cgroup v2 `memory.max`, v1 `memory.limit_in_bytes`) or this process's RLIMIT_DATA is
tighter. RLIMIT_DATA bounds private writable memory (heap, anonymous maps), not read-only maps of
files, which is why streamed weights are mapped read-only.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import resource
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

MIB = 2**20
INTERVAL_SECONDS = 0.05
_FIELDS = {"RssAnon": "anon", "RssFile": "file", "RssShmem": "shmem", "VmData": "data"}


def release_freed_memory() -> None:
    """Give what the heap holds free back to the kernel (glibc's `malloc_trim`), so that a stage's working memory
    does not stay in the build's RSS under the stages after it (a whole FP32 reference leaves about 0.8 GiB per
    billion weights otherwise). Nothing happens without glibc."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def process_memory(pid: int | str = "self") -> dict[str, int]:
    """Bytes of RssAnon, RssFile, RssShmem and VmData of one process (empty if it is gone)."""
    found: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text(errors="replace")  # Name: cut at 15 bytes, maybe mid-character
    except OSError:
        return found
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in _FIELDS:
            found[_FIELDS[name]] = int(value.split()[0]) * 1024
    return found


def descendants(pid: int | str = "self") -> list[int]:
    """Every process started by `pid`, its children's children included (from /proc/PID/task/*/children)."""
    found: list[int] = []
    pending = [str(pid)]
    while pending:
        current = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                children = Path(f"/proc/{current}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            found += [int(c) for c in children]
            pending += children
    return found


def tree_memory() -> dict[str, int]:
    """Resident bytes of this process and its descendants: anonymous, file-backed (shared memory counts as anon)."""
    anon = file = 0
    pids: list[int | str] = ["self", *descendants()]
    for pid in pids:
        status = process_memory(pid)
        anon += status.get("anon", 0) + status.get("shmem", 0)
        file += status.get("file", 0)
    return {"anon": anon, "file": file}


@dataclass
class Peaks:
    anon: int = 0
    file: int = 0
    total: int = 0
    samples: int = 0

    def add(self, sample: dict[str, int]) -> None:
        self.anon = max(self.anon, sample["anon"])
        self.file = max(self.file, sample["file"])
        self.total = max(self.total, sample["anon"] + sample["file"])
        self.samples += 1

    def as_mib(self) -> dict[str, Any]:
        return {
            "rss_anon_peak_mib": round(self.anon / MIB),
            "rss_file_peak_mib": round(self.file / MIB),
            "rss_peak_mib": round(self.total / MIB),
        }


class MemoryWatch:
    """Peak resident memory of this process tree between `__enter__` and `__exit__`, sampled on a thread."""

    def __init__(self, interval: float = INTERVAL_SECONDS) -> None:
        self.interval = interval
        self.peaks = Peaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="edgekit-memwatch", daemon=True)

    def __enter__(self) -> MemoryWatch:
        self.peaks.add(tree_memory())
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self.peaks.add(tree_memory())

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peaks.add(tree_memory())


def max_rss_mib() -> dict[str, int]:
    """The kernel's own high-water marks (anonymous + file-backed, exact): this process since it started, and
    the largest of its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"process_max_rss_mib": round(own / MIB), "children_max_rss_mib": round(children / MIB)}


@dataclass(frozen=True)
class Available:
    bytes: int
    limited_by: str  # "MemAvailable", "cgroup memory.max", "RLIMIT_DATA", ...

    def __str__(self) -> str:
        return f"{self.bytes / 2**30:.1f} GiB ({self.limited_by})"


def available_memory(proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> Available:
    """What this process can still allocate: the tightest of MemAvailable, its cgroups' limits and RLIMIT_DATA."""
    found = [Available(_meminfo_available(proc / "meminfo"), "MemAvailable")]
    found += _cgroup_room(proc / "self" / "cgroup", cgroup_root)
    limit = resource.getrlimit(resource.RLIMIT_DATA)[0]
    if limit != resource.RLIM_INFINITY:
        used = process_memory().get("data", 0)
        found.append(Available(max(0, limit - used), "RLIMIT_DATA"))
    return min(found, key=lambda a: a.bytes)


def _meminfo_available(meminfo: Path) -> int:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


# per cgroup version: folder under /sys/fs/cgroup, limit file, memory.stat key of anonymous use (hierarchical)
_CGROUP = {
    "v2": ("", "memory.max", "anon", "cgroup memory.max"),
    "v1": ("memory", "memory.limit_in_bytes", "total_rss", "cgroup memory.limit_in_bytes"),
}


def _cgroup_room(cgroup_file: Path, root: Path) -> list[Available]:
    """Room under each memory limit of this process's cgroups (their ancestors' too): limit − anonymous use.

    Page cache charged to the group is left out of the use: the kernel reclaims it before it kills.
    """
    try:
        lines = cgroup_file.read_text().splitlines()
    except OSError:
        return []
    found: list[Available] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        version = "v2" if controllers == "" else "v1" if "memory" in controllers.split(",") else None
        if version is None:
            continue
        under, limit_file, stat_key, name = _CGROUP[version]
        for group in _ancestors(root / under, path):
            limit = _read_int(group / limit_file)
            if limit is None or limit >= 2**60:
                continue
            used = _stat(group / "memory.stat", stat_key)
            found.append(Available(max(0, limit - used), f"{name} of {group}"))
    return found


def _ancestors(folder: Path, path: str) -> list[Path]:
    parts = [p for p in path.strip("/").split("/") if p]
    return [folder.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text in ("", "max") else int(text)


def _stat(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except OSError:
        pass
    return 0
