"""The local executor: every task in this process, independent ones side by side when the CPUs allow.

Each task declares the CPUs it uses (`Task.resources`); tasks start as soon as their dependencies are
done and their CPUs fit in what is free. A task that needs every CPU runs alone, in this thread, so
Ctrl-C and error messages behave as in a plain loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from edgekit.executors.base import TaskEvent, Workspace, execute, timed
from edgekit.observe.progress import Progress
from edgekit.plan.make import dependency_order
from edgekit.plan.tasks import Task
from edgekit.runtime import machine
from edgekit.store.cache import CacheEntry


class LocalExecutor:
    def __init__(self, space: Workspace, progress: Progress, cpus: int | None = None) -> None:
        self.space = space
        self.progress = progress
        self.cpus = cpus or machine.logical_cores()
        self.events: list[TaskEvent] = []

    def run(self, tasks: Sequence[Task], known: Mapping[str, CacheEntry] | None = None) -> dict[str, CacheEntry]:
        entries: dict[str, CacheEntry] = dict(known or {})
        pending = [t for t in dependency_order(list(tasks)) if t.cached and t.key not in entries]
        with ThreadPoolExecutor(max_workers=max(1, self.cpus)) as pool:
            running: dict[Future[tuple[CacheEntry, TaskEvent]], tuple[Task, int]] = {}
            while pending or running:
                startable = self._startable(pending, entries, running)
                if not startable and not running:
                    raise RuntimeError(f"no task can start: {[t.label for t in pending]} wait for tasks not planned")
                for task, need in startable:
                    pending.remove(task)
                    work = self._work(task, dict(entries))
                    if need >= self.cpus and not running:
                        self._record(entries, *timed(task, work))
                        break
                    running[pool.submit(timed, task, work)] = (task, need)
                if running:
                    self._collect(running, entries)
        return entries

    def _startable(
        self, pending: list[Task], entries: dict[str, CacheEntry], running: dict[Future, tuple[Task, int]]
    ) -> list[tuple[Task, int]]:
        free = self.cpus - sum(need for _, need in running.values())
        chosen = []
        for task in pending:
            if not all(dep.key in entries for dep in task.deps()):
                continue
            need = min(self.cpus, max(1, task.resources(self.space.threads).cpus))
            if need <= free:
                chosen.append((task, need))
                free -= need
        return chosen

    def _work(self, task: Task, records: dict[str, CacheEntry]) -> Callable[[], CacheEntry]:
        return lambda: execute(task, records, self.space, self.progress)

    def _collect(self, running: dict[Future, tuple[Task, int]], entries: dict[str, CacheEntry]) -> None:
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        failure: BaseException | None = None
        for future in done:
            running.pop(future)
            try:
                self._record(entries, *future.result())
            except BaseException as exc:  # let the others finish, then report the first failure
                failure = failure or exc
        if failure is not None:
            wait(running)
            raise failure

    def _record(self, entries: dict[str, CacheEntry], entry: CacheEntry, event: TaskEvent) -> None:
        entries[entry.key] = entry
        self.events.append(event)
