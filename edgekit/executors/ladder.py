"""Ladders: the candidates of a `scheme = "auto"` target, run by the executor in order until one passes.

Candidates are tasks like any other (keyed, cached, shared with an identical target); this module only decides
which of them run: cheapest first, stopping at the first whose verdict is "pass" (objective "smallest"), or
every one and then the bench of those that pass (objective "fastest"). The winner is settled into the bundle's
targets under the target's name; when none passes, the closest candidate is kept and the target fails.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from edgekit.executors.base import Executor
from edgekit.observe.progress import Progress
from edgekit.plan.make import Plan, bench_over, dependency_order
from edgekit.plan.targets import renamed
from edgekit.plan.tasks import AutoTarget, BundleTask, TargetPlan
from edgekit.runtime.bench.box_results import BoxResults
from edgekit.runtime.bench.results import BenchResult
from edgekit.signoff.gates import Check, Judgement, Verdict, judge_artifact
from edgekit.stages import quantize
from edgekit.store.cache import CacheEntry
from edgekit.store.results import ValidateResult

NOT_RUN = Verdict.NOT_BUILT


@dataclass
class Rung:
    """One candidate's outcome: what was built, its verdict against its gates, how far it missed them."""

    label: str
    scheme: str
    artifact: str  # the candidate's artifact name (its figures in the bench)
    verdict: Verdict = NOT_RUN
    judged: Judgement | None = None  # its gates' checks and reasons (None: not validated)
    metrics: dict[str, Any] = field(default_factory=dict)
    size: int | None = None
    bits_per_weight: float | None = None
    miss: float | None = None  # the worst relative distance of a value from its threshold (0 when it passes)
    decode_tok_s: float | None = None
    measured_on: str | None = None  # where decode_tok_s was measured: None is this build machine
    sha256: str | None = None  # of its model file (a single-file artifact): what box figures are matched by


@dataclass
class LadderOutcome:
    target: str
    objective: str
    rungs: list[Rung]
    kept: int  # the candidate in the bundle: the winner, or the closest when none passed
    passed: bool
    reason: str


def miss(judged: Judgement) -> float:
    """How far a candidate is from passing: the largest relative distance of a metric beyond its threshold."""
    worst = 0.0
    for check in judged.checks:
        if not check.threshold:
            continue
        beyond = (check.value - check.threshold) if check.direction == "max" else (check.threshold - check.value)
        worst = max(worst, beyond / abs(check.threshold))
    return worst


def run_ladders(plan: Plan, executor: Executor, entries: dict[str, CacheEntry], progress: Progress
                ) -> tuple[Plan, dict[str, LadderOutcome]]:  # fmt: skip
    """Run each ladder and settle its kept candidate into the bundle (then the bench of the settled targets).

    The plan returned holds every task that ran, so the bundle's logs, memory record and cache repairs see
    each candidate like any target."""
    if not plan.bundle.auto:
        return plan, {}
    ladders = {auto.name: run_ladder(executor, auto, entries, progress) for auto in plan.bundle.auto}
    bundle = settle(plan.bundle, ladders)
    entries.update(executor.run(bundle.deps(), known=entries))
    ran = [t for auto in plan.bundle.auto for c in auto.candidates for t in c.tasks() if t.key in entries]
    tasks = dependency_order([*plan.tasks, *bundle.deps(), *ran])
    return dataclasses.replace(plan, bundle=bundle, tasks=tasks), ladders


def run_ladder(executor: Executor, auto: AutoTarget, entries: dict[str, CacheEntry], progress: Progress
               ) -> LadderOutcome:  # fmt: skip
    rungs = [Rung(c.label, c.scheme, c.quantize.name) for c in auto.candidates]
    for i, (candidate, rung) in enumerate(zip(auto.candidates, rungs, strict=True)):
        progress.log(f"{auto.name}: candidate {i + 1}/{len(rungs)} {candidate.label}")
        entries.update(executor.run(candidate.tasks()[:2], known=entries))  # quantize and validate
        _judge(candidate, rung, entries)
        if auto.objective == "smallest" and rung.verdict == Verdict.PASS:
            break
    if auto.objective == "fastest" and any(r.verdict == Verdict.PASS for r in rungs):
        if auto.box_results is not None:
            _box_figures(auto.box_results, rungs)
        elif auto.bench is not None:
            entries.update(executor.run([auto.bench], known=entries))
            bench = BenchResult.of(entries[auto.bench.key])
            for rung in rungs:
                rung.decode_tok_s = bench.figures(rung.artifact).get("decode_tok_s")
    return _decide(auto, rungs)


