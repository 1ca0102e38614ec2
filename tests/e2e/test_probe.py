"""A synthetic:// source built and benchmarked end to end: random weights, a speed-only report, the peer row
(llama.cpp's llama-bench on the same file, in the same run) and both roofs. Tiny shape and one run: timings
are never asserted, only that every figure is there (or its absence is said) and follows the schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.runtime.bench.peer import find_tool
from edgekit.runtime.bench.schema import schema_problems
from edgekit.runtime.gguf_tensors import matmul_params_by_type
from tests.support.stage_cache import cli_env

RECIPE = """
[model]
source = "synthetic://llama?hidden=256&layers=2&heads=4&kv_heads=2&intermediate=512&seed=3"

[[targets]]
backend = "gguf"
scheme = "Q8_0"

[validation]
enabled = false

[bench]
prompt_tokens = 16
gen_tokens = 8
runs = 1
threads = [1]
concurrency = [1, 2]
bandwidth_mib = 16
loads = false
baseline = false

[bundle]
name = "synthetic-tiny"
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, stage_cache_root: Path) -> Path:
    project = tmp_path_factory.mktemp("probe")
    (project / "recipe.toml").write_text(RECIPE)
    proc = subprocess.run([sys.executable, "-m", "edgekit", "build", "recipe.toml", "--out", "dist"], cwd=project,
                          capture_output=True, text=True, timeout=1200,
                          env=cli_env(stage_cache_root))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return project / "dist" / "synthetic-tiny"


def test_the_report_says_speed_only(bundle: Path) -> None:
    report = json.loads((bundle / "report.json").read_text())
    assert "random weights (llama" in report["speed_only"] and "seed 3" in report["speed_only"]
    assert report["signoff"]["source"]["speed_only"] is True
    text = (bundle / "report.md").read_text()
    assert "**Speed only.**" in text and "Validation was disabled" not in text


def test_the_bench_has_the_peer_row_and_both_roofs(bundle: Path) -> None:
    bench = json.loads((bundle / "report.json").read_text())["bench"]
    assert schema_problems(bench) == []
    tiny = bench["artifacts"]["gguf-Q8_0"]
    assert tiny["ops_per_token"] > 2 * 12_000_000  # the tied 49,152 × 256 embedding is the output projection
    assert tiny["compute_roof_tok_s"] > 0 and tiny["roof_tok_s"] == min(tiny["compute_roof_tok_s"],
                                                                        tiny["roofline_tok_s"])  # fmt: skip
    assert tiny["bound_by"] in ("compute", "bandwidth")
    artifact = bundle / "models" / "gguf-Q8_0.gguf"
    assert set(tiny["compute_gops"]) == set(matmul_params_by_type(artifact))  # each type at its own kernel's rate
    tool, _ = find_tool()
    if tool is None:  # the toolchain has no llama-bench: the bench says so, with the command that builds it
        assert bench["peer"]["available"] is False and "edgekit toolchain --tools" in bench["peer"]["missing"]
    else:
        assert bench["peer"]["available"] and tiny["decode_over_peer"] > 0 and tiny["prompt_over_peer"] > 0
        settings = bench["peer"]["settings"]
        assert settings["decode"]["n_depth"] == 16  # decode after the prompt, as edgekit's
        assert settings["decode"]["repetitions"] == settings["prompt"]["repetitions"] == bench["settings"]["repeats"]
    runtime = (bundle / "runtime.toml").read_text()
    assert 'artifact = "gguf-Q8_0"' in runtime and "edgekit bench" in runtime
