"""When the bundle stage finds a cached artifact whose bytes differ from the sha256 its entry recorded.

The cache reuses an entry after a size check only (hashing every artifact on every build would cost a
full read of each); the bundle stage hashes what it copies anyway, and compares. On a mismatch the
entry is dropped and rebuilt, with whatever this build made from the damaged bytes (a validation or a
bench that ran on them); if the rebuilt artifact's bytes are not the ones recorded before, everything
made from the old bytes is remade too. The build says so, and the report records it.
"""

from __future__ import annotations

from typing import Any

from edgekit.errors import DamagedFile
from edgekit.executors.base import Executor
from edgekit.observe.progress import Progress
from edgekit.plan.make import Plan
from edgekit.plan.tasks import Task
from edgekit.store.cache import CacheEntry, StageCache


def repair(
    plan: Plan,
    entries: dict[str, CacheEntry],
    damaged: list[DamagedFile],
    cache: StageCache,
    executor: Executor,
    progress: Progress,
) -> tuple[dict[str, CacheEntry], list[dict[str, Any]]]:
    """Drop and rebuild the damaged artifact entries; return the new entries and what the report says."""
    tasks = {t.key: t for t in plan.tasks}
    records = []
    for key in dict.fromkeys(d.key for d in damaged):
        files = [{"file": d.file, "recorded_sha256": d.recorded_sha256, "found_sha256": d.found_sha256}
                 for d in damaged if d.key == key]  # fmt: skip
        name = next(d.artifact for d in damaged if d.key == key)
        before = _hashes(entries[key])
        made_from = [t for t in _dependents(plan, key) if not entries[t.key].reused]
        for task in (tasks[key], *made_from):
            cache.drop(task.stage, task.key)
        progress.log(
            f"{name}: the cached artifact differs from the sha256 recorded when it was made "
            f"({', '.join(f['file'] for f in files)}): dropped the cache entry and rebuilding it"
            + (f", with the {len(made_from)} results this build made from it" if made_from else "")
        )
        entries = {**entries, **executor.run([tasks[key], *made_from])}
        identical = _hashes(entries[key]) == before
        if not identical:  # other bytes than every earlier result measured: remake those too
            stale = [t for t in _dependents(plan, key) if t not in made_from]
            for task in stale:
                cache.drop(task.stage, task.key)
            entries = {**entries, **executor.run(stale)}
        action = "dropped the cache entry and rebuilt it"
        records.append({"artifact": name, "stage": tasks[key].stage, "key": key, "files": files, "action": action,
                        "rebuilt_identical": identical})  # fmt: skip
    return entries, records


def _dependents(plan: Plan, key: str) -> list[Task]:
    return [t for t in plan.tasks if any(d.key == key for d in t.deps())]


def _hashes(entry: CacheEntry) -> dict[str, str]:
    """The entry's made files; its logs (what the libraries printed, with times and paths) differ every time."""
    return {f["path"]: f["sha256"] for f in entry.files if not f["path"].endswith(".log")}
