"""sensitivity (report only): which layers of an artifact add most to its KLD, on the first few windows.

The backend splices probe files (one layer group at the artifact's tensors, the rest at Q8_0); this stage
scores each against the reference, on the same tokens as validation, and keeps the figures. Bounded in time:
a measurement projected over the target's budget is skipped, and the report says so and how to allow it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgekit.backends.base import SensitivityProbe
from edgekit.backends.catalog import build_backend
from edgekit.backends.runner import EngineRunner
from edgekit.plan.tasks import SensitivityTask
from edgekit.signoff.metrics import compare
from edgekit.signoff.scoring import Reference
from edgekit.stages import quantize
from edgekit.stages.context import StageContext
from edgekit.stages.reference import load_reference
from edgekit.store.results import SensitivityResult


def run(task: SensitivityTask, ctx: StageContext, out: Path) -> SensitivityResult:
    backend = build_backend(task.artifact.backend)
    artifact = quantize.artifact(task.artifact, ctx.entry(task.artifact))
    base = quantize.artifact(task.base, ctx.entry(task.base))
    ref = load_reference(task.reference, ctx.entry(task.reference))
    windows = min(task.windows, ref.windows.count)

    def score(path: Path) -> float:
        runner = EngineRunner(task.artifact.backend, path, n_ctx=ref.windows.length, threads=ctx.threads)
        return mean_kld(runner, ref, windows)

    probe = SensitivityProbe(score, task.budget_seconds, ctx.progress)
    figures = backend.measure_sensitivity(artifact.path, base.path, probe, out)
    return SensitivityResult(figures, windows, windows * ref.windows.scored_per_window)


def mean_kld(runner: Any, ref: Reference, windows: int) -> float:
    """Mean KLD of a runner against the reference over the first `windows` windows (then closes the runner)."""
    try:
        parts = []
        for i in range(windows):
            positions, targets = ref.windows.scored(i)
            parts.append(compare(ref.window_slice(i), runner.logits(ref.windows.window(i))[positions], targets).kld)
    finally:
        runner.close()
    return float(np.concatenate(parts).mean())
