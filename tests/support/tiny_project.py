"""A tiny real model and recipe for fast end-to-end builds: 2-layer random Llama, SmolLM2's tokenizer.

A whole build (fetch → convert → Q8_0 → reference → validate → bundle, bench off) takes well under a
minute, so fault, serve and tamper tests can build real bundles with `edgekit build`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.stage_cache import cli_env

TINY_RECIPE = """
[model]
source = "model"

[[targets]]
backend = "gguf"
scheme = "Q8_0"
required = false  # a random model: its accuracy is not what these tests are about

[validation]
max_tokens = 512
context_length = 128
noise_floor_dtype = "none"
bootstrap_resamples = 100

[bench]
enabled = false

[bundle]
name = "tiny"
"""


# A bench of tiny models that takes seconds: one short run of one thread.
TINY_BENCH = """
[bench]
prompt_tokens = 16
gen_tokens = 8
runs = 1
threads = [1]
concurrency = [1]
baseline = false
loads = false
bandwidth_mib = 16
warmup_tokens = 0
"""


def make_project(root: Path, model: Path, recipe: str = TINY_RECIPE) -> Path:
    root.mkdir(parents=True)
    shutil.copytree(model, root / "model")
    (root / "recipe.toml").write_text(recipe)
    return root


def build_env(cache: Path, llama_cpp_dir: Path) -> dict[str, str]:
    """The environment of an `edgekit build` subprocess of a tiny project: its cache, the session's converter."""
    return cli_env(cache, EDGEKIT_LLAMA_CPP_DIR=str(llama_cpp_dir), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
