"""recipes/all-backends.toml: GGUF, OpenVINO INT8/INT4 and ONNX Runtime INT8 in one bundle, one reference.

The bench is switched off here (it has its own tests); everything else is the recipe as shipped. The
OpenVINO and ONNX Runtime artifacts also serve logprobs through the `openai` SDK, checked against the sign-off's
scoring of the same tokens.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
import tomli_w

from edgekit.manifest import LOCAL_RUNTIME, verify_bundle
from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import BuildResult, build
from edgekit.recipe.load import Recipe, load_recipe
from edgekit.runtime.loader import open_bundle
from edgekit.signoff.metrics import log_softmax
from edgekit.store.cache import StageCache
from tests.support.live_serve import live_server

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


# --- logprobs served by the OpenVINO and ONNX Runtime engines, against the sign-off's scoring -------------

PROMPT = "The capital of France is"
STEPS, TOP = 6, 3
# OpenVINO's CPU plugin, with these, computes a decode step as it computes a prompt chunk (its defaults on a
# bf16-capable CPU round them differently: docs/box.md#logprobs-and-the-engines-numerics).
SAME_ROUNDING = {"inference_precision": "f32", "kv_cache_precision": "f32", "dynamic_quantization_group_size": 0}


def served_logprobs(bundle: Path, artifact: str) -> Any:
    """The artifact's completion logprobs through the SDK; its server also refuses what the engine cannot do."""
    log = bundle.parent / f"serve-{artifact}.log"
    with (
        live_server(bundle, log, args=["--artifact", artifact]) as url,
        openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0) as client,
    ):
        model = client.models.list().data[0].id
        answer = client.completions.create(model=model, prompt=PROMPT, max_tokens=STEPS, temperature=0, logprobs=TOP)
        refused_without_grammars(client, model, artifact.split("-")[0])
    logprobs = answer.choices[0].logprobs
    assert logprobs is not None and logprobs.token_logprobs is not None and logprobs.top_logprobs is not None
    assert "".join(logprobs.tokens or []) == answer.choices[0].text
    return logprobs


def refused_without_grammars(client: openai.OpenAI, model: str, backend: str) -> None:
    """A structured `response_format` and `tools` need a grammar: a 400 naming the engine, not free text."""
    schema = {"type": "json_schema", "json_schema": {"name": "city", "schema": {"type": "object"}}}
    tool = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    messages: Any = [{"role": "user", "content": "Paris?"}]
    for param, extra in (("response_format", {"response_format": schema}), ("tools", {"tools": [tool]})):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model=model, messages=messages, max_tokens=4, **extra)  # type: ignore[call-overload]
        assert f"`{param}` is not supported by the {backend} engine" in info.value.message


def scored(bundle: Path, artifact: str, text: str, overrides: dict[str, Any] | None = None) -> np.ndarray:
    """The sign-off's log-softmax over the prompt and `text` in one call: row i scores generated token i."""
    engine = open_bundle(bundle, artifact=artifact, overrides=overrides).engine
    try:
        prompt_ids = list(engine.tokenize(PROMPT))
        ids = [*prompt_ids, *engine.tokenize(text)]
        return log_softmax(engine.logits(ids)[len(prompt_ids) - 1 : -1])
    finally:
        engine.close()


def scored_top(logp: np.ndarray, top: dict[str, float]) -> None:
    """A reported top list (token text → logprob) is the scored distribution's top: its values, in order."""
    assert np.allclose(sorted(top.values(), reverse=True), np.sort(logp)[::-1][:TOP], atol=1e-4)


def test_openvino_logprobs_equal_the_scored_ones_when_it_rounds_both_paths_alike(
    all_backends: BuildResult, tmp_path: Path
) -> None:
    bundle = tmp_path / all_backends.bundle.name
    shutil.copytree(all_backends.bundle, bundle, copy_function=os.link)
    (bundle / LOCAL_RUNTIME).write_text(tomli_w.dumps({"runtime": SAME_ROUNDING}))
    logprobs = served_logprobs(bundle, "openvino-INT8")
    expected = scored(bundle, "openvino-INT8", "".join(logprobs.tokens), SAME_ROUNDING)
    assert len(expected) == STEPS
    for got, top, logp in zip(logprobs.token_logprobs, logprobs.top_logprobs, expected, strict=True):
        assert abs(got - logp.max()) <= 1e-4  # greedy: the scored argmax, at its scored value
        scored_top(logp, top)


@pytest.mark.parametrize("artifact", ["openvino-INT8", "onnxruntime-INT8"])
def test_default_rounding_gives_the_prompts_token_as_scored_and_a_log_softmax_after(
    all_backends: BuildResult, artifact: str
) -> None:
    """With the runtimes' defaults the first generated token comes from a prefill of the prompt on both paths;
    the later ones from decode steps, which round differently (measured by scripts/logprob_paths.py)."""
    bundle = all_backends.bundle
    logprobs = served_logprobs(bundle, artifact)
    engine = open_bundle(bundle, artifact=artifact).engine
    try:
        first = log_softmax(engine.logits(list(engine.tokenize(PROMPT)))[-1])
    finally:
        engine.close()
    assert abs(logprobs.token_logprobs[0] - first.max()) <= 1e-5
    scored_top(first, logprobs.top_logprobs[0])
    for got, top in zip(logprobs.token_logprobs, logprobs.top_logprobs, strict=True):
        values = sorted(top.values(), reverse=True)
        assert got == pytest.approx(values[0], abs=1e-6) and sum(np.exp(values)) <= 1 + 1e-5  # greedy, a distribution
