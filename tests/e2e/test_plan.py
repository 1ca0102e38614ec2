"""`edgekit plan`: the DAG a build will run, read before the build; and a changed recipe reruns only what changed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema

from edgekit.cli.common import load_schema
from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import BuildResult, build
from edgekit.plan.describe import describe
from edgekit.plan.make import make_plan
from edgekit.recipe.load import load_recipe
from edgekit.store.cache import StageCache
from tests.support.stage_cache import cli_env
from tests.support.tiny_project import TINY_RECIPE, make_project

TASK_KEYS = {"id", "stage", "key", "cached", "deps", "resources", "inputs"}


def test_plan_of_the_default_recipe_lists_every_task_with_its_key_inputs_and_state(
    default_build: BuildResult, stage_cache_root: Path, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edgekit", "plan", "--json", "--out", str(tmp_path)],
        capture_output=True, text=True, env=cli_env(stage_cache_root, HF_HUB_OFFLINE="1"), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    jsonschema.validate(plan, load_schema("plan"))
    assert plan["schema"] == "edgekit.plan" and plan["version"] == 1
    tasks = plan["tasks"]
    assert all(set(t) == TASK_KEYS for t in tasks)
    stages = [t["stage"] for t in tasks]
    assert stages.count("fetch") == 1 and stages.count("reference") == 1 and stages.count("bench") == 1
    assert stages.count("convert") == 2 and stages.count("quantize") == 4 and stages.count("validate") == 4
    assert stages.count("smoke") == 4  # greedy token ids of every artifact, for the boxes' installs
    assert stages[-1] == "bundle" and tasks[-1]["key"] is None and not tasks[-1]["cached"]
    keys = [t["key"] for t in tasks[:-1]]
    assert len(set(keys)) == len(keys) and all(len(k) == 64 for k in keys)
    for i, task in enumerate(tasks):
        assert set(task["deps"]) <= set(keys[:i]), task["id"]  # dependencies come first
    # The default build ran with the same settings: everything but the bundle is reused.
    assert plan["summary"] == {"tasks": len(tasks), "cached": len(tasks) - 1, "to_run": 1}
    quantize = next(t for t in tasks if t["id"] == "quantize gguf-Q4_K_M")
    assert quantize["inputs"]["scheme"] == "Q4_K_M" and quantize["inputs"]["converted"] in keys
    human = subprocess.run(
        [sys.executable, "-m", "edgekit", "plan", "--out", str(tmp_path)],
        capture_output=True, text=True, env=cli_env(stage_cache_root, HF_HUB_OFFLINE="1"), timeout=600,
    )  # fmt: skip
    assert human.returncode == 0 and "validate gguf-Q5_K_M" in human.stdout and "1 to run" in human.stdout


def test_a_changed_target_reruns_only_the_tasks_whose_inputs_changed(
    tiny_bundle: Path, tiny_model: Path, stage_cache_root: Path, tmp_path: Path
) -> None:
    changed = TINY_RECIPE.replace('scheme = "Q8_0"', 'scheme = "F16"')
    project = make_project(tmp_path / "project", tiny_model, changed)
    recipe = load_recipe(project / "recipe.toml")
    cache = StageCache(stage_cache_root)
    described = describe(make_plan(recipe, cache_root=cache.root, final=tmp_path / "dist" / "tiny"), cache)
    to_run = {t["id"] for t in described["tasks"] if not t["cached"]}
    assert to_run == {
        "quantize gguf-F16",
        "validate gguf-F16",
        "smoke gguf-F16",
        f"bundle {tmp_path / 'dist' / 'tiny'}",
    }
    result = build(recipe, cache=cache, progress=SilentProgress(), out_dir=tmp_path / "dist", project=project)
    ran = {e.label for e in result.events if not e.reused}
    reused = {e.stage for e in result.events if e.reused}
    assert ran == {"quantize gguf-F16", "validate gguf-F16", "smoke gguf-F16"}, result.events
    assert reused == {"fetch", "convert", "reference"}
