"""The session's one stage cache, shared by the contract and e2e suites, and the caches tests make from it.

Both suites build the same SmolLM2 stages (its fetch, the GGUF and OpenVINO conversions, Q8_0 and INT8): with
one cache per session they run once. A test gets its cache passed, never through this process's environment:
a `StageCache` (or its root) in process, `--cache-dir` to an in-process CLI call, `env=` (`cli_env`) to a
subprocess. (tests/conftest.py gives every test an empty EDGEKIT_CACHE of its own as a guard, so that a test
that forgets to pass one never writes the user's cache; no test reads another's through it.)

A test that needs one stage cold gets a cache `seeded` with hard links of the shared cache's entries of the
stages before it: entries are content-addressed (keyed by their inputs) and their sizes are checked on every
reuse, and nothing writes into a published entry (a rebuild renames a new folder into place), so a link is as
good as a copy and costs no disk. A test that damages entry files on purpose copies them instead.

`EDGEKIT_E2E_CACHE` points the shared cache at a warm one, for a developer's rerun; CI starts from an empty one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

WARM_CACHE_ENV = "EDGEKIT_E2E_CACHE"


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if warm := os.environ.get(WARM_CACHE_ENV):
        return Path(warm)
    return tmp_path_factory.mktemp("stage-cache")


def cli_env(cache: Path, **extra: str) -> dict[str, str]:
    """The environment of an `edgekit` subprocess whose stage cache is `cache` (with `extra` on top)."""
    return {**os.environ, "EDGEKIT_CACHE": str(cache), **extra}


def seeded(shared: Path, cache: Path, *folders: str) -> Path:
    """A new cache at `cache` holding hard links of every complete entry of `folders` (stage names, or
    "hash-memo") in the cache at `shared`; temp folders and locks are left out."""
    for folder in folders:
        if not (shared / folder).is_dir():
            continue
        (cache / folder).mkdir(parents=True, exist_ok=True)
        for entry in sorted((shared / folder).iterdir()):
            if not entry.name.startswith("."):
                linked_copy(entry, cache / folder / entry.name)
    cache.mkdir(parents=True, exist_ok=True)
    return cache


def linked_copy(source: Path, dest: Path) -> Path:
    """A copy of a file or folder (a bundle, a cache entry) made of hard links: fast, no extra disk. Replace a
    file before changing it; never write into one. Falls back to copying across filesystems."""
    if source.is_dir():
        shutil.copytree(source, dest, copy_function=_link_or_copy)
    else:
        _link_or_copy(str(source), str(dest))
    return dest


def _link_or_copy(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except OSError:  # another filesystem (a warm cache elsewhere)
        shutil.copy2(source, dest)
