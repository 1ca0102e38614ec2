"""Q4_0 and IQ4_NL, the 4-bit formats llama.cpp repacks at load time for ARM's (and AVX2's) kernels, build and are
validated like every other GGUF scheme: written with their own tensor types, scored against the reference, judged
by their own default gates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from edgekit.backends.gguf.gates import DEFAULT_GATES
from tests.support.tiny_project import TINY_RECIPE, build_env, make_project

TARGETS = """
[[targets]]
backend = "gguf"
scheme = "Q4_0"
required = false

[[targets]]
backend = "gguf"
scheme = "IQ4_NL"
required = false
"""


def test_q4_0_and_iq4_nl_build_and_sign_off_like_the_other_schemes(
    tiny_model: Path, stage_cache_root: Path, llama_cpp_dir: Path, tmp_path: Path
) -> None:
    head, rest = TINY_RECIPE.split("[[targets]]", 1)
    recipe = head + TARGETS + rest[rest.index("[validation]") :]
    project = make_project(tmp_path / "project", tiny_model, recipe)
    done = subprocess.run([sys.executable, "-m", "edgekit", "build", "recipe.toml"], cwd=project,
                          env=build_env(stage_cache_root, llama_cpp_dir), capture_output=True, text=True,
                          timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((project / "dist" / "tiny" / "report.json").read_text())
    rows = {a["name"]: a for a in report["artifacts"]}
    assert set(rows) == {"gguf-Q4_0", "gguf-IQ4_NL"}
    for scheme, written in (("Q4_0", "Q4_0"), ("IQ4_NL", "IQ4_NL")):
        row = rows[f"gguf-{scheme}"]
        assert written in row["tensor_types"], row["tensor_types"]
        assert row["metrics"]["kld_mean"]["n"] > 0 and row["verdict"] in ("pass", "fail", "inconclusive")
        assert row["gates"]["kld_mean_max"] == DEFAULT_GATES[scheme].kld_mean_max
