"""The sign-off on real builds of the tiny model: validation scores what the engine computes with the bundle's
own config, a reference import refuses other inputs, calibration never sees scored tokens, decide mode
records its looks, and a corrupted cache entry cannot reach a bundle."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgekit.errors import ExitCode
from edgekit.manifest import verify_bundle
from edgekit.recipe.load import load_recipe
from edgekit.runtime.config import load_runtime_config
from edgekit.runtime.loader import open_bundle
from edgekit.signoff.metrics import compare
from edgekit.stages.reference import load_reference
from edgekit.store.cache import StageCache
from tests.support.stage_runs import plan_of
from tests.support.tiny_project import TINY_RECIPE, build_env, make_project


def edgekit(project: Path, cache: Path, llama_cpp_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**build_env(cache, llama_cpp_dir), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "edgekit", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=1800)  # fmt: skip


def test_validation_scores_the_logits_the_engine_computes_with_the_bundles_config(
    tiny_bundle: Path, stage_cache_root: Path
) -> None:
    project = tiny_bundle.parent.parent
    cache = StageCache(stage_cache_root)
    plan = plan_of(load_recipe(project / "recipe.toml"), cache)
    validate = plan.bundle.targets[0].validate
    assert validate is not None and plan.reference is not None
    entry = cache.lookup("validate", validate.key)
    ref = load_reference(plan.reference, cache.lookup("reference", plan.reference.key))  # type: ignore[arg-type]
    assert entry is not None
    scored = np.load(entry.path / "tokens.npz")

    # The engine as the box opens it: runtime.toml read, verified bundle, no override.
    runtime = load_runtime_config(tiny_bundle)
    assert entry.result["engine"] == {"backend": "gguf", "n_ctx": runtime.n_ctx, "n_batch": runtime.n_batch,
                                      "n_threads": runtime.n_threads, "use_mmap": runtime.use_mmap}  # fmt: skip
    loaded = open_bundle(tiny_bundle, warm_up=False)
    try:
        parts = []
        for i in range(ref.windows.count):
            positions, targets = ref.windows.scored(i)
            parts.append(compare(ref.window_slice(i), loaded.engine.logits(ref.windows.window(i))[positions], targets))
    finally:
        loaded.engine.close()
    for field in ("kld", "nll", "kld_coarse"):
        engine_values = np.concatenate([getattr(p, field) for p in parts]).astype(np.float32)
        assert np.array_equal(engine_values, scored[field]), field  # bit for bit: the same logits
    assert np.array_equal(np.concatenate([p.top1_ids for p in parts]), scored["top1_ids"])
    report = json.loads((tiny_bundle / "report.json").read_text())
    assert report["signoff"]["validation"]["gguf-Q8_0"]["engine"]["n_batch"] == runtime.n_batch


def test_an_imported_reference_for_other_inputs_is_refused_naming_them(
    tiny_model: Path, stage_cache_root: Path, llama_cpp_dir: Path, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "project", tiny_model)
    exported = tmp_path / "exported"
    done = edgekit(project, stage_cache_root, llama_cpp_dir, "reference", "recipe.toml", "--export", str(exported))
    assert done.returncode == 0, done.stderr
    (entry,) = exported.iterdir()
    inputs = json.loads((entry / "entry.json").read_text())["inputs"]
    assert inputs["device"] == "cpu" and inputs["dtype"] == "float32"  # resolved, not "auto"
    assert set(inputs["versions"]) == {"torch", "transformers"} and inputs["versions"]["torch"]

    (project / "other.txt").write_text((Path(__file__).parents[1] / "fixtures" / "scandal_in_bohemia.txt").read_text())
    for named, recipe in (
        ("context length", TINY_RECIPE.replace("context_length = 128", "context_length = 64")),
        ("dtype", TINY_RECIPE.replace("[validation]", '[validation]\nreference_dtype = "bfloat16"')),
        ("text", TINY_RECIPE.replace("[validation]", '[validation]\ntext = "other.txt"')),
    ):
        (project / "recipe.toml").write_text(recipe)
        fresh = tmp_path / f"cache-{named.replace(' ', '-')}"
        built = edgekit(project, fresh, llama_cpp_dir, "build", "recipe.toml", "--reference", str(entry))
        assert built.returncode == ExitCode.BAD_INPUT, (named, built.stderr)
        said = " ".join(built.stderr.split())
        assert f"{named}: imported" in said and "nothing was built" in said, said
        assert not (project / "dist").exists() and not (fresh / "reference").exists()


DATA_AWARE = """
[[targets]]
backend = "openvino"
scheme = "INT4"
required = false
[targets.options]
group_size = 32
ratio = 0.8
calibration_samples = 4
calibration_tokens = 64
"""


def test_calibration_never_sees_the_scored_tokens(
    tiny_model: Path, stage_cache_root: Path, llama_cpp_dir: Path, tmp_path: Path
) -> None:
    recipe = TINY_RECIPE.replace("[validation]", DATA_AWARE + "\n[validation]")
    project = make_project(tmp_path / "project", tiny_model, recipe)
    built = edgekit(project, stage_cache_root, llama_cpp_dir, "build", "recipe.toml")
    assert built.returncode == 0, built.stderr
    report = json.loads((project / "dist" / "tiny" / "report.json").read_text())
    s = report["signoff"]
    scored_end = s["eval_data"]["scored_token_range"][1]
    calibration = s["calibration"]["openvino-INT4"]
    start, end = calibration["token_range"]
    assert scored_end == 512 and end - start == 4 * 64 and start >= scored_end
    assert len(calibration["ids_sha256"]) == 64 and calibration["text_sha256"] == s["eval_data"]["sha256"]
    html = (project / "dist" / "tiny" / "report.html").read_text()
    assert f"{start:,}–{end:,}" in html and calibration["ids_sha256"] in html

    # Scoring more of the text than the calibration leaves free: refused before any work, with the numbers.
    (project / "recipe.toml").write_text(recipe.replace("max_tokens = 512", "max_tokens = 65536"))
    refused = edgekit(project, stage_cache_root, llama_cpp_dir, "build", "recipe.toml", "--out", str(tmp_path / "o"))
    assert refused.returncode == ExitCode.BAD_INPUT, refused.stderr
    assert "targets[1].options" in refused.stderr and "overlap by" in refused.stderr and "tokens 0–" in refused.stderr
    assert not (tmp_path / "o").exists()

    # A [calibration] text of its own lifts the overlap.
    (project / "own.txt").write_text((Path(__file__).parents[1] / "fixtures" / "scandal_in_bohemia.txt").read_text())
    own = recipe.replace("max_tokens = 512", "max_tokens = 1024") + '\n[calibration]\ntext = "own.txt"\n'
    (project / "recipe.toml").write_text(own)
    planned = edgekit(project, stage_cache_root, llama_cpp_dir, "plan", "recipe.toml", "--json")
    assert planned.returncode == 0, planned.stderr
    task = next(t for t in json.loads(planned.stdout)["tasks"] if t["id"] == "quantize openvino-INT4")
    assert task["inputs"]["calibration"]["range"][1] - task["inputs"]["calibration"]["range"][0] == 256


def test_decide_evaluates_in_looks_and_records_them(
    tiny_model: Path, stage_cache_root: Path, llama_cpp_dir: Path, tmp_path: Path
) -> None:
    # Gates no artifact can miss: decided at the first look.
    gates = "[targets.gates]\nkld_mean_max = 1000.0\nppl_ratio_max = 1000.0\ntop1_min = 0.0\n"
    recipe = TINY_RECIPE.replace("[validation]", f"{gates}\n[validation]\ndecide = true\nlooks = 8")
    project = make_project(tmp_path / "project", tiny_model, recipe)
    built = edgekit(project, stage_cache_root, llama_cpp_dir, "build", "recipe.toml")
    assert built.returncode == 0, built.stderr
    report = json.loads((project / "dist" / "tiny" / "report.json").read_text())
    (artifact,) = report["artifacts"]
    seq = artifact["sequential"]
    # 512 tokens in windows of 128: 4 windows, so at most 4 looks; both gates are decided at the first.
    assert seq["max_looks"] == 4 and seq["looks"] == 1 and seq["decided"] and seq["windows"] == 1
    assert seq["level"] == pytest.approx(1 - 0.05 / 4) and "Bonferroni" in seq["method"]
    assert artifact["metrics"]["kld_mean"]["level"] == pytest.approx(0.9875)
    assert artifact["metrics"]["kld_mean"]["n"] == seq["scored_tokens"] == 63
    assert "look 1 of 4" in (project / "dist" / "tiny" / "report.md").read_text()


TWO_BACKENDS = TINY_RECIPE.replace("[validation]", '[[targets]]\nbackend = "openvino"\nscheme = "INT8"\nrequired = '
                                   "false\n\n[validation]")  # fmt: skip


def test_a_flipped_byte_in_cached_artifacts_is_caught_rebuilt_and_the_bundle_verifies(
    tiny_model: Path, stage_cache_root: Path, llama_cpp_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = make_project(tmp_path / "project", tiny_model, TWO_BACKENDS)
    first = edgekit(project, stage_cache_root, llama_cpp_dir, "build", "recipe.toml", "--out", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    good = {a["name"]: a["sha256"] for a in verify_bundle(tmp_path / "a" / "tiny")["artifacts"]}

    # A private cache holding copies (not links) of exactly this build's entries.
    private = tmp_path / "cache"
    monkeypatch.setenv("EDGEKIT_LLAMA_CPP_DIR", str(llama_cpp_dir))  # the converter the builds use: their keys
    plan = plan_of(load_recipe(project / "recipe.toml"), StageCache(stage_cache_root))
    for task in plan.tasks:
        shutil.copytree(stage_cache_root / task.stage / task.key, private / task.stage / task.key)
    damaged = {}
    for target in plan.bundle.targets:
        entry = private / "quantize" / target.quantize.key
        victim = entry / "model.gguf" if target.backend == "gguf" else entry / "model" / "openvino_model.bin"
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0x40  # same size: the cache's size check passes
        victim.write_bytes(bytes(data))
        damaged[target.name] = victim.relative_to(entry).as_posix()

    second = edgekit(project, private, llama_cpp_dir, "build", "recipe.toml", "--out", str(tmp_path / "b"))
    assert second.returncode == 0, second.stderr
    manifest = verify_bundle(tmp_path / "b" / "tiny")
    assert {a["name"]: a["sha256"] for a in manifest["artifacts"]} == good  # the rebuilt bytes, not the damaged
    report = json.loads((tmp_path / "b" / "tiny" / "report.json").read_text())
    repairs = {r["artifact"]: r for r in report["cache_repairs"]}
    assert set(repairs) == set(damaged)
    for name, file in damaged.items():
        assert [f["file"] for f in repairs[name]["files"]] == [file] and repairs[name]["rebuilt_identical"]
        assert f"{name}: the cached artifact differs from the sha256 recorded" in " ".join(second.stderr.split())
    assert "Cache repaired" in (tmp_path / "b" / "tiny" / "report.html").read_text()
