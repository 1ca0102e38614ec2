"""quantize: each target's scheme from its backend's converted model. One entry per target."""

from __future__ import annotations

from pathlib import Path

from edgekit.backends.base import QuantizeInputs
from edgekit.backends.catalog import build_backend
from edgekit.plan.tasks import QuantizeTask
from edgekit.stages.context import StageContext
from edgekit.store.cache import CacheEntry
from edgekit.store.records import Artifact
from edgekit.store.results import ImatrixResult, QuantizeResult


def run(task: QuantizeTask, ctx: StageContext, out: Path) -> QuantizeResult:
    backend = build_backend(task.backend)
    imatrix = None
    if task.imatrix is not None:  # only backends whose `quantize_needs()` ask for a matrix get one
        entry = ctx.entry(task.imatrix)
        imatrix = entry.path / ImatrixResult.of(entry).path
    inputs = QuantizeInputs(
        converted=ctx.entry(task.converted).path,
        scheme=task.scheme,
        options=backend.options_model.model_validate(task.options),
        out_dir=out,
        env=ctx.env,
        progress=ctx.progress,
        calibration=task.calibration.ids.array().tolist() if task.calibration is not None else None,
        imatrix=imatrix,
    )
    relpath, details = backend.quantize(inputs)
    if task.calibration is not None:  # which tokens of which text: the plan's record, disjoint from the scored ones
        details["calibration"] = {**(details.get("calibration") or {}), **task.calibration.record()}
    if task.imatrix is not None:  # the matrix read the calibration range: the sign-off lists it like any other
        details["calibration"] = task.imatrix.calibration.record()
        recorded = ImatrixResult.of(ctx.entry(task.imatrix)).record()
        details["imatrix"] = {**recorded, "cache_key": task.imatrix.key, "written": details.get("imatrix", {})}
    return QuantizeResult(relpath, details)


def artifact(task: QuantizeTask, entry: CacheEntry) -> Artifact:
    """The artifact a finished quantize entry holds."""
    result = QuantizeResult.of(entry)
    return Artifact(
        name=task.name,
        backend=task.backend,
        scheme=task.scheme,
        path=entry.path / result.path,
        key=entry.key,
        details=result.details,
        recorded={f["path"]: f["sha256"] for f in entry.files},  # relative to the entry folder
    )
