"""The build: recipe → plan → tasks (run by an executor) → verdicts → bundle files → report → manifest, sealed last.

Every stage's output is cached by the key of its task (see `edgekit.plan.keys`), so a rerun of an
unchanged recipe reuses everything and a changed target rebuilds only what depends on it. The bundle
is staged beside its final place and swapped in whole at the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit._util.fsutil import staging_dir
from edgekit.errors import CorruptCacheEntry, EdgekitError, ExitCode, GateFailure, UsageError
from edgekit.executors.base import FAILED_LOGS, Executor, TaskEvent, Workspace
from edgekit.executors.ladder import LadderOutcome, run_ladders
from edgekit.executors.local import LocalExecutor
from edgekit.observe import stagelog
from edgekit.observe.memwatch import INTERVAL_SECONDS, MemoryWatch, max_rss_mib
from edgekit.observe.progress import Progress
from edgekit.pipeline.levers import lever_figures
from edgekit.pipeline.repair import repair
from edgekit.plan.disk import check_disk
from edgekit.plan.make import Plan, make_plan, output_path
from edgekit.plan.task_base import Stage
from edgekit.plan.tasks import BundleTask
from edgekit.recipe.load import Recipe
from edgekit.report.model import ArtifactRow, Built, Validated, build_report
from edgekit.report.render import write_reports
from edgekit.runtime.bench.box_results import BoxResults
from edgekit.runtime.bench.results import BenchResult
from edgekit.signoff.gates import Verdict, counts_as_failed, judge_artifact
from edgekit.stages import bundle, fetch, quantize
from edgekit.stages.reference import load_reference, noise_floor_metrics
from edgekit.stages.reference_transfer import import_reference
from edgekit.stages.validate import TOKEN_FILE
from edgekit.store.cache import CacheEntry, StageCache
from edgekit.store.records import Artifact
from edgekit.store.results import CacheRef, ReferenceResult, ValidateResult

STAGE_GROUPS = {Stage.CONVERT: "convert+quantize", Stage.QUANTIZE: "convert+quantize"}


@dataclass
class BuildResult:
    bundle: Path
    verdicts: dict[str, Verdict]
    failed_required: list[str]
    excluded: list[str]
    seconds: float
    skipped: dict[str, str] = field(default_factory=dict)  # optional targets whose backend cannot take the model
    stage_seconds: dict[str, float] = field(default_factory=dict)
    reused: dict[str, bool] = field(default_factory=dict)
    events: list[TaskEvent] = field(default_factory=list)
    repairs: list[dict[str, Any]] = field(default_factory=list)  # damaged cache entries dropped and rebuilt
    ladders: dict[str, str] = field(default_factory=dict)  # per auto target: why its candidate was kept


@dataclass
class Outcome:
    """What the gates say about every validated artifact, and what the bundle policy makes of it."""

    results: dict[str, Validated]  # per validated artifact: its figures and what its gates make of them
    verdicts: dict[str, Verdict]
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
    reference_dir: Path | None = None,
    reproduce: str | None = None,
    box_results: BoxResults | None = None,
) -> BuildResult:
    """`reference_dir`: a reference exported by `edgekit reference --export`, imported when it is the one planned;
    `box_results`: a target box's bench figures, by which "fastest" ladders rank their candidates."""
    started = time.time()
    with build_log(cache) as log:  # planning, bundling and helper threads: the build's own log
        final = output_path(recipe, out_dir, project or Path.cwd())
        plan = make_plan(recipe, cache_root=cache.root, final=final, out_given=out_dir is not None,
                         threads=threads, command=command, reproduce=reproduce, box_results=box_results)  # fmt: skip
        progress.log(f"plan: {len(plan.tasks) + 1} tasks ({time.time() - started:.1f} s)")
        warn_notices(progress, "plan", log)
        if reference_dir is not None:
            if plan.reference is None:
                raise UsageError("--reference was given, but this recipe has [validation] enabled = false")
            import_reference(reference_dir, cache, plan.reference)
        return build_plan(plan, cache=cache, progress=progress, executor=executor, started=started, build_log=log)


@contextlib.contextmanager
def build_log(cache: StageCache) -> Iterator[stagelog.Capture]:
    """What other libraries print outside a stage (planning, bundling): a nameless temp file (bad input writes
    nothing in the cache, a killed build leaves nothing), copied into the bundle's logs/ by a build; kept in the
    cache's logs/ when the command fails after its input was accepted."""
    with stagelog.capture() as log:
        try:
            yield log
        except BaseException as exc:
            bad_input = isinstance(exc, EdgekitError) and exc.exit_code == ExitCode.BAD_INPUT  # nothing was accepted
            if not bad_input and cache.root.is_dir():
                kept = cache.root / FAILED_LOGS / f"build-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
                stagelog.keep(exc, kept, {"build.log": log.text()})
            raise


def warn_notices(progress: Progress, where: str, log: stagelog.Capture) -> None:
    """Show the warnings that matter found in `log` so far, once each."""
    for notice in log.notices:
        progress.warn(f"{where}: {notice}")
    log.notices.clear()


