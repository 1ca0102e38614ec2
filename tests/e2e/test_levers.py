"""The levers on the tiny model: importance matrix, per-tensor types, sensitivity, and scheme = "auto" ladders.

One build of a tiny recipe (2-layer random Llama, so every K-quant falls back to a legacy type; the mechanics
are the point) covers the matrix, the overrides, the with/without comparison, sensitivity and a ladder that
climbs past a failing candidate; two more builds reuse its candidates from the cache: a ladder where nothing
passes (exit 1 through the CLI, naming the closest) and objective "fastest" with a minimal bench.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import BuildResult, build
from edgekit.recipe.load import load_recipe
from edgekit.store.cache import StageCache
from tests.support.stage_cache import cli_env
from tests.support.tiny_project import TINY_BENCH

VALIDATION = """
[validation]
max_tokens = 512
context_length = 128
noise_floor_dtype = "none"
bootstrap_resamples = 200
"""
# Only the mean KLD decides (the tiny model is random: its top-1, perplexity and cloze mean little).
GATES = """top1_min = 0.0
ppl_ratio_max = 100.0
task_drop_max = 1.0
"""
# On the sharp tiny model Q4_K_M (its 4/5-bit legacy fallbacks) scores a mean KLD around 0.3, Q8_0 around 0.01.
KLD_BETWEEN_Q4_AND_Q8 = 0.05
LEVERS = f"""
[model]
source = "model"

[[targets]]
backend = "gguf"
scheme = "Q4_K_M"
name = "tiny-levers"
required = false
[targets.options]
imatrix = true
imatrix_chunks = 4
imatrix_context = 128
token_embedding_type = "q8_0"
tensor_overrides = [{{ pattern = "ffn_down", type = "Q8_0" }}, {{ pattern = "blk\\\\.1\\\\.attn_v", type = "F16" }}]
sensitivity = true

[[targets]]
backend = "gguf"
scheme = "Q4_K_M"
name = "tiny-budget"
required = false
[targets.options]
sensitivity = true
sensitivity_budget_seconds = 0.001

[[targets]]
backend = "gguf"
scheme = "auto"
name = "tiny-auto"
ladder = ["Q4_K_M", "Q8_0", "F16"]
[targets.gates]
kld_mean_max = {KLD_BETWEEN_Q4_AND_Q8}
{GATES}
{VALIDATION}
[bench]
enabled = false