def _box_figures(box_results: BoxResults, rungs: list[Rung]) -> None:
    for rung in (r for r in rungs if r.verdict == Verdict.PASS):
        if figure := box_results.of(rung.sha256):
            rung.decode_tok_s, rung.measured_on = figure.decode_tok_s, f"{figure.box} ({figure.file})"


def _judge(candidate: TargetPlan, rung: Rung, entries: dict[str, CacheEntry]) -> None:
    artifact = quantize.artifact(candidate.quantize, entries[candidate.quantize.key])
    rung.size, rung.bits_per_weight = artifact.size, artifact.details.get("bits_per_weight")
    rung.sha256 = artifact.recorded_sha256(artifact.path) if artifact.path.is_file() else None
    if candidate.validate is None:
        return
    result = ValidateResult.of(entries[candidate.validate.key])
    rung.judged = judge_artifact(result, candidate.gates)
    rung.verdict, rung.metrics, rung.miss = rung.judged.verdict, result.metrics, miss(rung.judged)


def _first_failure(rung: Rung) -> str:
    checks: list[Check] = rung.judged.checks if rung.judged is not None else []
    for check in checks:
        if check.verdict != Verdict.PASS:
            op = "≤" if check.direction == "max" else "≥"
            return f"{check.metric} {check.value:.4g}, needs {op} {check.threshold:g} ({check.verdict})"
    return rung.verdict


def _decide(auto: AutoTarget, rungs: list[Rung]) -> LadderOutcome:
    passing = [i for i, r in enumerate(rungs) if r.verdict == Verdict.PASS]
    failed = "; ".join(f"{r.label}: {_first_failure(r)}" for r in rungs if r.verdict not in (Verdict.PASS, NOT_RUN))
    if not passing:
        ran = [i for i, r in enumerate(rungs) if r.verdict != NOT_RUN]
        closest = min(ran, key=lambda i: (rungs[i].miss if rungs[i].miss is not None else float("inf"), i))
        return LadderOutcome(auto.name, auto.objective, rungs, closest, False,
                             f"no candidate passes every gate; the closest is {rungs[closest].label} "
                             f"({_first_failure(rungs[closest])}), kept in the bundle as {auto.name}, which fails. "
                             f"Candidates: {failed}")  # fmt: skip
    timed = [i for i in passing if rungs[i].decode_tok_s]
    if auto.objective == "fastest" and timed:
        best = max(timed, key=lambda i: (rungs[i].decode_tok_s or 0.0, -i))
        return LadderOutcome(auto.name, auto.objective, rungs, best, True, _fastest(rungs, passing, timed, best))
    best = passing[0]
    skipped = sum(1 for r in rungs if r.verdict == NOT_RUN)
    reason = f"{rungs[best].label} is the first candidate, cheapest first, that passes every gate"
    reason += f"; cheaper candidates failed: {failed}" if failed else ""
    reason += f"; {skipped} more expensive candidate(s) were not built" if skipped else ""
    if auto.objective == "fastest" and auto.box_results is not None:
        reason += (f"; none of the passing candidates' model files is in {', '.join(auto.box_results.files)}, "
                   "so they were ranked by cost, not by the box's speed")  # fmt: skip
    return LadderOutcome(auto.name, auto.objective, rungs, best, True, reason)


def _fastest(rungs: list[Rung], passing: list[int], timed: list[int], best: int) -> str:
    where = f"on the box {rungs[best].measured_on}" if rungs[best].measured_on else "on this box"
    others = ", ".join(f"{rungs[i].label} {rungs[i].decode_tok_s:.1f}" for i in timed if i != best)
    reason = (f"{rungs[best].label} decodes fastest {where} of the {len(passing)} candidates that pass every gate: "
              f"{rungs[best].decode_tok_s:.1f} tok/s" + (f" (others: {others} tok/s)" if others else ""))  # fmt: skip
    unmeasured = [rungs[i].label for i in passing if i not in timed]
    return reason + (f"; not measured there, so not ranked: {', '.join(unmeasured)}" if unmeasured else "")


def settle(bundle: BundleTask, outcomes: dict[str, LadderOutcome]) -> BundleTask:
    """The bundle with each ladder's kept candidate among its targets (recipe order), its benches re-formed."""
    targets = list(bundle.targets)
    for auto in sorted(bundle.auto, key=lambda a: a.position):
        kept = renamed(auto.candidates[outcomes[auto.name].kept], auto.name)
        targets.insert(min(auto.position, len(targets)), kept)
    report = bundle.report
    bench = bundle.bench
    if bench is not None:
        bench = bench_over(bench, targets, report.exclude_failed, report.on_inconclusive)
    boxes = tuple(bench_over(b, targets, report.exclude_failed, report.on_inconclusive) for b in bundle.box_benches)
    return dataclasses.replace(bundle, targets=tuple(targets), auto=(), bench=bench, box_benches=boxes)
