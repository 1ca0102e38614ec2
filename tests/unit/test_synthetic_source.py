"""synthetic://: the URI's forms and errors, the shape's parameter count, weights deterministic from the seed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from edgekit._util.hashing import sha256_file
from edgekit.errors import SourceError, UsageError
from edgekit.sources.synthetic import PRESETS, Shape, config, parse, tensor_layout, write_weights


def test_presets_explicit_shapes_and_overrides() -> None:
    one = parse("synthetic://llama?params=1B")
    assert (one.arch, one.shape, one.seed, one.name) == ("llama", PRESETS["1B"], 0, "synthetic-llama-1B")
    assert round(one.parameters(49152) / 1e9, 2) == 1.07  # the 1.07B Llama: hidden 2048, 16 layers
    assert parse("synthetic://qwen2?params=0.5b&seed=7").seed == 7
    explicit = parse("synthetic://mistral?hidden=256&layers=2&heads=4")
    assert explicit.shape == Shape(hidden=256, layers=2, heads=4, kv_heads=4, intermediate=1024)
    assert explicit.label is None and explicit.name == "synthetic-mistral-custom"
    assert parse("synthetic://llama?params=1B&layers=4").shape.layers == 4  # a preset with an override


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("synthetic://lama?params=1B", "did you mean 'llama'"),
        ("synthetic://llama?params=2B", "not a preset size"),
        ("synthetic://llama?parms=1B", "did you mean 'params'"),
        ("synthetic://llama", "no size"),
        ("synthetic://llama?hidden=100&layers=2&heads=3", "not an even multiple"),
        ("synthetic://llama?hidden=256&layers=2&heads=4&kv_heads=3", "not a multiple of kv_heads"),
        ("synthetic://llama?params=1B&seed=x", "not an integer"),
        ("synthetic://llama?params=1B&layers=0", "out of range"),
    ],
)
def test_bad_uris_say_what_is_wrong(uri: str, says: str) -> None:
    with pytest.raises(SourceError, match=says):
        parse(uri)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_the_parameter_count_is_the_layout_and_the_config_matches(arch: str) -> None:
    spec = parse(f"synthetic://{arch}?hidden=256&layers=3&heads=4&kv_heads=2&intermediate=512")
    layout = tensor_layout(spec, 1000)
    assert sum(int(np.prod(shape)) for _, shape in layout) == spec.parameters(1000)
    assert any(name.endswith("q_proj.bias") for name, _ in layout) == (arch == "qwen2")
    body = config(spec, 1000, 1, 2)
    assert (body["num_key_value_heads"], body["head_dim"], body["tie_word_embeddings"]) == (2, 64, True)


def test_weights_are_deterministic_from_the_seed(tmp_path: Path) -> None:
    spec = parse("synthetic://llama?hidden=64&layers=1&heads=2&intermediate=128")
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        (tmp_path / name).mkdir()
        written = write_weights(parse(f"synthetic://llama?hidden=64&layers=1&heads=2&intermediate=128&seed={seed}"),
                                100, tmp_path / name)  # fmt: skip
    assert written["parameters"] == spec.parameters(100) and written["shards"] == 1
    digests = [sha256_file(tmp_path / n / "model.safetensors") for n in "abc"]
    assert digests[0] == digests[1] != digests[2]
    from safetensors.numpy import load_file

    tensors = load_file(tmp_path / "a" / "model.safetensors")
    assert tensors["model.norm.weight"].tolist() == [1.0] * 64
    weights = tensors["model.layers.0.mlp.up_proj.weight"].astype(np.float64)
    assert weights.dtype == np.float64 and abs(weights.std() - 0.02) < 0.002 and abs(weights.mean()) < 0.002


def test_probe_recipe_sizes_and_schemes() -> None:
    from edgekit.diagnose.probe import probe_recipe

    recipe, command = probe_recipe("3b", ["Q4_K_M", "openvino:INT8"], runs=2)
    assert recipe.spec.model.source == "synthetic://llama?params=3B" and recipe.name == "probe-3b"
    assert [(t.backend, t.scheme) for t in recipe.targets] == [("gguf", "Q4_K_M"), ("openvino", "INT8")]
    assert not recipe.spec.validation.enabled and recipe.spec.bench.runs == 2 and recipe.spec.bench.peer
    assert command == "edgekit probe --params 3B --arch llama --schemes Q4_K_M,openvino:INT8 --runs 2"
    with pytest.raises(UsageError, match="say which: onnxruntime:INT8, openvino:INT8"):
        probe_recipe(schemes=["INT8"])
    with pytest.raises(UsageError, match=r"use one of 0\.5B, 1B, 3B, 7B"):
        probe_recipe(params="2B")


def test_the_shipped_probe_recipe_is_the_packaged_one() -> None:
    root = Path(__file__).resolve().parents[2]
    shipped = (root / "recipes" / "probe-1b.toml").read_text()
    assert shipped == (root / "edgekit" / "recipes" / "probe-1b.toml").read_text()
    assert tomllib.loads(shipped)["model"]["source"] == "synthetic://llama?params=1B"


def test_a_synthetic_checkpoint_is_sized_for_the_cluster_before_it_exists() -> None:
    from edgekit.plan.tasks import FetchTask, sized_by_model

    spec = parse("synthetic://llama?params=1B")
    fetch = FetchTask(uri="synthetic://llama?params=1B", revision=None, files=(), allow_pickle=False,
                      kind="synthetic", synthetic=spec)  # fmt: skip
    need = sized_by_model(fetch, threads=2)
    # float16 weights of about 1.2B parameters; converting them holds 1.5 times that
    assert spec.weight_bytes() == 2 * spec.parameters(49152)
    assert need.cpus == 2 and need.memory_mib == 3 * spec.weight_bytes() // 2**20 > 3000
