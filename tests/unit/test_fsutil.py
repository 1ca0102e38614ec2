"""Atomic replacement of a bundle folder, recovery from killed builds, and the disk-space check."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgekit._util.fsutil import abandoned, ensure_free_space, exchange_paths, staging_dir
from edgekit.errors import DiskSpaceError

READER = """
import os, sys, time
final, stop = sys.argv[1], sys.argv[2]
reads = misses = 0
while not os.path.exists(stop):
    try:
        with open(os.path.join(final, "manifest.json")) as f:
            f.read()
        reads += 1
    except FileNotFoundError:
        misses += 1
print(reads, misses)
"""


def _fill(folder: Path, version: int) -> None:
    (folder / "manifest.json").write_text(f'{{"version": {version}}}')
    (folder / "model.gguf").write_bytes(bytes([version % 256]) * 1000)


def test_exchange_swaps_two_folders_in_one_step(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    if not exchange_paths(a, b):
        pytest.skip("renameat2(RENAME_EXCHANGE) is not available here")
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"


def test_replacing_a_bundle_never_leaves_it_missing(tmp_path: Path) -> None:
    """A reader polling final/manifest.json while the folder is replaced 300 times never finds it missing."""
    final = tmp_path / "dist" / "model"
    with staging_dir(final) as tmp:
        _fill(tmp, 0)
    if not exchange_paths(tmp_path / "dist", tmp_path / "dist"):  # same path: a no-op probe of support
        pytest.skip("renameat2(RENAME_EXCHANGE) is not available here")
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(final), str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)  # let the reader start reading
        for version in range(1, 301):
            with staging_dir(final) as tmp:
                _fill(tmp, version)
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=30)
    reads, misses = map(int, out.split())
    assert reads > 300 and misses == 0, (reads, misses)
    assert (final / "manifest.json").read_text() == '{"version": 300}'
    assert sorted(p.name for p in final.parent.iterdir()) == ["model"]  # no temp or old folders left


def test_a_failed_build_leaves_the_previous_bundle_untouched(tmp_path: Path) -> None:
    final = tmp_path / "dist" / "model"
    with staging_dir(final) as tmp:
        _fill(tmp, 1)
    with pytest.raises(RuntimeError), staging_dir(final) as tmp:
        _fill(tmp, 2)
        raise RuntimeError("a stage failed")
    assert (final / "manifest.json").read_text() == '{"version": 1}'
    assert sorted(p.name for p in final.parent.iterdir()) == ["model"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def hold_lock(path: Path) -> subprocess.Popen[str]:
    """Another process that holds `path`'s lock, as a build still writing it does."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_leftovers_of_a_killed_build_are_removed_and_a_half_swapped_bundle_is_restored(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    dead = _dead_pid()
    partial = dist / f".model.pid{dead}.abc123.partial"  # killed while writing the new bundle
    partial.mkdir()
    (partial / "half.gguf").write_bytes(b"x")
    old = dist / f".model.pid{dead}.old"  # killed between the fallback's two renames: no dist/model
    old.mkdir()
    _fill(old, 1)
    # A build in another container whose PID happens to be alive here: abandoned all the same (nobody holds it).
    foreign = dist / f".model.pid{os.getpid()}.foreign.partial"
    foreign.mkdir()
    alive = dist / f".model.pid{dead}.xyz.partial"  # a build still running (it holds the lock): left alone
    alive.mkdir()
    holder = hold_lock(alive)
    try:
        with staging_dir(dist / "model") as tmp:
            assert (dist / "model" / "manifest.json").read_text() == '{"version": 1}'  # restored first
            _fill(tmp, 2)
    finally:
        holder.kill()
        holder.wait()
    assert (dist / "model" / "manifest.json").read_text() == '{"version": 2}'
    assert not partial.exists() and not old.exists() and not foreign.exists() and alive.exists()
    with staging_dir(dist / "model") as tmp:  # its holder is gone now: the next build removes it
        _fill(tmp, 3)
    assert sorted(p.name for p in dist.iterdir()) == ["model"]


def test_a_folder_being_staged_is_locked_until_it_is_swapped_in(tmp_path: Path) -> None:
    with staging_dir(tmp_path / "dist" / "model") as tmp:
        assert not abandoned(tmp)
        _fill(tmp, 1)
    assert abandoned(tmp_path / "dist" / "model")


def test_not_enough_disk_is_refused_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.disk_usage

    def small_disk(path: str | os.PathLike[str]) -> object:
        return real(path)._replace(free=300 * 2**20)

    monkeypatch.setattr(shutil, "disk_usage", small_disk)
    ensure_free_space(tmp_path / "not" / "yet" / "made", 10 * 2**20)  # 300 MiB free - 10 MiB > the 256 MiB margin
    with pytest.raises(DiskSpaceError, match="need 356 MiB, 300 MiB free") as info:
        ensure_free_space(tmp_path / "not" / "yet" / "made", 100 * 2**20)
    assert info.value.exit_code == 3 and "nothing was written" in str(info.value)
    assert not (tmp_path / "not").exists()