[bundle]
name = "tiny-levers"
"""


def _build(root: Path, tiny_model: Path, recipe: str, cache: Path) -> BuildResult:
    from tests.support.tiny_project import make_project

    project = make_project(root, tiny_model, recipe)
    return build(load_recipe(project / "recipe.toml"), cache=StageCache(cache), progress=SilentProgress(),
                 project=project, command="edgekit build recipe.toml")  # fmt: skip


@pytest.fixture(scope="module")
def sharp_model(tmp_path_factory: pytest.TempPathFactory, smollm2_gguf: Path) -> Path:
    """The tiny Llama with weights of std 0.3 (seed 0): distributions sharp enough for quantization to show."""
    from tests.support.hub_fixtures import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("sharp") / "model", smollm2_gguf, initializer_range=0.3)


@pytest.fixture(scope="module")
def levers(tmp_path_factory: pytest.TempPathFactory, sharp_model: Path, stage_cache_root: Path, llama_tools: Path
           ) -> tuple[BuildResult, dict]:  # fmt: skip
    result = _build(tmp_path_factory.mktemp("levers") / "project", sharp_model, LEVERS, stage_cache_root)
    return result, json.loads((result.bundle / "report.json").read_text())


def _artifact(report: dict, name: str) -> dict:
    return next(a for a in report["artifacts"] if a["name"] == name)


def test_overrides_and_the_matrix_are_written_and_recorded(levers: tuple[BuildResult, dict]) -> None:
    import gguf

    result, report = levers
    artifact = _artifact(report, "tiny-levers")
    reader = gguf.GGUFReader(result.bundle / "models" / "tiny-levers.gguf")
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["token_embd.weight"] == "Q8_0" and types["blk.1.attn_v.weight"] == "F16"
    assert types["blk.0.ffn_down.weight"] == types["blk.1.ffn_down.weight"] == "Q8_0"
    assert types["blk.0.attn_v.weight"] not in ("Q8_0", "F16")  # untouched tensors keep the scheme's mix
    histogram = artifact["tensor_types"]  # what was written, counted from the file
    assert histogram["Q8_0"]["tensors"] == 3 and histogram["F16"]["tensors"] == 1
    assert reader.fields["quantize.imatrix.file"].contents() == "imatrix.gguf"
    assert reader.fields["quantize.imatrix.chunks_count"].contents() == 4
    assert reader.fields["quantize.imatrix.dataset"].contents() == "calibration.txt"
    recorded = artifact["details"]["imatrix"]  # and the manifest says where the matrix came from
    manifest = json.loads((result.bundle / "manifest.json").read_text())
    assert next(a for a in manifest["artifacts"] if a["name"] == "tiny-levers")["details"]["imatrix"] == recorded
    assert recorded["chunks"] == 4 and recorded["chunk_tokens"] == 128 and len(recorded["sha256"]) == 64
    # the matrix read the end of the text, past every scored token, and the sign-off lists that range
    scored_end = report["signoff"]["eval_data"]["scored_token_range"][1]
    start, end = recorded["calibration"]["token_range"]
    assert scored_end == 512 and start >= scored_end and end - start == 4 * 128 + 64
    assert report["signoff"]["calibration"]["tiny-levers"] == recorded["calibration"]
    assert artifact["details"]["tensor_type_overrides"]["token_embedding_type"] == "Q8_0"


def test_with_and_without_the_matrix_in_the_same_build(levers: tuple[BuildResult, dict]) -> None:
    _, report = levers
    (c,) = report["comparisons"]
    assert c["target"] == "tiny-levers" and c["lever"] == "imatrix"
    for side in ("with", "without"):
        kld = c[side]["metrics"]["kld_mean"]
        assert kld["ci95"][0] <= kld["value"] <= kld["ci95"][1]
    assert c["with"]["metrics"]["kld_mean"]["value"] != c["without"]["metrics"]["kld_mean"]["value"]
    diff = c["difference"]["kld_mean"]
    expected = c["with"]["metrics"]["kld_mean"]["value"] - c["without"]["metrics"]["kld_mean"]["value"]
    assert diff["value"] == pytest.approx(expected, rel=1e-4, abs=1e-7) and diff["ci95"][0] <= diff["ci95"][1]


def test_sensitivity_ranks_layers_or_says_why_not(levers: tuple[BuildResult, dict]) -> None:
    _, report = levers
    by_target = {s["target"]: s for s in report["sensitivity"]}
    measured = by_target["tiny-levers"]
    # the tied embedding is Q8_0 in both files here (its Q6_K falls back to Q8_0 on 64-wide rows): not a group
    assert {g["group"] for g in measured["groups"]} == {"blk.0", "blk.1"}
    added = [g["added"] for g in measured["groups"]]
    assert added == sorted(added, reverse=True) and measured["windows"] == 2
    assert measured["base_kld_mean"] < measured["artifact_kld_mean"]
    skipped = by_target["tiny-budget"]["skipped"]
    assert skipped["groups"] == 2 and skipped["projected_seconds"] > skipped["budget_seconds"] == 0.001
    html = (levers[0].bundle / "report.html").read_text()
    assert "Per-layer sensitivity" in html and "not measured" in html and "over the budget of 0.001 s" in html


def test_the_ladder_climbs_past_a_failing_candidate_and_stops(levers: tuple[BuildResult, dict]) -> None:
    result, report = levers
    (ladder,) = report["ladders"]
    states = [(c["label"], c["verdict"]) for c in ladder["candidates"]]
    assert states == [("Q4_K_M", "fail"), ("Q8_0", "pass"), ("F16", "not built")], ladder
    assert ladder["kept"] == "Q8_0" and ladder["passed"] and "cheaper candidates failed: Q4_K_M" in ladder["reason"]
    assert _artifact(report, "tiny-auto")["scheme"] == "Q8_0" and result.verdicts["tiny-auto"] == "pass"
    assert (result.bundle / "models" / "tiny-auto.gguf").is_file()
    assert "Ladder: tiny-auto" in (result.bundle / "report.md").read_text()


def test_a_ladder_where_nothing_passes_exits_1_naming_the_closest(
    levers: tuple[BuildResult, dict], sharp_model: Path, tmp_path: Path, stage_cache_root: Path
) -> None:
    from tests.support.tiny_project import make_project

    recipe = (
        LEVERS.split("[[targets]]")[0]
        + f"""[[targets]]
