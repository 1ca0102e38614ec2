"""smoke: greedy token ids of a few fixed prompts, through the runtime engine the box runs, per artifact.

The bundle stage writes them into manifest.json (`artifacts[].smoke`); `edgekit install` replays them on
the box before it switches to the new release (`edgekit.runtime.smoke`). One core, the box's settings
besides threads (the record says which), the engine warmed up first exactly as `run` and `serve` do.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.errors import MissingDependencyError
from edgekit.plan.tasks import SmokeTask
from edgekit.runtime.config import RuntimeConfig
from edgekit.runtime.engines import load_engine
from edgekit.runtime.loader import warm
from edgekit.runtime.smoke import record
from edgekit.stages import quantize
from edgekit.stages.context import StageContext
from edgekit.store.results import SmokeResult


def run(task: SmokeTask, ctx: StageContext, out: Path) -> SmokeResult:
    del out  # the record is small: it lives in the entry's result
    artifact = quantize.artifact(task.artifact, ctx.entry(task.artifact))
    config = RuntimeConfig(artifact=artifact.name, n_threads=1, n_threads_batch=1, **task.settings)
    try:
        engine = load_engine(artifact.backend, artifact.path, None, config)
    except MissingDependencyError as exc:  # this build machine cannot run it: the box will say so too
        return SmokeResult(skipped=f"{exc.message} on the build machine")
    try:
        with ctx.progress.task(f"smoke  {artifact.name}"):
            warm(engine, config.warmup_tokens)
            return SmokeResult(settings=task.settings, prompts=record(engine, task.prompts, task.tokens))
    finally:
        engine.close()
