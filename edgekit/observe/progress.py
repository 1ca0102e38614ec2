"""Progress display. Stages talk to a small `Progress` interface; the CLI supplies a rich one or a plain one.

A stage (one task of the plan) starts and finishes (`stage_started`, `stage_finished`, or one
`stage_finished(reused=True)` when the cache had it); inside it, steps (`task`) may show a bar; a step
that knows its total (windows, tensors, jobs: its `unit`) shows done/total and an ETA; `warn` is a warning
that matters, one line (the other libraries' output is in the stage's log file, see
`edgekit.observe.stagelog`). `RichProgressReporter` draws live bars on a terminal; `PlainProgressReporter`
writes one plain line per stage start and end, for pipes, CI logs and dumb terminals, and for a step with a
total one line when it starts, one each time another tenth is done and one when it ends (at most 12).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress
from rich.progress import Task as RichTask
from rich.text import Text

from edgekit.observe.eta import STEPS, progress_line, step


class Task(Protocol):
    def advance(self, amount: float = 1) -> None: ...

    def update(self, description: str) -> None: ...


class Progress(Protocol):
    def task(
        self, description: str, total: float | None = None, unit: str = ""
    ) -> contextlib.AbstractContextManager[Task]:
        """A step; with `total`, `advance` counts toward it in `unit`s ("windows", "tensors", "jobs")."""
        ...

    def log(self, message: str) -> None: ...

    def stage_started(self, label: str) -> None: ...

    def stage_finished(self, label: str, seconds: float, *, reused: bool, made_seconds: float | None = None) -> None:
        """`seconds` in this build; for a reused stage, `made_seconds` is what it took when it was made."""
        ...

    def warn(self, message: str) -> None: ...


class _NullTask:
    def advance(self, amount: float = 1) -> None:
        pass

    def update(self, description: str) -> None:
        pass


def reuse_text(label: str, made_seconds: float | None) -> str:
    return f"{label}: reused from the cache" + (f" (it took {made_seconds:.0f} s to make)" if made_seconds else "")


class SilentProgress:
    """For library use and tests: records log lines, stage events and warnings, shows nothing."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.warnings: list[str] = []

    @contextlib.contextmanager
    def task(self, description: str, total: float | None = None, unit: str = "") -> Iterator[Task]:
        self.messages.append(description)
        yield _NullTask()

    def log(self, message: str) -> None:
        self.messages.append(message)

    def stage_started(self, label: str) -> None:
        self.messages.append(f"{label}: started")

    def stage_finished(self, label: str, seconds: float, *, reused: bool, made_seconds: float | None = None) -> None:
        self.messages.append(reuse_text(label, made_seconds) if reused else f"{label}: done")

    def warn(self, message: str) -> None:
        self.warnings.append(message)


class _RichTask:
    def __init__(self, progress: RichProgress, task_id: TaskID) -> None:
        self._progress, self._id = progress, task_id

    def advance(self, amount: float = 1) -> None:
        self._progress.advance(self._id, amount)

    def update(self, description: str) -> None:
        self._progress.update(self._id, description=description)


class _Counted(ProgressColumn):
    """`4/10 windows` for a step with a total; nothing for one without."""

    def render(self, task: RichTask) -> Text:
        if not task.fields.get("sized") or task.total is None:
            return Text("")
        unit = task.fields.get("unit", "")
        counted = f"{int(task.completed)}/{int(task.total)}" + (f" {unit}" if unit else "")
        return Text(counted, style="progress.download")


class _Remaining(TimeRemainingColumn):
    """rich's estimate of the time left, for a step with a total; nothing for one without."""

    def render(self, task: RichTask) -> Text:
        return super().render(task) if task.fields.get("sized") else Text("")


