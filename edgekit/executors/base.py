"""What every executor does with one task: look its key up in the cache, or run its stage and store the result.

An executor walks a plan's tasks (dependencies first), runs each at most once, and keeps a log of
what ran and what was reused; where it runs them (this process, a Ray cluster) is its own business.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from edgekit.backends.base import BuildEnv
from edgekit.observe import stagelog
from edgekit.observe.memwatch import release_freed_memory
from edgekit.observe.progress import Progress
from edgekit.plan.task_base import Stage, Task
from edgekit.stages import runner
from edgekit.stages.context import StageContext
from edgekit.store.cache import CacheEntry, StageCache


@dataclass(frozen=True)
class TaskEvent:
    stage: Stage
    key: str
    label: str
    reused: bool
    seconds: float  # wall time in this build (a lookup when reused)


class Executor(Protocol):
    events: list[TaskEvent]

    def run(self, tasks: Sequence[Task], known: Mapping[str, CacheEntry] | None = None) -> dict[str, CacheEntry]:
        """Run `tasks` and what they depend on, except the `known` entries; return every task's entry by key."""
        ...


@dataclass(frozen=True)
class Workspace:
    """What an executor runs tasks with: the stage cache, and the environment every stage (and backend) is given.

    `env.cache_root` is the cache's root: tools are cached beside the stage entries."""

    cache: StageCache
    env: BuildEnv

    @property
    def threads(self) -> int:
        return self.env.threads or 1


STAGE_LOG = "stage.log"  # in every entry: what other libraries printed while the stage ran (edgekit.observe.stagelog)
FAILED_LOGS = "logs"  # under the cache root: the logs of a stage that failed (its entry folder is removed)


def execute(task: Task, records: Mapping[str, CacheEntry], space: Workspace, progress: Progress) -> CacheEntry:
    """The task's cache entry: found, or produced now by its stage function, its output in its log."""
    context = StageContext(space.env, progress, records)
    stage = runner(task.stage)

    def produce(out: Path) -> dict[str, Any]:
        progress.stage_started(task.label)
        with stagelog.capture(out / STAGE_LOG) as log:
            try:
                result = stage(task, context, out).to_json()
            except BaseException as exc:
                kept = space.cache.root / FAILED_LOGS / f"{task.stage}-{task.key[:16]}"
                stagelog.keep(exc, kept, {p.name: p for p in sorted(out.glob("*.log"))}, was=out)
                raise
            finally:
                release_freed_memory()
        for notice in log.notices:
            progress.warn(f"{task.label}: {notice}")
        return result

    started = time.perf_counter()
    entry = space.cache.get_or_produce(task.stage, task.key, task.inputs(), produce)
    made = entry.meta.get("seconds") if entry.reused else None
    progress.stage_finished(task.label, time.perf_counter() - started, reused=entry.reused, made_seconds=made)
    return entry


def timed(task: Task, run: Callable[[], CacheEntry]) -> tuple[CacheEntry, TaskEvent]:
    started = time.perf_counter()
    entry = run()
    return entry, TaskEvent(task.stage, task.key, task.label, entry.reused, time.perf_counter() - started)
