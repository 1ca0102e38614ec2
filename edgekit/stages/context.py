"""What a stage function may use besides its task: the build's environment, progress, and its upstream records."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgekit.backends.base import BuildEnv
from edgekit.observe.progress import Progress
from edgekit.store.cache import CacheEntry

if TYPE_CHECKING:
    from edgekit.plan.tasks import Task


@dataclass(frozen=True)
class StageContext:
    env: BuildEnv  # the cache root (where tools are cached), threads, llama.cpp: what a backend is given too
    progress: Progress
    records: Mapping[str, CacheEntry]  # the entries of upstream tasks, by key

    def entry(self, task: Task) -> CacheEntry:
        return self.records[task.key]

    @property
    def threads(self) -> int:
        """The build's thread count (a plan always sets it)."""
        return self.env.threads or 1
