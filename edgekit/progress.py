"""Progress display. Stages talk to a small `Progress` interface; the CLI supplies a rich one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as RichProgress


class Task(Protocol):
    def advance(self, amount: float = 1) -> None: ...

    def update(self, description: str) -> None: ...


class Progress(Protocol):
    def task(self, description: str, total: float | None = None) -> contextlib.AbstractContextManager[Task]: ...

    def log(self, message: str) -> None: ...


class _NullTask:
    def advance(self, amount: float = 1) -> None:
        pass

    def update(self, description: str) -> None:
        pass


class SilentProgress:
    """For library use and tests: records log lines, shows nothing."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    @contextlib.contextmanager
    def task(self, description: str, total: float | None = None) -> Iterator[Task]:
        self.messages.append(description)
        yield _NullTask()

    def log(self, message: str) -> None:
        self.messages.append(message)


class _RichTask:
    def __init__(self, progress: RichProgress, task_id: int) -> None:
        self._progress, self._id = progress, task_id

    def advance(self, amount: float = 1) -> None:
        self._progress.advance(self._id, amount)

    def update(self, description: str) -> None:
        self._progress.update(self._id, description=description)


class RichProgressReporter:
    """One line per step: a spinner while it runs, a bar when its size is known, elapsed time."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._progress = RichProgress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )

    def __enter__(self) -> RichProgressReporter:
        self._started = False  # started by the first task: an error before any work prints only itself
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._progress.stop()

    @contextlib.contextmanager
    def task(self, description: str, total: float | None = None) -> Iterator[Task]:
        if not getattr(self, "_started", True):
            self._progress.start()
            self._started = True
        task_id = self._progress.add_task(description, total=total)
        try:
            yield _RichTask(self._progress, task_id)
        finally:
            task = self._progress.tasks[task_id] if task_id < len(self._progress.tasks) else None
            final_total = total if total is not None else 1
            self._progress.update(task_id, total=final_total, completed=final_total)
            if task is not None:
                self._progress.stop_task(task_id)

    def log(self, message: str) -> None:
        self._progress.console.log(message)
