"""runtime.toml + runtime.local.toml: the local file overrides, bad values are refused, tune keeps a person's keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgekit.errors import RuntimeConfigError
from edgekit.manifest import verify_bundle
from edgekit.runtime.bench.derive import derive_runtime
from edgekit.runtime.bench.results import BenchResult
from edgekit.runtime.bench.tune import write_local
from edgekit.runtime.config import LOCAL_FILE, load_runtime_config, render_runtime_toml

BASE = {"artifact": "gguf-Q4_K_M", "n_threads": 4, "n_threads_batch": 8, "n_ctx": 2048, "numa": "auto"}


def write_base(tmp_path: Path) -> Path:
    (tmp_path / "runtime.toml").write_text(render_runtime_toml(BASE))
    return tmp_path


def test_local_file_overrides_the_signed_one(tmp_path: Path) -> None:
    bundle = write_base(tmp_path)
    assert load_runtime_config(bundle).n_threads == 4
    (bundle / LOCAL_FILE).write_text('[runtime]\nn_threads = 2\nnuma = "isolate"\nnuma_node = 1\n')
    config = load_runtime_config(bundle)
    assert (config.n_threads, config.n_threads_batch, config.numa, config.numa_node) == (2, 8, "isolate", 1)
    assert load_runtime_config(bundle, {"n_threads": 3, "n_ctx": None}).n_threads == 3


def test_bad_local_values_are_refused_naming_the_key(tmp_path: Path) -> None:
    bundle = write_base(tmp_path)
    (bundle / LOCAL_FILE).write_text("[runtime]\nmax_concurrent = 9\n")
    with pytest.raises(RuntimeConfigError, match="max_concurrent"):
        load_runtime_config(bundle)
    (bundle / LOCAL_FILE).write_text("[runtime\n")
    with pytest.raises(RuntimeConfigError, match="not valid TOML"):
        load_runtime_config(bundle)


def test_write_local_merges_keeps_other_keys_and_rolls_back_bad_values(tmp_path: Path) -> None:
    bundle = write_base(tmp_path)
    (bundle / LOCAL_FILE).write_text("[runtime]\nn_ctx = 1024\nnuma_node = 0\n")
    write_local(bundle, {"n_threads": 1, "n_threads_batch": 2, "numa": "none", "derived_from": "test"})
    config = load_runtime_config(bundle)
    assert (config.n_threads, config.n_threads_batch, config.n_ctx, config.numa_node) == (1, 2, 1024, None)
    before = (bundle / LOCAL_FILE).read_text()
    with pytest.raises(RuntimeConfigError):
        write_local(bundle, {"n_threads": 0})
    assert (bundle / LOCAL_FILE).read_text() == before


def test_the_local_file_leaves_a_bundle_verifiable(tmp_path: Path) -> None:
    from tests.support.tiny_gguf import write_tiny_bundle

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(64))
    bundle = write_tiny_bundle(tmp_path, model)
    write_local(bundle, {"n_threads": 1})
    verify_bundle(bundle)


def test_derive_runtime_takes_threads_mmap_and_concurrency_from_the_bench() -> None:
    bench = {
        "created": "2026-01-01T00:00:00Z",
        "machine": {"cpu_model": "Test CPU", "physical_cores": 4, "numa_nodes": 1},
        "artifacts": {
            "a": {
                "n_threads": 3,
                "n_threads_batch": 4,
                "decode_tok_s": 50.0,
                "decode_tok_s_by_threads": {"1": 20.0, "2": 40.0, "3": 50.0, "4": 49.0},
                "prompt_tok_s_by_threads": {"1": 100.0, "4": 380.0},
                "no_mmap_over_mmap_cold_first_token": 1.4,
                "decode_tok_s_by_sequences": {"1": 50.0, "2": 90.0, "4": 45.0},
            },
            "b": {"backend": "openvino", "skipped": "not measured"},
        },
    }
    values = derive_runtime(BenchResult.from_json(bench), "a", {"max_concurrent": 4, "derived_from": "recipe defaults"})
    assert values["n_threads"] == 3 and values["n_threads_batch"] == 4 and values["use_mmap"] is True
    assert values["max_concurrent"] == 2 and values["numa"] == "auto"  # batch 4 loses throughput here
    assert "Test CPU" in values["derived_from"] and "3: 50.0" in values["derived_from"]
    assert derive_runtime(BenchResult.from_json(bench), "b", {"derived_from": "recipe defaults"}) == {
        "derived_from": "recipe defaults; bench: not measured"
    }


def test_each_artifact_runs_with_what_the_bench_measured_for_it(tmp_path: Path) -> None:
    per_artifact = {"openvino-INT8": {"n_threads": 2, "n_threads_batch": 2, "max_concurrent": 4, "derived_from": "x"}}
    (tmp_path / "runtime.toml").write_text(
        render_runtime_toml({**BASE, "max_concurrent": 1, "artifacts": per_artifact})
    )
    default = load_runtime_config(tmp_path)
    assert (default.artifact, default.n_threads, default.max_concurrent) == ("gguf-Q4_K_M", 4, 1)
    other = load_runtime_config(tmp_path, artifact="openvino-INT8")
    assert (other.n_threads, other.n_threads_batch, other.max_concurrent, other.n_ctx) == (2, 2, 4, 2048)
    (tmp_path / LOCAL_FILE).write_text("[runtime]\nmax_concurrent = 2\n")  # a person's local choice still wins
    assert load_runtime_config(tmp_path, artifact="openvino-INT8").max_concurrent == 2
    with pytest.raises(ValueError):
        render_runtime_toml({**BASE, "artifacts": {"bad": {"max_concurrent": 9}}})


def test_the_box_local_file_is_held_to_the_schema_and_named_when_wrong(tmp_path: Path) -> None:
    """runtime.local.toml is outside the signature: it may only hold known [runtime] keys with valid values."""
    bundle = write_base(tmp_path)
    (bundle / LOCAL_FILE).write_text("[runtime]\nn_thread = 2\n")  # a typo: refused, not ignored
    with pytest.raises(RuntimeConfigError, match=r"runtime\.local\.toml: runtime\.n_thread: Extra inputs"):
        load_runtime_config(bundle)
    (bundle / LOCAL_FILE).write_text('[runtime]\nn_threads = 2\n[model]\npath = "/etc/shadow"\n')
    with pytest.raises(RuntimeConfigError, match=r"runtime\.local\.toml: holds \[model\] besides"):
        load_runtime_config(bundle)
    (bundle / LOCAL_FILE).write_text("runtime = 3\n")
    with pytest.raises(RuntimeConfigError, match=r"only a .runtime. table"):
        load_runtime_config(bundle)
