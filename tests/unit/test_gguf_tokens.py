"""Any GGUF from the Hub: a GGUF whose tokenizer, as transformers rebuilds it from the metadata, cuts text otherwise
than llama.cpp reads the file (as published Gemma 3 GGUFs do) builds its GGUF targets without a tokenizer option.

The source is a tiny random-weight Gemma 3 with a SentencePiece unigram vocabulary trained here, written as a GGUF
by llama.cpp's own converter: transformers rebuilds that vocabulary as a unigram model (Viterbi), llama.cpp
tokenizes it by merging pieces by score, and the two disagree within the first few tokens. GGUF targets are scored
on llama.cpp's ids (the torch reference reads only ids); an OpenVINO target, which would export the rebuilt
tokenizer, is refused alone with the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomli_w

from edgekit.errors import RecipeError
from edgekit.manifest import verify_bundle
from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import BuildResult, build
from edgekit.plan.describe import describe
from edgekit.plan.make import make_plan
from edgekit.recipe.load import load_recipe
from edgekit.recipe.schema import ValidationSection
from edgekit.signoff.evaldata import first_difference, load_text
from edgekit.signoff.gates import Verdict
from edgekit.sources.gguf import hf_tokenizer_from_gguf, llama_cpp_tokenize
from edgekit.sources.tokenizer import TokenizerKind
from edgekit.store.cache import StageCache
from tests.support.arch_zoo import ARCHES, Arch, make_model, to_gguf

GEMMA3_UNIGRAM = Arch("gemma3_text", "spm-unigram", ARCHES["gemma3_text"].config, "Gemma 3, unigram vocabulary")
VALIDATION = {"max_tokens": 1024, "context_length": 128, "noise_floor_dtype": "none", "bootstrap_resamples": 100,
              "cloze": {"items": 20, "min_word_chars": 3}}  # fmt: skip
GGUF_TARGETS = [{"backend": "gguf", "scheme": "Q8_0"}, {"backend": "gguf", "scheme": "F16"}]
FIX = "give the model's original tokenizer in [model] tokenizer"
LLAMA_CPP = "llama.cpp (source GGUF)"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gemma3-unigram")
    make_model(GEMMA3_UNIGRAM, root / "model")
    return to_gguf(root / "model", root / "gemma3-unigram.gguf")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> StageCache:
    """One stage cache for the module: the GGUF-only build and the one with an OpenVINO target share their stages."""
    return StageCache(tmp_path_factory.mktemp("stages"))


@pytest.fixture
def eval_text() -> str:
    return load_text(ValidationSection().text, Path.cwd()).text


def write_recipe(project: Path, source: Path, targets: list[dict[str, object]]) -> Path:
    recipe = {"model": {"source": str(source)}, "targets": targets, "validation": VALIDATION,
              "bench": {"enabled": False}, "bundle": {"name": project.name}}  # fmt: skip
    project.mkdir(parents=True, exist_ok=True)
    (project / "recipe.toml").write_text(tomli_w.dumps(recipe))
    return project / "recipe.toml"


def build_recipe(recipe: Path, cache: StageCache, out: Path) -> BuildResult:
    return build(load_recipe(recipe), cache=cache, progress=SilentProgress(), out_dir=out, project=recipe.parent)


def test_the_rebuilt_tokenizer_and_llama_cpp_disagree(source: Path, eval_text: str) -> None:
    rebuilt = list(hf_tokenizer_from_gguf(source)(eval_text, add_special_tokens=False).input_ids)
    own = llama_cpp_tokenize(source, eval_text)
    position = first_difference(own, rebuilt)
    assert position is not None and position < 50, (position, own[:10], rebuilt[:10])


def test_gguf_targets_build_and_sign_off_on_llama_cpp_ids(source: Path, eval_text: str, cache: StageCache,
                                                           tmp_path: Path) -> None:  # fmt: skip
    recipe = write_recipe(tmp_path / "gguf-only", source, GGUF_TARGETS)
    plan = make_plan(load_recipe(recipe), cache_root=cache.root)
    assert plan.reference is not None and plan.reference.eval.tokenizer is TokenizerKind.LLAMA_CPP
    ids = plan.reference.eval.ids.array().tolist()
    assert len(ids) == VALIDATION["max_tokens"] and ids == llama_cpp_tokenize(source, eval_text)[: len(ids)]
    assert plan.reference.eval.cloze, "cloze items come from llama.cpp's token offsets too"
    assert describe(plan, cache)["tokenizer"] == LLAMA_CPP

    result = build_recipe(recipe, cache, tmp_path / "dist")
    manifest = verify_bundle(result.bundle)
    report = json.loads((result.bundle / "report.json").read_text())
    assert manifest["eval_tokenizer"] == LLAMA_CPP and report["signoff"]["eval_data"]["tokenizer"] == LLAMA_CPP
    assert f"Tokenizer of the ids: {LLAMA_CPP}" in (result.bundle / "report.md").read_text()
    assert set(result.verdicts) == {"gguf-Q8_0", "gguf-F16"} and not result.failed_required, result.verdicts
    for row in report["artifacts"]:
        assert row["verdict"] == Verdict.PASS and row["tokenizer_check"]["identical"], row
        assert row["metrics"]["kld_mean"]["value"] < 0.002, row["metrics"]["kld_mean"]


def test_an_openvino_target_is_refused_alone_with_the_fix(source: Path, cache: StageCache, tmp_path: Path) -> None:
    openvino = {"backend": "openvino", "scheme": "INT8", "required": False}
    recipe = write_recipe(tmp_path / "with-openvino", source, [GGUF_TARGETS[0], openvino])
    plan = make_plan(load_recipe(recipe), cache_root=cache.root)
    (skipped,) = describe(plan, cache)["skipped"]
    assert skipped["backend"] == "openvino" and FIX in skipped["reason"] and "first difference at token" in skipped[
        "reason"]  # fmt: skip
    assert [t.name for t in plan.bundle.targets] == ["gguf-Q8_0"]
    assert plan.reference is not None and plan.reference.eval.tokenizer is TokenizerKind.LLAMA_CPP

    result = build_recipe(recipe, cache, tmp_path / "dist")
    assert list(result.skipped) == ["openvino-INT8"] and FIX in result.skipped["openvino-INT8"]
    rows = {r["name"]: r for r in json.loads((result.bundle / "report.json").read_text())["artifacts"]}
    assert rows["gguf-Q8_0"]["verdict"] == Verdict.PASS, rows["gguf-Q8_0"]
    assert rows["openvino-INT8"]["verdict"] == Verdict.NOT_BUILT, rows["openvino-INT8"]

    required = write_recipe(tmp_path / "required", source, [GGUF_TARGETS[0], {**openvino, "required": True}])
    with pytest.raises(RecipeError) as refused:
        make_plan(load_recipe(required), cache_root=cache.root)
    (problem,) = refused.value.problems
    assert problem.key == "targets[1].backend" and FIX in problem.problem


def test_the_reference_key_changes_with_the_tokenizer_of_its_ids(source: Path, cache: StageCache, tmp_path: Path
                                                                   ) -> None:  # fmt: skip
    import dataclasses

    plan = make_plan(load_recipe(write_recipe(tmp_path / "p", source, GGUF_TARGETS[:1])), cache_root=cache.root)
    assert plan.reference is not None
    same_ids = dataclasses.replace(plan.reference.eval, tokenizer=TokenizerKind.HUGGING_FACE)
    assert dataclasses.replace(plan.reference, eval=same_ids).key != plan.reference.key


def test_token_offsets_are_characters_of_the_text_as_a_hugging_face_tokenizer_gives_them() -> None:
    from edgekit.errors import SourceError
    from edgekit.sources.gguf import char_offsets

    text = "a café ☃"
    pieces = [b" a", b" caf", "é".encode()[:1], "é".encode()[1:], b" ", "☃".encode()]  # a space prefix, byte tokens
    assert char_offsets(text, pieces) == [(0, 1), (1, 5), (5, 6), (5, 6), (6, 7), (7, 8)]
    assert char_offsets(text, [t.encode() for t in ("a", " café", " ☃")]) == [(0, 1), (1, 6), (6, 8)]
    with pytest.raises(SourceError, match="do not spell the text back"):
        char_offsets(text, [b"A", b" cafe", b" x"])
