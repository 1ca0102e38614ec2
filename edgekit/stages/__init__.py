"""Stage functions, one module per stage: `run(task, context, out_dir) -> result`, where `out_dir` becomes the
task's cache entry and the result (`edgekit.store.results`) is kept beside its files. None of them sees the
recipe; each reads only its task and its upstream records."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgekit.stages.context import StageContext
    from edgekit.store.results import StageResult

Runner = Callable[[Any, "StageContext", Path], "StageResult"]


def runner(stage: str) -> Runner:
    """The `run` function of stage `stage` (imported when first needed: stages import heavy libraries)."""
    run: Runner = importlib.import_module(f"edgekit.stages.{stage}").run
    return run
