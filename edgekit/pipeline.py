"""The build: recipe → plan → tasks (run by an executor) → verdicts → bundle files → report → manifest, sealed last.

Every stage's output is cached by the key of its task (see `edgekit.plan.keys`), so a rerun of an
unchanged recipe reuses everything and a changed target rebuilds only what depends on it. The bundle
is staged beside its final place and swapped in whole at the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.cache import CacheEntry, StageCache
from edgekit.errors import GateFailure
from edgekit.executors.base import Executor, TaskEvent, Tools
from edgekit.executors.ladder import LadderOutcome, run_ladder, settle
from edgekit.executors.local import LocalExecutor
from edgekit.fsutil import staging_dir
from edgekit.gates import counts_as_failed, judge_artifact
from edgekit.levers import lever_figures
from edgekit.plan import Plan, make_plan, output_path
from edgekit.plan.tasks import BundleTask
from edgekit.progress import Progress
from edgekit.recipe import Recipe
from edgekit.records import Artifact
from edgekit.report.model import build_report
from edgekit.report.render import write_reports
from edgekit.stages import bundle, fetch, quantize
from edgekit.stages.reference import load_reference, noise_floor_metrics

STAGE_GROUPS = {"convert": "convert+quantize", "quantize": "convert+quantize"}


@dataclass
class BuildResult:
    bundle: Path
    verdicts: dict[str, str]
    failed_required: list[str]
    excluded: list[str]
    seconds: float
    skipped: dict[str, str] = field(default_factory=dict)  # optional targets whose backend cannot take the model
    stage_seconds: dict[str, float] = field(default_factory=dict)
    reused: dict[str, bool] = field(default_factory=dict)
    events: list[TaskEvent] = field(default_factory=list)
    ladders: dict[str, str] = field(default_factory=dict)  # per auto target: why its candidate was kept


@dataclass
class Outcome:
    """What the gates say about every validated artifact, and what the bundle policy makes of it."""

    results: dict[str, dict[str, Any]]  # per artifact: metrics, checks, verdict, gates
    verdicts: dict[str, str]
    failed_required: list[str]
    excluded: list[str]


def build(
    recipe: Recipe,
    *,
    cache: StageCache,
    progress: Progress,
    out_dir: Path | None = None,
    project: Path | None = None,
    command: str = "edgekit build",
    threads: int | None = None,
    executor: Executor | None = None,
) -> BuildResult:
    started = time.time()
    final = output_path(recipe, out_dir, project or Path.cwd())
    plan = make_plan(recipe, cache_root=cache.root, final=final, out_given=out_dir is not None, threads=threads,
                     command=command)  # fmt: skip
    return build_plan(plan, cache=cache, progress=progress, executor=executor, started=started)


def build_plan(
    plan: Plan,
    *,
    cache: StageCache,
    progress: Progress,
    executor: Executor | None = None,
    started: float | None = None,
) -> BuildResult:
    started = started or time.time()
    task = plan.bundle
    cache.clean_partials()
    tools = Tools(cache, task.threads, plan.llama_cpp_dir)
    executor = executor or LocalExecutor(tools, progress)
    entries = executor.run(plan.tasks)
    ladders = {auto.name: run_ladder(executor, auto, entries, progress) for auto in task.auto}
    if ladders:
        task = settle(task, ladders)
        entries.update(executor.run(task.deps(), known=entries))
    outcome = judge(task, entries, ladders)
    if outcome.excluded and len(outcome.excluded) == len(task.targets):
        raise GateFailure(outcome.excluded, None)
    bundle_started = time.time()
    with progress.task(f"bundle  {task.final}"):
        assemble(task, entries, outcome, ladders)
    events = executor.events
    return BuildResult(
        bundle=Path(task.final),
        verdicts=outcome.verdicts,
        failed_required=outcome.failed_required,
        excluded=outcome.excluded,
        seconds=time.time() - started,
        stage_seconds={**_stage_seconds(events), "bundle+report": time.time() - bundle_started},
        reused=_reused(events),
        skipped={t.name: t.reason for t in task.skipped},
        events=list(events),
        ladders={name: ladder.reason for name, ladder in ladders.items()},
    )


def judge(task: BundleTask, entries: dict[str, CacheEntry], ladders: dict[str, LadderOutcome] | None = None
          ) -> Outcome:  # fmt: skip
    results: dict[str, dict[str, Any]] = {}
    for target in task.targets:
        if target.validate is None:
            continue
        entry = entries[target.validate.key]
        measured = {**entry.result, "cache_key": entry.key, "token_file": str(entry.path / "tokens.npz")}
        results[target.name] = {
            **measured,
            **judge_artifact(measured, target.gates),
            "gates": target.gates.model_dump(),
        }
        ladder = (ladders or {}).get(target.name)
        if ladder is not None and not ladder.passed:  # none of the ladder passed: the target fails, whatever the
            results[target.name]["verdict"] = "fail"  # closest candidate's own verdict
            results[target.name]["reasons"] = [ladder.reason, *results[target.name].get("reasons", [])]
    verdicts = {name: r["verdict"] for name, r in results.items()}
    failed = [n for n, v in verdicts.items() if counts_as_failed(v, task.report.on_inconclusive)]
    required = {t.name for t in task.targets if t.required}
    exclude = task.report.exclude_failed
    return Outcome(
        results=results,
        verdicts=verdicts,
        failed_required=[] if exclude else [n for n in failed if n in required],
        excluded=failed if exclude else [],
    )


def assemble(task: BundleTask, entries: dict[str, CacheEntry], outcome: Outcome,
             ladders: dict[str, LadderOutcome] | None = None) -> None:  # fmt: skip
    """Stage the bundle's files, render the report from the results, seal the manifest, swap it in."""
    checkpoint = fetch.checkpoint(task.checkpoint, entries.get(task.checkpoint.key))
    artifacts = [quantize.artifact(t.quantize, entries[t.quantize.key]) for t in task.targets]
    kept = [a for a in artifacts if a.name not in outcome.excluded]
    bench = _bench_result(task, entries)
    runtime = bundle.runtime_values(task, kept, outcome.verdicts, bench)
    with staging_dir(Path(task.final)) as tmp:
        records = bundle.stage_files(tmp, task, kept, checkpoint, runtime, outcome.verdicts)
        reference, noise = _reference_summary(task, entries)
        report = build_report(
            task.report,
            targets=task.targets,
            checkpoint=checkpoint,
            reference=reference,
            noise_floor=noise,
            artifacts=_report_rows(task, records, artifacts, outcome),
            bench=bench,
            versions=task.versions,
            levers=lever_figures(task, entries, ladders or {}),
        )
        write_reports(tmp, report)
        bundle.seal_manifest(tmp, task, checkpoint, records, runtime)


