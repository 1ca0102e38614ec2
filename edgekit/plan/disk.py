"""The disk a build will write, stage by stage, checked before the first stage runs.

Each stage checks its own output again before writing (`edgekit._util.fsutil.ensure_free_space`); this check
sees the whole build at once, so a build that cannot finish stops before its first stage (exit 3, with the
numbers) instead of after an hour of work. The sizes are estimates from the source's parameter count and each
backend's `disk_bytes`; stages whose cache entry already exists write nothing. The reference, validation and
bench write megabytes and are not counted.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from edgekit._util.fsutil import DISK_MARGIN
from edgekit.backends.catalog import build_backend
from edgekit.errors import DiskSpaceError
from edgekit.plan.tasks import BundleTask, ConvertTask, FetchTask, QuantizeTask
from edgekit.store.cache import StageCache

DTYPE_BYTES = {"F64": 8, "F32": 4, "I64": 8, "I32": 4, "F16": 2, "BF16": 2, "I16": 2, "U8": 1, "I8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1}  # fmt: skip


@dataclass(frozen=True)
class DiskNeed:
    """What one stage will write, and where (the cache, or the bundle's folder)."""

    label: str
    path: Path
    bytes: int


def source_parameters(fetch: FetchTask) -> int | None:
    """The source's weight count, read from headers only (None: not known before the weights are fetched)."""
    if fetch.synthetic is not None:
        from edgekit.sources.synthetic import DEFAULT_VOCAB

        return fetch.synthetic.parameters(DEFAULT_VOCAB)
    if fetch.kind == "gguf":
        from edgekit._util.gguf_file import read_gguf

        return sum(int(t.n_elements) for t in read_gguf(Path(fetch.location)).tensors)
    if fetch.kind == "dir":
        return _safetensors_parameters(Path(fetch.location))
    return None  # hf://: the weights are not downloaded yet, and the fetch (the first stage) checks its download


def _safetensors_parameters(folder: Path) -> int | None:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, tensor in header.items():
            if name != "__metadata__":
                count = 1
                for dim in tensor["shape"]:
                    count *= int(dim)
                total += count
    return total


def disk_needs(tasks: tuple[object, ...], bundle: BundleTask, cache: StageCache) -> list[DiskNeed]:
    """Every stage that will write more than megabytes, with its estimated output (stages already cached: none)."""
    parameters = source_parameters(bundle.checkpoint)
    if parameters is None:
        return []
    needs: list[DiskNeed] = []
    for task in tasks:
        if not isinstance(task, FetchTask | ConvertTask | QuantizeTask) or cache.lookup(task.stage, task.key):
            continue
        if (size := _output_bytes(task, parameters, cache.root)) > 0:
            needs.append(DiskNeed(task.label, cache.root, size))
    artifacts = sum(build_backend(t.backend).disk_bytes(t.scheme, parameters) for t in bundle.targets)
    needs.append(DiskNeed(bundle.label, Path(bundle.final), artifacts))
    return needs


def _output_bytes(task: FetchTask | ConvertTask | QuantizeTask, parameters: int, cache_root: Path) -> int:
    if isinstance(task, QuantizeTask):
        return build_backend(task.backend).disk_bytes(task.scheme, parameters)
    if isinstance(task, ConvertTask):
        return build_backend(task.backend).disk_bytes(None, parameters)
    if task.kind == "dir":  # weights are hard-linked into the cache when it is on the same file system
        return 0 if _device(Path(task.location)) == _device(cache_root) else sum(f.size for f in task.files)
    return 2 * parameters  # a GGUF dequantized, or random weights written, in FP16


def check_disk(tasks: tuple[object, ...], bundle: BundleTask, cache: StageCache) -> list[DiskNeed]:
    """Raise DiskSpaceError (exit 3) naming every stage's share when a file system cannot take what the build
    writes on it, plus room for the largest stage's working copy; else the needs, for the log."""
    needs = disk_needs(tasks, bundle, cache)
    by_device: dict[int, list[DiskNeed]] = {}
    for need in needs:
        by_device.setdefault(_device(need.path), []).append(need)
    for group in by_device.values():
        probe = _existing(group[0].path)
        needed = sum(n.bytes for n in group) + max(n.bytes for n in group) + DISK_MARGIN
        free = shutil.disk_usage(probe).free
        if free < needed:
            shares = ", ".join(f"{n.label} {n.bytes / 2**30:.1f} GiB" for n in group)
            raise DiskSpaceError(probe, needed, free, f"this build writes about: {shares}, and needs room for the "
                                 "largest one's working copy; free some space, or point --cache-dir / --out at a "
                                 "larger disk; nothing was written")  # fmt: skip
    return needs


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _device(path: Path) -> int:
    return os.stat(_existing(path)).st_dev
