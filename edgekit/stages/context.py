"""What a stage function may use besides its task: the records of its upstream tasks, progress, threads, tools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgekit.backends.base import BuildEnv
from edgekit.observe.progress import Progress
from edgekit.store.cache import CacheEntry

if TYPE_CHECKING:
    from edgekit.plan.tasks import Task


@dataclass(frozen=True)
class StageContext:
    cache_root: Path
    progress: Progress
    threads: int
    llama_cpp_dir: str | None
    records: Mapping[str, CacheEntry]  # the entries of upstream tasks, by key

    def entry(self, task: Task) -> CacheEntry:
        return self.records[task.key]

    @property
    def env(self) -> BuildEnv:
        return BuildEnv(cache_root=self.cache_root, llama_cpp_dir=self.llama_cpp_dir, threads=self.threads)
