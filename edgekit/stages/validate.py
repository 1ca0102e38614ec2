"""validate: an artifact against the reference, on the same tokens, through its backend's runtime engine.

The artifact runs in its engine configured as the bundle's runtime.toml will configure it (what is scored
is what the box computes). It must first tokenize the eval text to the reference's ids (else the comparison
would be meaningless and validation stops at the first differing token); then it is scored on every window
and task — or, with `[validation] decide`, look by look until every gate is decided (`edgekit.signoff.sequential`).
Metrics are cached per (artifact, reference, engine and bootstrap settings); gates are judged after, from
the plan (`edgekit.signoff.gates`), so changing a threshold re-judges without re-running anything (except in
decide mode, where the gates say when to stop). The result also holds where the artifact differs most
(`edgekit.signoff.differences`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from edgekit.backends.runner import EngineRunner
from edgekit.observe.progress import Progress
from edgekit.plan.tasks import Bootstrap, Decide, EngineSettings, ValidateTask
from edgekit.signoff.differences import compared_completions, worst_spans
from edgekit.signoff.scoring import Reference, check_tokenizer, evaluate, save_evaluation, summarise
from edgekit.signoff.sequential import evaluate_until_decided
from edgekit.stages import quantize
from edgekit.stages.context import StageContext
from edgekit.stages.reference import load_reference
from edgekit.store.records import Artifact
from edgekit.store.results import ValidateResult

TOKEN_FILE = "tokens.npz"


def run(task: ValidateTask, ctx: StageContext, out: Path) -> ValidateResult:
    artifact = quantize.artifact(task.artifact, ctx.entry(task.artifact))
    ref = load_reference(task.reference, ctx.entry(task.reference))
    return validate_artifact(artifact, ref, task.reference.eval.text.text, task.bootstrap, out, ctx.progress,
                             task.engine, task.decide)  # fmt: skip


def validate_artifact(
    artifact: Artifact,
    ref: Reference,
    text: str,
    bootstrap: Bootstrap,
    out: Path,
    progress: Progress,
    engine: EngineSettings,
    decide: Decide | None = None,
) -> ValidateResult:
    """Score `artifact` against `ref` into `out` (per-token figures) and return its metrics."""
    with progress.task(f"validate  load {artifact.name}"):
        runner = EngineRunner(artifact.backend, artifact.path, **engine.config())
    try:
        compared = check_tokenizer(runner, ref, text, artifact.name)
        settings = (bootstrap.resamples, bootstrap.block_tokens, bootstrap.seed)
        if decide is None:
            evaluation = evaluate(runner, ref, progress, artifact.name)
            summary = summarise(evaluation, ref, *settings)
        else:
            evaluation, summary = evaluate_until_decided(
                runner, ref, decide.gates, decide.looks, decide.alpha, settings, progress, artifact.name
            )
        spans = worst_spans(evaluation, ref, runner.detokenize)
        count = len(ref.completions)
        with progress.task(f"validate  {artifact.name}: greedy completions of {count} prompts", total=count,
                           unit="prompts") as t:  # fmt: skip
            completions = compared_completions(runner, ref.completions, runner.detokenize, t.advance)
        differences = {"spans": spans, "completions": completions}
    finally:
        runner.close()
    save_evaluation(out / TOKEN_FILE, evaluation)
    return ValidateResult(
        metrics=summary.metrics,
        tasks=summary.tasks,
        sequential=summary.sequential,
        differences=differences,
        tokenizer_check={"tokens_compared": compared, "identical": True},
        engine={"backend": artifact.backend, **dataclasses.asdict(engine)},
    )
