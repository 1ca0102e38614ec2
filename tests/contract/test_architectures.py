"""Every backend on every architecture of the zoo, from each source form (the matrix in arch_matrix.py).

Each (architecture, form) is one build of a recipe with all three backends as optional targets: what the
matrix says builds must be in the bundle, tokenize the eval text to the reference's ids, be validated and
generate from the bundle in a process without torch; what it says cannot build must be left out at
planning time, with a message naming the architecture and the backend. A GGUF source's artifacts keep the
source's tokenizer metadata key for key; when a GGUF's rebuilt tokenizer differs, its OpenVINO and ONNX Runtime
targets are refused in seconds until the recipe names the original tokenizer files, while its GGUF target builds
on llama.cpp's ids.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from edgekit.errors import RecipeError
from edgekit.manifest import verify_bundle
from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import BuildResult, build
from edgekit.recipe.load import load_recipe
from edgekit.store.cache import StageCache
from tests.support.arch_matrix import CASES, TARGETS, backends, cell
from tests.support.arch_zoo import ARCHES, make_model, to_gguf
from tests.support.hub_fixtures import publish_to_local_hub

VALIDATION = {"max_tokens": 512, "context_length": 128, "noise_floor_dtype": "none", "bootstrap_resamples": 100}
RUN_ALL = r"""
import json, re, sys
from pathlib import Path
from edgekit.runtime.engines.base import Sampling
from edgekit.runtime.loader import open_bundle

BUILD = re.compile(r"edgekit[.](stages|plan|pipeline|backends[.][a-z_]+[.](backend|child))([.]|$)")
bundle, out = Path(sys.argv[1]), {}
for name in sys.argv[2:]:
    engine = open_bundle(bundle, artifact=name, overrides={"n_threads": 2, "n_threads_batch": 2}, warm_up=False).engine
    prompt = engine.tokenize("It was a fine day, and")
    tokens = [engine.start(0, prompt, Sampling())] + [engine.step()[0] for _ in range(3)]
    engine.finish(0)
    out[name] = {"tokens": tokens, "expected_first": int(engine.logits(prompt)[-1].argmax())}
    engine.close()
out["heavy"] = sorted(m for m in sys.modules if m in ("torch", "transformers") or BUILD.match(m))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("zoo")
    for arch in ARCHES:
        make_model(arch, root / arch)
        if arch != "qwen2":
            to_gguf(root / arch, root / f"{arch}.gguf")
    return root


def write_recipe(project: Path, source: str, name: str, targets: list[dict[str, object]], **model: str) -> Path:
    recipe = {"model": {"source": source, **model}, "targets": targets, "validation": VALIDATION,
              "bench": {"enabled": False}, "bundle": {"name": name}}  # fmt: skip
    project.mkdir(parents=True, exist_ok=True)
    (project / "recipe.toml").write_text(tomli_w.dumps(recipe))
    return project / "recipe.toml"


