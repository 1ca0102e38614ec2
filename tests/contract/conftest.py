"""Fixtures for the backend contract suite: the real SmolLM2-135M checkpoint and its torch reference.

Every test here is end to end (marked e2e). `EDGEKIT_E2E_CACHE` points the stage cache at a warm
one (converted models and artifacts are reused); otherwise the session starts from an empty cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from edgekit.store.cache import StageCache
from edgekit.store.records import Checkpoint


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # This hook sees every collected item: mark only the tests under tests/contract/.
    here = Path(__file__).resolve().parent
    for item in items:
        if item.path.resolve().is_relative_to(here):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def contract_cache(tmp_path_factory: pytest.TempPathFactory) -> StageCache:
    root = Path(os.environ["EDGEKIT_E2E_CACHE"]) if "EDGEKIT_E2E_CACHE" in os.environ else None
    root = root or tmp_path_factory.mktemp("contract-cache")
    os.environ["EDGEKIT_CACHE"] = str(root)
    return StageCache(root)


@pytest.fixture(scope="session")
def checkpoint(contract_cache: StageCache, tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    from edgekit.recipe.load import parse_recipe
    from tests.support.contract import recipe_text
    from tests.support.stage_runs import fetched

    path = tmp_path_factory.mktemp("recipe") / "recipe.toml"
    path.write_text(recipe_text("gguf", "Q8_0"))
    return fetched(parse_recipe(path.read_bytes(), path), contract_cache)


@pytest.fixture(scope="session")
def reference(checkpoint: Checkpoint) -> list[tuple[str, list[int], np.ndarray]]:
    """The reference's token ids and float32 logits of each of REFERENCE_TEXTS (torch, CPU, FP32)."""
    from edgekit.reference.torch_runner import ReferenceDevice, TorchRunner
    from tests.support.contract import REFERENCE_TEXTS

    runner = TorchRunner(checkpoint.path, ReferenceDevice("cpu", "float32", "cpu"), threads=2)
    try:
        return [(text, ids, runner.logits(ids)) for text in REFERENCE_TEXTS for ids in [runner.tokenize(text)]]
    finally:
        runner.close()
