"""recipes/all-backends.toml: GGUF, OpenVINO INT8/INT4 and ONNX Runtime INT8 in one bundle, one reference.

The bench is switched off here (it has its own tests); everything else is the recipe as shipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgekit.manifest import verify_bundle
from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import BuildResult, build
from edgekit.recipe.load import Recipe, load_recipe
from edgekit.store.cache import StageCache

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "all-backends.toml"


@pytest.fixture(scope="module")
def all_backends(stage_cache_root: Path, tmp_path_factory: pytest.TempPathFactory) -> BuildResult:
    recipe = load_recipe(RECIPE)
    spec = recipe.spec.model_copy(update={"bench": recipe.spec.bench.model_copy(update={"enabled": False})})
    recipe = Recipe(recipe.path, recipe.sha256, recipe.text, spec, recipe.targets)
    return build(
        recipe, cache=StageCache(stage_cache_root), progress=SilentProgress(), out_dir=tmp_path_factory.mktemp("all")
    )


def test_one_bundle_has_a_verdict_for_each_backend(all_backends: BuildResult) -> None:
    manifest = verify_bundle(all_backends.bundle)
    names = [a["name"] for a in manifest["artifacts"]]
    assert names == ["gguf-Q4_K_M", "openvino-INT8", "openvino-INT4", "onnxruntime-INT8"]
    assert set(all_backends.verdicts) == set(names)
    assert all(v in ("pass", "fail", "inconclusive") for v in all_backends.verdicts.values())
    for record in manifest["artifacts"][1:]:
        assert (all_backends.bundle / record["path"]).is_dir() and record["tensor_types"]


def test_every_artifact_is_scored_on_the_same_reference_and_tokens(all_backends: BuildResult) -> None:
    report = json.loads((all_backends.bundle / "report.json").read_text())
    rows = {a["name"]: a for a in report["artifacts"]}
    n = {a["metrics"]["kld_mean"]["n"] for a in rows.values()}
    assert len(n) == 1 and n.pop() > 4000
    assert all(a["tokenizer_check"]["identical"] for a in rows.values())
    kld = {name: a["metrics"]["kld_mean"]["value"] for name, a in rows.items()}
    # the bar: NNCF INT8 below llama.cpp Q4_K_M on the default model
    assert kld["openvino-INT8"] < kld["gguf-Q4_K_M"]
    assert kld["openvino-INT8"] < kld["onnxruntime-INT8"] and kld["openvino-INT8"] < kld["openvino-INT4"]
    details = rows["onnxruntime-INT8"]["details"]
    assert details["kept_float"] and details["ops"]["MatMulInteger (int8 weights)"] > 150
    assert rows["openvino-INT4"]["details"]["calibration"]["samples"] == 64
