"""Run single tasks of a recipe's plan in a test: the fetch, or the quantize of its first target."""

from __future__ import annotations

from pathlib import Path

from edgekit.executors.base import Workspace
from edgekit.executors.local import LocalExecutor
from edgekit.observe.progress import SilentProgress
from edgekit.plan.make import Plan, make_plan
from edgekit.plan.tasks import Task
from edgekit.recipe.load import Recipe
from edgekit.signoff.scoring import Reference
from edgekit.stages import fetch, quantize
from edgekit.stages.reference import load_reference
from edgekit.store.cache import CacheEntry, StageCache
from edgekit.store.records import Artifact, Checkpoint


def plan_of(recipe: Recipe, cache: StageCache, threads: int = 2) -> Plan:
    return make_plan(recipe, cache_root=cache.root, threads=threads)


def run_tasks(plan: Plan, *tasks: Task, cache: StageCache) -> tuple[dict[str, CacheEntry], LocalExecutor]:
    executor = LocalExecutor(Workspace(cache, plan.env), SilentProgress())
    return executor.run(list(tasks)), executor


def fetched(recipe: Recipe, cache: StageCache) -> Checkpoint:
    plan = plan_of(recipe, cache)
    task = plan.bundle.checkpoint
    entries, _ = run_tasks(plan, task, cache=cache)
    return fetch.checkpoint(task, entries[task.key])


def quantized(recipe: Recipe, cache: StageCache, index: int = 0) -> Artifact:
    plan = plan_of(recipe, cache)
    task = plan.bundle.targets[index].quantize
    entries, _ = run_tasks(plan, task, cache=cache)
    return quantize.artifact(task, entries[task.key])


def reference_of(recipe: Recipe, cache: StageCache) -> Reference:
    plan = plan_of(recipe, cache)
    assert plan.reference is not None
    entries, _ = run_tasks(plan, plan.reference, cache=cache)
    return load_reference(plan.reference, entries[plan.reference.key])


def recipe_file(text: str, folder: Path) -> Path:
    path = folder / "recipe.toml"
    path.write_text(text)
    return path