def build_plan(
    plan: Plan,
    *,
    cache: StageCache,
    progress: Progress,
    executor: Executor | None = None,
    started: float | None = None,
    build_log: stagelog.Capture | None = None,
) -> BuildResult:
    started = started or time.time()
    cache.clean_partials()
    check_disk(plan.tasks, plan.bundle, cache)  # before any stage: a build that cannot finish does not start
    executor = executor or LocalExecutor(Workspace(cache, plan.env), progress)
    with MemoryWatch() as watch:
        entries = executor.run(plan.tasks)
        plan, ladders = run_ladders(plan, executor, entries, progress)
    return finish_plan(plan, entries, executor, progress, started, cache=cache, watch=watch, build_log=build_log,
                       ladders=ladders)  # fmt: skip


def finish_plan(
    plan: Plan,
    entries: dict[str, CacheEntry],
    executor: Executor,
    progress: Progress,
    started: float,
    *,
    cache: StageCache,
    watch: MemoryWatch | None = None,
    build_log: stagelog.Capture | None = None,
    ladders: dict[str, LadderOutcome] | None = None,
) -> BuildResult:
    """The bundle of `plan` from its tasks' entries (the executor's events: what ran, of this plan and maybe
    others); cache entries found damaged while bundling are rebuilt once. `plan` and `ladders` are as
    `run_ladders` left them: the auto targets settled."""
    ladders = ladders or {}
    task = plan.bundle
    repairs: list[dict[str, Any]] = []
    bundle_started = time.time()
    progress.stage_started(task.label)
    for attempt in (1, 2):
        outcome = judge(task, entries, ladders)
        if outcome.excluded and len(outcome.excluded) == len(task.targets):
            raise GateFailure(outcome.excluded, None)
        try:
            with progress.task(f"bundle  {task.final}"):
                memory = memory_record(plan, entries, watch) if watch is not None else None
                assemble(task, entries, outcome, Extras(repairs, memory, _log_folders(plan, entries),
                         build_log.text() if build_log else None, ladders))  # fmt: skip
            break
        except CorruptCacheEntry as damaged:
            if attempt == 2:  # rebuilt entries differ again: the disk, not the cache
                raise
            entries, repairs = repair(plan, entries, damaged.damaged, cache, executor, progress)
    if build_log is not None:
        warn_notices(progress, "bundle", build_log)
    progress.stage_finished(task.label, time.time() - bundle_started, reused=False)
    keys = {t.key for t in plan.tasks}
    events = [e for e in executor.events if e.key in keys]
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
        repairs=repairs,
        ladders={name: ladder.reason for name, ladder in ladders.items()},
    )


def judge(task: BundleTask, entries: dict[str, CacheEntry], ladders: dict[str, LadderOutcome] | None = None
          ) -> Outcome:  # fmt: skip
    results: dict[str, Validated] = {}
    for target in task.targets:
        if target.validate is None:
            continue
        entry = entries[target.validate.key]
        measured = ValidateResult.of(entry)
        judgement = judge_artifact(measured, target.gates)
        ladder = (ladders or {}).get(target.name)
        if ladder is not None and not ladder.passed:  # none of the ladder passed: the target fails, whatever the
            judgement.verdict = Verdict.FAIL  # closest candidate's own verdict
            judgement.reasons = [ladder.reason, *judgement.reasons]
        results[target.name] = Validated(measured, entry.key, str(entry.path / TOKEN_FILE), judgement,
                                         target.gates.model_dump())  # fmt: skip
    verdicts = {name: r.judgement.verdict for name, r in results.items()}
    failed = [n for n, v in verdicts.items() if counts_as_failed(v, task.report.on_inconclusive)]
    required = {t.name for t in task.targets if t.required}
    exclude = task.report.exclude_failed
    return Outcome(
        results=results,
        verdicts=verdicts,
        failed_required=[] if exclude else [n for n in failed if n in required],
        excluded=failed if exclude else [],
    )


def _log_folders(plan: Plan, entries: dict[str, CacheEntry]) -> dict[str, Path]:
    """Each task's entry folder (where its logs are) under a name for the bundle's logs/: `quantize-gguf-Q8_0`."""
    folders: dict[str, Path] = {}
    for task in plan.tasks:
        if task.key not in entries:
            continue
        what = task.label.removeprefix(task.stage).strip()
        name = task.stage if not what or re.search(r"[/:\\]", what) else f"{task.stage}-{what}"
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", name)
        folders[name if name not in folders else f"{name}-{task.key[:12]}"] = entries[task.key].path
    return folders


@dataclass
class Extras:
    """What the report says besides the artifacts' figures."""

    repairs: list[dict[str, Any]] = field(default_factory=list)
    memory: dict[str, Any] | None = None
    logs: dict[str, Path] = field(default_factory=dict)
    build_log: str | None = None
    ladders: dict[str, LadderOutcome] = field(default_factory=dict)


