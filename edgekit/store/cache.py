"""A content-addressed store for stage outputs.

Each entry lives at `<root>/<stage>/<key>/`, where `key` is the sha256 of the stage's inputs.
An entry is produced in a temp folder and renamed into place only when complete, under a file
lock, so a killed build leaves no half-written entry and two builds of the same recipe at once
produce it once. `entry.json` records the inputs, the result and every file's size and sha256.

A cache shared by the nodes of a cluster (a path every node mounts) is opened with `verify=True`:
every read then checks each file's recorded sha256, not only its size, and temp folders are named
after their host, so a node only ever cleans up what its own dead processes left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from edgekit._util.fsutil import fsync_dir, write_json_atomic
from edgekit._util.hashing import file_records, sha256_file
from edgekit.observe.memwatch import MemoryWatch

CACHE_FORMAT = 1
ENTRY_FILE = "entry.json"


def default_cache_root() -> Path:
    if env := os.environ.get("EDGEKIT_CACHE"):
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "edgekit"


@dataclass(frozen=True)
class CacheEntry:
    stage: str
    key: str
    path: Path
    meta: dict[str, Any]
    reused: bool

    @property
    def result(self) -> dict[str, Any]:
        return self.meta.get("result", {})

    @property
    def files(self) -> list[dict[str, Any]]:
        return self.meta.get("files", [])


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname())[:32] or "host"


class StageCache:
    def __init__(self, root: Path | None = None, *, verify: bool = False) -> None:
        self.root = (root or default_cache_root()).expanduser()
        self.verify = verify  # check every file's sha256 on read (a cache shared between machines)
        self.events: list[tuple[str, str, bool]] = []  # (stage, key, reused) in the order asked
        self._verified: set[tuple[str, int, int, int]] = set()  # (path, size, mtime_ns, inode) hashed here

    def entry_path(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def lookup(self, stage: str, key: str) -> CacheEntry | None:
        path = self.entry_path(stage, key)
        try:
            meta = json.loads((path / ENTRY_FILE).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if not self._sizes_match(path, meta.get("files", [])):
            return None
        if self.verify and not self._hashes_match(path, meta.get("files", [])):
            return None
        return CacheEntry(stage, key, path, meta, reused=True)

    def get_or_produce(
        self,
        stage: str,
        key: str,
        inputs: dict[str, Any],
        produce: Callable[[Path], dict[str, Any] | None],
    ) -> CacheEntry:
        """Return the entry `key` (a task's key, from `edgekit.plan.keys`), calling `produce(tmp_dir)` if needed.

        `produce` writes its files into `tmp_dir` and returns a JSON-able result to keep with them;
        `inputs` are recorded beside them, so an entry says what it was made from.
        """
        found = self.lookup(stage, key)
        if not found:
            with self._lock(stage, key):
                # another build may have produced it while we waited for the lock
                found = self.lookup(stage, key) or self._produce(stage, key, inputs, produce)
        self.events.append((stage, key, found.reused))
        return found

    def _produce(
        self, stage: str, key: str, inputs: dict[str, Any], produce: Callable[[Path], dict[str, Any] | None]
    ) -> CacheEntry:
        final = self.entry_path(stage, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        # named by the full key and the host: whoever finds it left behind on this host can try its producer's
        # lock (clean_partials); another node's is that node's to judge
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{key}@{_host()}.pid{os.getpid()}.", suffix=".partial"))
        started = time.time()
        try:
            with MemoryWatch() as watch:
                result = produce(tmp) or {}
            meta = {
                "cache_format": CACHE_FORMAT,
                "stage": stage,
                "key": key,
                "inputs": inputs,
                "result": result,
                "seconds": round(time.time() - started, 3),
                "memory": watch.peaks.as_mib(),  # of the whole build process tree while this ran
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "files": [r for r in file_records(tmp) if r["path"] != ENTRY_FILE],
            }
            write_json_atomic(tmp / ENTRY_FILE, meta)
            fsync_dir(tmp)
            self._publish(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return CacheEntry(stage, key, final, meta, reused=False)

    def drop(self, stage: str, key: str) -> None:
        """Remove an entry (one found damaged): renamed aside first, so no reader sees it half-deleted."""
        final = self.entry_path(stage, key)
        if not final.exists():
            return
        aside = final.with_name(f".{key[:16]}.pid{os.getpid()}.dropped.partial")
        os.replace(final, aside)
        fsync_dir(final.parent)
        shutil.rmtree(aside, ignore_errors=True)

    @staticmethod
    def _publish(tmp: Path, final: Path) -> None:
        """Rename a complete entry into place: until this rename, nobody can see it."""
        if final.exists():  # a stale entry that failed its size check
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_dir(final.parent)

    @staticmethod
    def _sizes_match(path: Path, files: list[dict[str, Any]]) -> bool:
        try:
            return all((path / f["path"]).stat().st_size == f["size"] for f in files)
        except (OSError, KeyError, TypeError):
            return False

    def _hashes_match(self, path: Path, files: list[dict[str, Any]]) -> bool:
        for record in files:
            file = path / record["path"]
            try:
                st = file.stat()
            except OSError:
                return False
            stamp = (str(file), st.st_size, st.st_mtime_ns, st.st_ino)
            if stamp in self._verified:
                continue
            if sha256_file(file) != record.get("sha256"):
                return False
            self._verified.add(stamp)
        return True

    def _lock(self, stage: str, key: str, timeout: float = -1) -> FileLock:
        """The lock a producer holds on entry `key` from before its temp folder exists until it is published."""
        lock_dir = self.root / ".locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        return FileLock(str(lock_dir / f"{stage}-{key}.lock"), timeout=timeout)

    def clean_partials(self) -> int:
        """Remove temp folders left by killed builds. Returns how many.

        A temp folder is abandoned when its producer's lock is free: the kernel drops a lock when the
        process holding it dies. (A PID would not do: it may belong to another container's namespace,
        or have been reused.) The folder is named by its entry's key; older edgekit versions named it by
        the key's first 16 characters, so every lock of a key with that prefix must be free. On a cache shared
        by several nodes, only the node named in the folder's name judges it.
        """
        removed = 0
        if not self.root.exists():
            return 0
        for tmp in self.root.glob("*/.*.partial"):
            host = re.search(r"@([A-Za-z0-9-]+)\.pid", tmp.name)
            if host and host.group(1) != _host():
                continue  # another node's: only that node can tell whether its writer is alive
            match = re.match(r"\.([0-9a-f]{16,64})[@.]", tmp.name)
            candidates = (
                sorted((self.root / ".locks").glob(f"{tmp.parent.name}-{match.group(1)}*.lock")) if match else []
            )
            with contextlib.ExitStack() as held:
                try:
                    for lock in candidates:  # held while the folder is removed: nobody starts producing meanwhile
                        held.enter_context(FileLock(str(lock), timeout=0))
                except Timeout:  # its producer is alive and still writing it
                    continue
                shutil.rmtree(tmp, ignore_errors=True)
                removed += 1
        return removed