class RichProgressReporter:
    """One line per step: a spinner while it runs, a bar, done/total and the time left when its size is known,
    elapsed time."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._progress = RichProgress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            _Counted(),
            TimeElapsedColumn(),
            _Remaining(),
            console=self.console,
            transient=False,
            # Stray writes to stdout/stderr during a build go to the stage's log (edgekit.observe.stagelog), not here.
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def __enter__(self) -> RichProgressReporter:
        self._started = False  # started by the first task: an error before any work prints only itself
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._progress.stop()

    @contextlib.contextmanager
    def task(self, description: str, total: float | None = None, unit: str = "") -> Iterator[Task]:
        if not getattr(self, "_started", True):
            self._progress.start()
            self._started = True
        task_id = self._progress.add_task(escape(description), total=total, unit=unit, sized=total is not None)
        try:
            yield _RichTask(self._progress, task_id)
        finally:
            task = self._progress.tasks[task_id] if task_id < len(self._progress.tasks) else None
            final_total = total if total is not None else 1
            self._progress.update(task_id, total=final_total, completed=final_total)
            if task is not None:
                self._progress.stop_task(task_id)

    def log(self, message: str) -> None:
        self._progress.console.log(escape(message))

    def stage_started(self, label: str) -> None:
        pass  # its steps show as they start

    def stage_finished(self, label: str, seconds: float, *, reused: bool, made_seconds: float | None = None) -> None:
        if reused:
            self.log(reuse_text(label, made_seconds))

    def warn(self, message: str) -> None:
        self._progress.console.print(f"[yellow]warning:[/] {escape(message)}", highlight=False)


class _PlainTask:
    """A step with a total, written as plain lines: when it starts, at each further tenth, when it ends."""

    def __init__(self, line: Callable[[str], None], clock: Callable[[], float], description: str, total: float,
                 unit: str) -> None:  # fmt: skip
        self._line, self._clock = line, clock
        self.description, self.total, self.unit = description, total, unit
        self.done, self.started, self.shown = 0.0, clock(), 0
        self._write(final=False)

    def advance(self, amount: float = 1) -> None:
        self.done += amount
        reached = step(self.done, self.total)
        if self.shown < reached < STEPS:  # the end gets its own line
            self.shown = reached
            self._write(final=False)

    def update(self, description: str) -> None:
        self.description = description

    def finish(self) -> None:
        self._write(final=True)

    def _write(self, *, final: bool) -> None:
        elapsed = self._clock() - self.started
        self._line(progress_line(self.description, self.done, self.total, self.unit, elapsed, final=final))


class PlainProgressReporter:
    """One plain line per stage start and end, with the time and how long it took: for pipes and CI logs; and for
    a step with a total, `<step>  40% (4/10 windows)  elapsed 1m02s  ETA 1m33s` at each tenth.

    Give it a console made for plain output (no colour, no terminal control): see `edgekit.cli.common`.
    `clock` (seconds, monotonic) times the steps.
    """

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self.clock = clock
        self._lock = threading.Lock()

    def __enter__(self) -> PlainProgressReporter:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _line(self, text: str) -> None:
        with self._lock:
            self.console.print(f"{time.strftime('%H:%M:%S')} {text}", markup=False, highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def task(self, description: str, total: float | None = None, unit: str = "") -> Iterator[Task]:
        if not total or total <= 0:
            yield _NullTask()  # a step of unknown size: the stage's start and end say enough
            return
        shown = _PlainTask(self._line, self.clock, description, total, unit)
        yield shown
        shown.finish()  # not after an error: the error says where it stopped

    def log(self, message: str) -> None:
        self._line(message)

    def stage_started(self, label: str) -> None:
        self._line(f"start  {label}")

    def stage_finished(self, label: str, seconds: float, *, reused: bool, made_seconds: float | None = None) -> None:
        if reused:
            self._line(f"reused {label}" + (f" (it took {made_seconds:.0f} s to make)" if made_seconds else ""))
            return
        self._line(f"done   {label}  {seconds:.1f} s")

    def warn(self, message: str) -> None:
        self._line(f"warning: {message}")