def assemble(task: BundleTask, entries: dict[str, CacheEntry], outcome: Outcome, extras: Extras | None = None) -> None:
    """Stage the bundle's files, render the report from the results, seal the manifest, swap it in."""
    extras = extras or Extras()
    checkpoint = fetch.checkpoint(task.checkpoint, entries.get(task.checkpoint.key))
    artifacts = [quantize.artifact(t.quantize, entries[t.quantize.key]) for t in task.targets]
    kept = [a for a in artifacts if a.name not in outcome.excluded]
    bench = _bench_result(task, entries)
    runtime = bundle.runtime_values(task, kept, outcome.verdicts, bench)
    benches = {b.box or "": _bench_entry(entries[b.key]) for b in task.box_benches}
    with staging_dir(Path(task.final)) as tmp:
        records = bundle.stage_files(tmp, task, kept, checkpoint, runtime, outcome.verdicts)
        measured = [b for b in (bench, *benches.values()) if b is not None]
        reference, noise = _reference_summary(task, entries)
        bundle.add_ship_files(tmp, task, records, entries, measured, runtime["artifact"], noise)
        bundle.stage_box_runtimes(tmp, task, kept, outcome.verdicts, benches)
        report = build_report(
            task.report,
            targets=task.targets,
            checkpoint=checkpoint,
            reference=reference,
            noise_floor=noise,
            artifacts=_report_rows(task, records, artifacts, outcome),
            bench=bench,
            versions=task.versions,
            levers=lever_figures(task, entries, extras.ladders),
            repairs=extras.repairs,
            memory=extras.memory,
            benches=benches,
        )
        write_reports(tmp, report)
        bundle.stage_logs(tmp, extras.logs, extras.build_log)
        bundle.seal_manifest(tmp, task, checkpoint, records, runtime)


def _bench_result(task: BundleTask, entries: dict[str, CacheEntry]) -> BenchResult | None:
    return _bench_entry(entries[task.bench.key]) if task.bench is not None else None


def _bench_entry(entry: CacheEntry) -> BenchResult:
    bench = BenchResult.of(entry)
    bench.cache = CacheRef(entry.key, entry.reused)
    return bench


def _reference_summary(task: BundleTask, entries: dict[str, CacheEntry]) -> tuple[Any, Any]:
    """The reference as the report describes it (not its task records, noise floor or completions), with what
    producing its entry took; and the noise floor's figures."""
    if task.reference is None:
        return None, None
    entry = entries[task.reference.key]
    result = ReferenceResult.of(entry)
    meta = {k: v for k, v in result.to_json().items() if k not in ("tasks", "noise_floor", "completions")}
    meta.update(entry_seconds=entry.meta.get("seconds"), cache_key=entry.key, reused=entry.reused)
    return meta, noise_floor_metrics(load_reference(task.reference, entry), result.noise_floor, task.report.bootstrap)


def _report_rows(
    task: BundleTask, records: list[dict[str, Any]], artifacts: list[Artifact], outcome: Outcome
) -> list[ArtifactRow]:
    """Every artifact the report lists: the bundled ones (from their manifest records), those left out by their
    gates, and the optional targets that were not built."""
    required = {t.name for t in task.targets if t.required}
    rows = [
        ArtifactRow(r["name"], r["backend"], r["scheme"], r["name"] in required,
                    built=Built(r["size"], r["tensor_types"], r["bits_per_weight"], r["details"]),
                    path=r["path"], sha256=r["sha256"], validation=outcome.results.get(r["name"]))
        for r in records
    ]  # fmt: skip
    for a in (a for a in artifacts if a.name in outcome.excluded):
        built = Built(a.size, a.details.get("tensor_types", {}), a.details.get("bits_per_weight"), a.details)
        rows.append(ArtifactRow(a.name, a.backend, a.scheme, a.name in required, built=built, excluded=True,
                                validation=outcome.results[a.name]))  # fmt: skip
    for skipped in task.skipped:
        rows.append(ArtifactRow(skipped.name, skipped.backend, skipped.scheme, False, excluded=True,
                                unvalidated=Verdict.NOT_BUILT, reasons=[skipped.reason]))  # fmt: skip
    return rows


def memory_record(plan: Plan, entries: dict[str, CacheEntry], watch: MemoryWatch) -> dict[str, Any]:
    """Peak resident memory per stage (the largest over its tasks, as measured when each entry was made) and of
    this build's process tree."""
    stages: dict[str, dict[str, Any]] = {}
    for t in plan.tasks:
        entry = entries.get(t.key)
        measured = entry.meta.get("memory") if entry is not None else None
        if entry is None or not measured:
            continue
        row = stages.setdefault(t.stage, {"tasks": 0, "reused": True})
        row["tasks"] += 1
        row["reused"] = row["reused"] and entry.reused
        for name, value in measured.items():
            row[name] = max(row.get(name, 0), value)
    build = {**watch.peaks.as_mib(), **max_rss_mib()}
    return {"sampled_every_seconds": INTERVAL_SECONDS, "stages": stages, "build": build}


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