def _bench_result(task: BundleTask, entries: dict[str, CacheEntry]) -> dict[str, Any] | None:
    if task.bench is None:
        return None
    entry = entries[task.bench.key]
    return {**entry.result, "cache": {"key": entry.key, "reused": entry.reused}}


def _reference_summary(task: BundleTask, entries: dict[str, CacheEntry]) -> tuple[Any, Any]:
    if task.reference is None:
        return None, None
    entry = entries[task.reference.key]
    ref = load_reference(task.reference, entry)
    meta = {k: v for k, v in ref.meta.items() if k not in ("tasks", "noise_floor")}
    meta.update(cache_key=entry.key, reused=entry.reused)
    return meta, noise_floor_metrics(ref, task.report.bootstrap)


def _report_rows(
    task: BundleTask, records: list[dict[str, Any]], artifacts: list[Artifact], outcome: Outcome
) -> list[dict[str, Any]]:
    required = {t.name for t in task.targets if t.required}
    record_keys = ("name", "backend", "scheme", "path", "size", "sha256", "tensor_types", "bits_per_weight")
    rows = [
        {
            **{k: record[k] for k in record_keys},
            "details": record["details"],
            "required": record["name"] in required,
            **outcome.results.get(record["name"], {"verdict": "not validated", "metrics": None}),
        }
        for record in records
    ]
    for artifact in (a for a in artifacts if a.name in outcome.excluded):
        described = {
            "backend": artifact.backend,
            "scheme": artifact.scheme,
            "size": artifact.size,
            "tensor_types": artifact.details.get("tensor_types", {}),
            "bits_per_weight": artifact.details.get("bits_per_weight"),
            "details": artifact.details,
            "required": artifact.name in required,
        }
        verdict = outcome.verdicts[artifact.name]
        rows.append({"name": artifact.name, "verdict": verdict, "excluded": True, **described,
                     **outcome.results[artifact.name]})  # fmt: skip
    for skipped in task.skipped:
        rows.append({"name": skipped.name, "backend": skipped.backend, "scheme": skipped.scheme, "required": False,
                     "verdict": "not built", "reasons": [skipped.reason], "metrics": None,
                     "excluded": True})  # fmt: skip
    return rows


def _stage_seconds(events: list[TaskEvent]) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for event in events:
        group = STAGE_GROUPS.get(event.stage, event.stage)
        seconds[group] = seconds.get(group, 0.0) + event.seconds
    return seconds


def _reused(events: list[TaskEvent]) -> dict[str, bool]:
    reused: dict[str, bool] = {}
    for event in events:
        reused[event.stage] = reused.get(event.stage, True) and event.reused
    return reused
