"""Many recipes in one build: every plan's tasks run together (a task with one key runs once for all of
them), then each bundle is assembled as `edgekit.pipeline.build` does for one, and several bundles get a
fleet report beside them (`dist/fleet-report.{json,md,html}`: artifact × box).

The tasks run on this machine (`LocalExecutor`) or on a Ray cluster (`RayCluster`), which also says
which boxes a recipe's `[[bench.boxes]]` may name.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from edgekit.errors import GateFailure, UsageError
from edgekit.executors.base import Executor, TaskEvent, Workspace
from edgekit.executors.ladder import run_ladders
from edgekit.executors.local import LocalExecutor
from edgekit.observe.memwatch import MemoryWatch
from edgekit.observe.progress import Progress
from edgekit.pipeline.build import BuildResult, finish_plan
from edgekit.plan.boxes import Box
from edgekit.plan.make import Plan, make_plan, output_path
from edgekit.recipe.load import Recipe
from edgekit.store.cache import StageCache


class Cluster(Protocol):
    def boxes(self) -> dict[str, Box]: ...

    def executor(self, space: Workspace, progress: Progress) -> Executor: ...


@dataclass
class MatrixResult:
    results: list[BuildResult]
    events: list[TaskEvent]  # every task of every recipe, each key once
    seconds: float
    tasks_seconds: float = 0.0  # of `seconds`: running the tasks (the rest: assembling bundles and reports)
    fleet_report: list[Path] = field(default_factory=list)  # fleet-report.json, .md, .html (several recipes)
    failures: dict[str, GateFailure] = field(default_factory=dict)  # bundle → every artifact excluded


def plan_all(
    recipes: Sequence[Recipe],
    *,
    cache: StageCache,
    out_dir: Path | None = None,
    project: Path | None = None,
    command: str = "edgekit build",
    threads: int | None = None,
    offered_boxes: dict[str, Box] | None = None,
    boxes: tuple[str, ...] | None = None,
) -> list[Plan]:
    """Every recipe's plan, checked before any work: boxes the cluster offers, distinct output folders."""
    plans = [
        make_plan(
            r,
            cache_root=cache.root,
            final=output_path(r, out_dir, project or Path.cwd()),
            out_given=out_dir is not None,
            threads=threads,
            command=command,
            offered_boxes=offered_boxes,
            boxes=boxes,
        )
        for r in recipes
    ]
    seen: dict[str, Plan] = {}
    for plan in plans:
        if (other := seen.setdefault(plan.bundle.final, plan)) is not plan:
            raise UsageError(f"{other.recipe} and {plan.recipe} both write {plan.bundle.final}",
                             "give one of them another [bundle] name")  # fmt: skip
    dirs = {p.env.llama_cpp_dir for p in plans}
    if len(dirs) > 1:
        raise UsageError(f"the recipes name different [toolchain] llama_cpp_dir: {sorted(map(str, dirs))}",
                         "build them in separate commands, or use one llama.cpp checkout")  # fmt: skip
    return plans


def build_matrix(
    plans: Sequence[Plan], *, cache: StageCache, progress: Progress, cluster: Cluster | None = None
) -> MatrixResult:
    """Run every plan's tasks once, then assemble each bundle; several bundles also get a fleet report."""
    started = time.time()
    cache.clean_partials()
    space = Workspace(cache, plans[0].env)
    executor = cluster.executor(space, progress) if cluster is not None else LocalExecutor(space, progress)
    with MemoryWatch() as watch:  # of this machine's processes: a cluster's remote tasks report their own
        entries = executor.run([t for plan in plans for t in plan.tasks])
        laddered = [run_ladders(plan, executor, entries, progress) for plan in plans]  # auto targets settled
    tasks_seconds = time.time() - started
    results, failures = [], {}
    for plan, ladders in laddered:
        try:
            results.append(finish_plan(plan, entries, executor, progress, started, cache=cache, watch=watch,
                                       ladders=ladders))  # fmt: skip
        except GateFailure as failure:  # every artifact of this bundle excluded: the others still get theirs
            failures[plan.bundle.final] = failure
    matrix = MatrixResult(results, list(executor.events), time.time() - started, tasks_seconds, failures=failures)
    if len(plans) > 1 and results:
        matrix.fleet_report = write_fleet_report(results)
    return matrix


def write_fleet_report(results: Sequence[BuildResult]) -> list[Path]:
    from edgekit.report.fleet import build_fleet_report
    from edgekit.report.fleet_render import write_fleet_reports

    bundles = [(str(r.bundle), json.loads((r.bundle / "report.json").read_text())) for r in results]
    where = Path(os.path.commonpath([str(r.bundle.parent) for r in results]))
    return write_fleet_reports(where, build_fleet_report(bundles))