def source_of(
    arch: str, form: str, zoo: Path, hub: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, dict[str, str]]:
    if form == "gguf":
        return str(zoo / f"{arch}.gguf"), {}
    if form == "folder":
        return str(zoo / arch), {}
    from huggingface_hub import constants

    publish_to_local_hub(zoo / arch, hub, f"edgekit-test/{arch.replace('_', '-')}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return f"hf://edgekit-test/{arch.replace('_', '-')}", {"revision": "main"}


def original_tokenizer(arch: str, zoo: Path, hub: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """`[model] tokenizer`: a folder for gemma3, an hf:// repository (a local Hub cache) for the others."""
    if arch == "gemma3_text":
        return {"tokenizer": str(zoo / arch)}
    from huggingface_hub import constants

    files = hub.parent / f"{arch}-tokenizer-only"
    files.mkdir()
    for path in (zoo / arch).glob("*token*"):
        (files / path.name).write_bytes(path.read_bytes())
    publish_to_local_hub(files, hub, f"edgekit-test/{arch}-tokenizer")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return {"tokenizer": f"hf://edgekit-test/{arch}-tokenizer", "tokenizer_revision": "main"}


def build_recipe(recipe: Path, cache: StageCache, out: Path) -> BuildResult:
    return build(load_recipe(recipe), cache=cache, progress=SilentProgress(), out_dir=out, project=recipe.parent)


@pytest.mark.parametrize(("arch", "form"), CASES, ids=[f"{a}-{f}" for a, f in CASES])
def test_every_backend_builds_or_is_refused_at_planning_time(
    arch: str, form: str, zoo: Path, stage_cache: StageCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, model = source_of(arch, form, zoo, tmp_path / "hub", monkeypatch)
    name = f"{arch}-{form}".replace("_", "-")
    targets = [{"backend": b, "scheme": TARGETS[b], "required": False} for b in backends(arch, form)]
    if needs := [b for b in TARGETS if cell(arch, form, b).tokenizer]:
        without = build_recipe(write_recipe(tmp_path / "without", source, name, targets, **model), stage_cache,
                               tmp_path / "dist-without")  # fmt: skip
        assert sorted(without.skipped) == sorted(f"{b}-{TARGETS[b]}" for b in needs), without.skipped
        for reason in without.skipped.values():
            assert "first difference at token" in reason and "original tokenizer in [model] tokenizer" in reason
        assert list(without.verdicts) == ["gguf-Q8_0"], without.verdicts  # scored on llama.cpp's ids
        model = {**model, **original_tokenizer(arch, zoo, tmp_path / "hub", monkeypatch)}
    result = build_recipe(write_recipe(tmp_path / "project", source, name, targets, **model), stage_cache,
                          tmp_path / "dist")  # fmt: skip
    bundle = result.bundle
    manifest = verify_bundle(bundle)
    built = {a["backend"]: a for a in manifest["artifacts"]}
    report = {a["name"]: a for a in json.loads((bundle / "report.json").read_text())["artifacts"]}
    for backend in backends(arch, form):
        expected = cell(arch, form, backend)
        if expected.builds:
            assert backend in built, (backend, result.skipped)
            row = report[built[backend]["name"]]
            assert row["tokenizer_check"]["identical"] and row["metrics"]["kld_mean"]["n"] >= 100, row
            # INT8 of a random model is nearly lossless: a larger KL means the reference computes another model
            # (a GGUF setting its reconstruction dropped, a tokenizer offset), which is what this must catch.
            assert row["metrics"]["kld_mean"]["value"] < 0.002, (backend, row["metrics"]["kld_mean"])
        else:
            (reason,) = [r for n, r in result.skipped.items() if n.startswith(f"{backend}-")]
            assert expected.why in reason and backend not in built
    ran = subprocess.run([sys.executable, "-c", RUN_ALL, str(bundle), *[a["name"] for a in built.values()]],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    assert out.pop("heavy") == []
    for name, generated in out.items():
        assert len(generated["tokens"]) == 4 and generated["tokens"][0] == generated["expected_first"], name


def test_a_required_target_the_backend_cannot_build_stops_the_plan(zoo: Path, stage_cache: StageCache,
                                                                    tmp_path: Path) -> None:  # fmt: skip
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(tomli_w.dumps({"model": {"source": str(zoo / "qwen2")},
                                     "targets": [{"backend": "gguf", "scheme": "Q8_0"}]}))  # fmt: skip
    with pytest.raises(RecipeError) as refused:
        build_recipe(recipe, stage_cache, tmp_path / "dist")
    message = str(refused.value)
    assert "targets[0].backend" in message and "gguf backend cannot build Qwen2ForCausalLM" in message
    assert "BPE pre-tokenizer was not recognized" in message and not (tmp_path / "dist").exists()


def test_gguf_artifacts_of_a_gguf_source_keep_its_metadata_key_for_key(zoo: Path, stage_cache: StageCache,
                                                                        tmp_path: Path) -> None:  # fmt: skip
    import gguf

    source = zoo / "llama.gguf"
    targets = [{"backend": "gguf", "scheme": s} for s in ("F16", "Q8_0", "Q4_K_M")]
    recipe = write_recipe(tmp_path / "project", str(source), "llama-keys", targets)
    result = build_recipe(recipe, stage_cache, tmp_path / "dist")

    def fields(path: Path) -> dict[str, bytes]:
        reader = gguf.GGUFReader(path)
        return {k: b"".join(bytes(p) for p in f.parts) for k, f in reader.fields.items() if not k.startswith("GGUF.")}

    original = fields(source)
    for artifact in verify_bundle(result.bundle)["artifacts"]:
        written = fields(result.bundle / artifact["path"])
        kept = {k for k in original if k.startswith(("tokenizer.", "llama.")) or k == "general.architecture"}
        assert kept and all(written[k] == original[k] for k in kept), artifact["name"]
