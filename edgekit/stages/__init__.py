"""Stage functions, one module per stage: `run(task, context, out_dir) -> result`, where `out_dir` becomes the
task's cache entry. None of them sees the recipe; each reads only its task and its upstream records."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

Runner = Callable[[Any, Any, Path], dict[str, Any] | None]


def runner(stage: str) -> Runner:
    """The `run` function of stage `stage` (imported when first needed: stages import heavy libraries)."""
    return importlib.import_module(f"edgekit.stages.{stage}").run
