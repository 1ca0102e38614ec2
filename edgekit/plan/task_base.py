"""What every task is: a keyed value object naming its stage, with the resources it asks of a machine."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any, ClassVar

from edgekit.plan.keys import key_inputs, task_key


class Stage(StrEnum):
    """The stages of a build, in the order they run (a task's `stage`; its cache entries live under the name).

    `report` and `bundle` are not cached: they write the bundle, last."""

    FETCH = "fetch"
    CONVERT = "convert"
    IMATRIX = "imatrix"
    QUANTIZE = "quantize"
    REFERENCE = "reference"
    VALIDATE = "validate"
    SMOKE = "smoke"
    SENSITIVITY = "sensitivity"
    BENCH = "bench"
    REPORT = "report"
    BUNDLE = "bundle"


STAGE_ORDER: tuple[Stage, ...] = tuple(Stage)


@dataclass(frozen=True)
class Resources:
    """What a task needs of the machine that runs it (the executor places it accordingly)."""

    cpus: int = 1
    memory_mib: int = 0
    gpus: float = 0.0
    box: str | None = None  # a bench measures one box, and nothing else may run there meanwhile


class Task:
    """Base of every task. Subclasses are frozen dataclasses; `stage` names the stage function."""

    stage: ClassVar[Stage]
    cached: ClassVar[bool] = True

    @cached_property
    def key(self) -> str:
        return task_key(self.stage, key_inputs(self))

    def inputs(self) -> dict[str, Any]:
        return key_inputs(self)

    def deps(self) -> tuple[Task, ...]:
        found: list[Task] = []
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            items = value if isinstance(value, tuple) else (value,)
            found += [v for v in items if isinstance(v, Task)]
        return tuple(found)

    @property
    def label(self) -> str:
        return self.stage

    def resources(self, threads: int) -> Resources:
        return Resources(cpus=threads)
