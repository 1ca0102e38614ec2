"""validate: an artifact against the reference, on the same tokens, through its backend's runner.

The candidate must first tokenize the eval text to the reference's ids (else the comparison would be
meaningless and validation stops at the first differing token); then it is scored on every window
and task. Metrics are cached per (artifact, reference, bootstrap settings); gates are judged after,
from the plan (`edgekit.gates`), so changing a threshold re-judges without re-running anything.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from edgekit.plan.tasks import Bootstrap, EngineSettings, ValidateTask
from edgekit.progress import Progress
from edgekit.records import Artifact
from edgekit.registry import build_backend
from edgekit.scoring import Reference, check_tokenizer, evaluate, save_evaluation, summarise
from edgekit.stages import quantize
from edgekit.stages.context import StageContext
from edgekit.stages.reference import load_reference

TOKEN_FILE = "tokens.npz"


def run(task: ValidateTask, ctx: StageContext, out: Path) -> dict[str, Any]:
    artifact = quantize.artifact(task.artifact, ctx.entry(task.artifact))
    ref = load_reference(task.reference, ctx.entry(task.reference))
    return validate_artifact(artifact, ref, task.reference.eval.text.text, task.bootstrap, out, ctx.progress,
                             task.engine)  # fmt: skip


def validate_artifact(
    artifact: Artifact,
    ref: Reference,
    text: str,
    bootstrap: Bootstrap,
    out: Path,
    progress: Progress,
    engine: EngineSettings,
) -> dict[str, Any]:
    """Score `artifact` against `ref` into `out` (per-token figures) and return its metrics.

    The artifact runs in its backend's runtime engine with the settings the bundle's runtime.toml will hold:
    what is scored is what the box computes.
    """
    with progress.task(f"validate  load {artifact.name}"):
        runner = build_backend(artifact.backend).open_runner(artifact.path, **engine.config())
    try:
        compared = check_tokenizer(runner, ref, text, artifact.name)
        evaluation = evaluate(runner, ref, progress, artifact.name)
    finally:
        runner.close()
    save_evaluation(out / TOKEN_FILE, evaluation)
    result = summarise(evaluation, ref, bootstrap.resamples, bootstrap.block_tokens, bootstrap.seed)
    result["tokenizer_check"] = {"tokens_compared": compared, "identical": True}
    result["engine"] = {"backend": artifact.backend, **dataclasses.asdict(engine)}
    return result