backend = "gguf"
scheme = "auto"
name = "tiny-auto"
ladder = ["Q4_K_M", "Q8_0"]
[targets.gates]
kld_mean_max = 1e-9
{GATES}{VALIDATION}
[bench]
enabled = false
"""
    )
    project = make_project(tmp_path / "project", sharp_model, recipe)
    env = cli_env(stage_cache_root, HF_HUB_OFFLINE="1")  # its candidates are cached
    proc = subprocess.run([sys.executable, "-m", "edgekit", "build", "recipe.toml"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    message = " ".join(proc.stderr.split())
    assert "accuracy gate failed for tiny-auto" in message and "the closest is Q8_0" in message
    report = json.loads((project / "dist" / "model" / "report.json").read_text())
    assert report["ladders"][0]["passed"] is False and _artifact(report, "tiny-auto")["verdict"] == "fail"


FASTEST_LADDER = f"""
[model]
source = "model"

[[targets]]
backend = "gguf"
scheme = "auto"
name = "tiny-fast"
ladder = ["Q4_K_M", "Q8_0", "F16"]
objective = "fastest"
[targets.gates]
kld_mean_max = {KLD_BETWEEN_Q4_AND_Q8}
{GATES}{VALIDATION}{TINY_BENCH}"""


def test_objective_fastest_benches_the_passing_candidates(
    levers: tuple[BuildResult, dict], sharp_model: Path, tmp_path: Path, stage_cache_root: Path
) -> None:
    result = _build(tmp_path / "project", sharp_model, FASTEST_LADDER, stage_cache_root)
    report = json.loads((result.bundle / "report.json").read_text())
    (ladder,) = report["ladders"]
    speeds = {c["label"]: c["decode_tok_s"] for c in ladder["candidates"]}
    assert speeds["Q4_K_M"] is None and speeds["Q8_0"] and speeds["F16"]  # only the passing ones are benched
    assert ladder["kept"] == max(("Q8_0", "F16"), key=lambda label: speeds[label])
    assert "decodes fastest" in ladder["reason"] and _artifact(report, "tiny-fast")["scheme"] == ladder["kept"]


@pytest.fixture(scope="module")
def box_bench(levers: tuple[BuildResult, dict], sharp_model: Path, tmp_path_factory: pytest.TempPathFactory,
              stage_cache_root: Path) -> dict:  # fmt: skip
    """`edgekit bench BUNDLE --json` of a bundle holding the ladder's passing schemes as explicit targets, as a
    box would measure it (here, on this machine: the test is about the matching, not the speed)."""
    targets = "".join(f'[[targets]]\nbackend = "gguf"\nscheme = "{s}"\nrequired = false\n' for s in ("Q8_0", "F16"))
    recipe = f'[model]\nsource = "model"\n{targets}{VALIDATION}{TINY_BENCH}'
    result = _build(tmp_path_factory.mktemp("box-bundle") / "project", sharp_model, recipe, stage_cache_root)
    proc = subprocess.run([sys.executable, "-m", "edgekit", "bench", str(result.bundle), "--json"],
                          capture_output=True, text=True, timeout=600, env=cli_env(stage_cache_root))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_objective_fastest_ranks_by_the_box_results_file_and_benches_nothing_here(
    box_bench: dict, sharp_model: Path, tmp_path: Path, stage_cache_root: Path
) -> None:
    from edgekit.runtime.bench.box_results import BoxResults
    from tests.support.tiny_project import make_project

    files = box_bench["bundle"]["artifact_sha256"]
    assert set(files) == {"gguf-Q8_0", "gguf-F16"}
    for slower, faster in (("gguf-F16", "gguf-Q8_0"), ("gguf-Q8_0", "gguf-F16")):  # the file decides, both ways
        doc = json.loads(json.dumps(box_bench))
        doc["artifacts"][faster]["decode_tok_s"] = 10 * doc["artifacts"][slower]["decode_tok_s"]
        path = tmp_path / f"box-{faster}.json"
        path.write_text(json.dumps(doc))
        project = make_project(tmp_path / f"project-{faster}", sharp_model, FASTEST_LADDER)
        result = build(load_recipe(project / "recipe.toml"), cache=StageCache(stage_cache_root),
                       progress=SilentProgress(), project=project, box_results=BoxResults.load([path]))  # fmt: skip
        (ladder,) = json.loads((result.bundle / "report.json").read_text())["ladders"]
        kept = faster.removeprefix("gguf-")
        assert ladder["kept"] == kept and "decodes fastest on the box x86_64" in ladder["reason"], ladder["reason"]
        measured = {c["label"]: c["measured_on"] for c in ladder["candidates"]}
        assert measured["Q4_K_M"] is None and str(path) in measured["Q8_0"] and str(path) in measured["F16"]
        md = (result.bundle / "report.md").read_text()
        assert "decode tok/s, on the box x86_64" in md


def test_box_results_measured_under_emulation_or_without_files_are_refused(box_bench: dict, tmp_path: Path) -> None:
    from edgekit.errors import UsageError
    from edgekit.runtime.bench.box_results import BoxResults

    emulated = json.loads(json.dumps(box_bench))
    emulated["machine"]["emulated"] = True
    (tmp_path / "emulated.json").write_text(json.dumps(emulated))
    with pytest.raises(UsageError, match="measured under emulation"):
        BoxResults.load([tmp_path / "emulated.json"])
    anonymous = json.loads(json.dumps(box_bench))
    del anonymous["bundle"]["artifact_sha256"]
    (tmp_path / "anonymous.json").write_text(json.dumps(anonymous))
    with pytest.raises(UsageError, match="does not say which model files it measured"):
        BoxResults.load([tmp_path / "anonymous.json"])


def test_box_results_without_a_fastest_ladder_are_refused(levers: tuple[BuildResult, dict], box_bench: dict,
                                                          tmp_path: Path, stage_cache_root: Path) -> None:  # fmt: skip
    from edgekit.errors import UsageError
    from edgekit.plan.make import make_plan
    from edgekit.runtime.bench.box_results import BoxResults

    (tmp_path / "box.json").write_text(json.dumps(box_bench))
    project = levers[0].bundle.parent.parent
    with pytest.raises(UsageError, match='objective = "fastest"; this recipe has none'):
        make_plan(load_recipe(project / "recipe.toml"), cache_root=stage_cache_root,
                  box_results=BoxResults.load([tmp_path / "box.json"]))  # fmt: skip


def test_plan_lists_every_candidate_of_the_ladder_in_order(levers: tuple[BuildResult, dict], stage_cache_root: Path
                                                          ) -> None:  # fmt: skip
    from edgekit.plan.describe import describe
    from edgekit.plan.make import make_plan

    project = levers[0].bundle.parent.parent
    plan = make_plan(load_recipe(project / "recipe.toml"), cache_root=stage_cache_root)
    tasks = describe(plan, StageCache(stage_cache_root))["tasks"]
    rungs = [(t["ladder"]["candidate"], t["stage"]) for t in tasks if t.get("ladder", {}).get("target") == "tiny-auto"]
    # Q4_K_M's tasks are tiny-budget's (same keys: sensitivity never enters a quantize key), listed already
    # and Q8_0's quantize is the sensitivity base of tiny-levers (Q8_0, default options): listed already too
    assert rungs == [("Q8_0", "validate"), ("F16", "quantize"), ("F16", "validate")]
    imatrix = next(t for t in tasks if t["stage"] == "imatrix")
    start, end = imatrix["inputs"]["calibration"]["range"]  # past the 512 scored tokens: 4 windows of 128, + 64
    assert start >= 512 and end - start == 4 * 128 + 64 and imatrix["cached"]


def test_a_pattern_matching_no_tensor_of_a_checkpoint_folder_is_refused_before_work(
    sharp_model: Path, tmp_path: Path
) -> None:
    """The tensor names come from a dry run of llama.cpp's converter on the folder: nothing converted or written."""
    from edgekit.errors import RecipeError
    from edgekit.plan.make import make_plan
    from tests.support.tiny_project import make_project

    recipe = '[model]\nsource = "model"\n[[targets]]\nbackend = "gguf"\nscheme = "Q4_K_M"\n[targets.options]\n'
    recipe += 'tensor_overrides = [{ pattern = "attn_qq", type = "Q8_0" }]\n'
    project = make_project(tmp_path / "project", sharp_model, recipe)
    with pytest.raises(RecipeError) as caught:
        make_plan(load_recipe(project / "recipe.toml"), cache_root=tmp_path / "cache")
    (problem,) = caught.value.problems
    assert problem.key == "targets[0].options.tensor_overrides[0].pattern" and problem.suggestion == "attn_q.weight"
    assert "matches no tensor of this model" in problem.problem and not (tmp_path / "cache").exists()
