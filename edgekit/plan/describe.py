"""`edgekit plan --json`: the DAG of a plan as data, before anything runs.

Schema (version 1; as a JSON Schema: edgekit/cli/schemas/plan.json, `edgekit schema plan`):

    {"schema": "edgekit.plan", "version": 1,
     "recipe": path, "bundle": final path of the bundle (or ""),
     "tasks": [ {"id": "quantize gguf-Q4_K_M",        a label, unique within the plan
                 "stage": "quantize",                 a stage of edgekit.plan.tasks.STAGE_ORDER
                 "key": "<sha256>",                   the cache key: sha256 of the stage and these inputs
                 "cached": true,                      an entry with this key is in the cache (the task will be reused)
                 "deps": ["<key>", ...],              keys of the tasks it reads
                 "resources": {"cpus", "memory_mib", "gpus", "box"},
                 "inputs": {...},                     the declared inputs as they enter the key (upstream tasks as keys)
                 "ladder": {"target", "candidate", "position", "runs"}}  only on a scheme = "auto" candidate's
               ],                                     tasks: they run in order, until one passes
     "skipped": [{"name", "backend", "scheme", "reason"}],  optional targets left out, and why (with the fix)
     "tokenizer": "llama.cpp (source GGUF)",              what cuts the eval text into ids (null: nothing does)
     "summary": {"tasks": n, "cached": n, "to_run": n}}

The bundle task is listed last; it is never cached (it writes dist/<name>/ each time).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from edgekit.plan.make import Plan, dependency_order
from edgekit.plan.tasks import Task
from edgekit.store.cache import StageCache

PLAN_SCHEMA_VERSION = 1


def describe(plan: Plan, cache: StageCache) -> dict[str, Any]:
    tasks = [_task(t, cache, plan.bundle.threads) for t in plan.tasks]
    listed = {t["key"] for t in tasks}
    for auto in plan.bundle.auto:  # ladder candidates run in order, each only if the ones before it fail
        for i, candidate in enumerate(auto.candidates):
            for task in dependency_order(candidate.tasks()[:2]):
                if task.key not in listed:
                    listed.add(task.key)
                    runs = "always" if i == 0 else "if every candidate before it fails"
                    if auto.objective == "fastest":
                        runs = "always (objective fastest)"
                    ladder = {"target": auto.name, "candidate": candidate.label, "position": i, "runs": runs}
                    tasks.append(_task(task, cache, plan.bundle.threads) | {"ladder": ladder})
    bundle = plan.bundle
    tasks.append(
        {
            "id": bundle.label,
            "stage": bundle.stage,
            "key": None,
            "cached": False,
            "deps": sorted({d.key for d in bundle.deps()}),
            "resources": dataclasses.asdict(bundle.resources(1)),
            "inputs": {"name": bundle.name, "final": bundle.final, "targets": [t.name for t in bundle.targets]},
        }
    )
    cached = sum(1 for t in tasks if t["cached"])
    return {
        "schema": "edgekit.plan",
        "version": PLAN_SCHEMA_VERSION,
        "recipe": str(plan.recipe),
        "bundle": bundle.final,
        "tasks": tasks,
        "skipped": [dataclasses.asdict(t) for t in bundle.skipped],
        "tokenizer": bundle.report.tokenizer,
        "summary": {"tasks": len(tasks), "cached": cached, "to_run": len(tasks) - cached},
    }


def _task(task: Task, cache: StageCache, threads: int) -> dict[str, Any]:
    return {
        "id": task.label,
        "stage": task.stage,
        "key": task.key,
        "cached": cache.lookup(task.stage, task.key) is not None,
        "deps": [d.key for d in task.deps()],
        "resources": dataclasses.asdict(task.resources(threads)),
        "inputs": task.inputs(),
    }
