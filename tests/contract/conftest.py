"""Fixtures for the backend contract suite: the real SmolLM2-135M checkpoint and its torch reference.

Every test here is end to end (marked e2e). Its stages go in the session's one stage cache
(`stage_cache_root`, shared with the e2e suite: the contract recipe's fetch, conversions and Q8_0/INT8 are
the default build's cache entries).
"""

from __future__ import annotations

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
def checkpoint(stage_cache_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    from edgekit.recipe.load import parse_recipe
    from tests.support.contract import recipe_text
    from tests.support.stage_runs import fetched

    path = tmp_path_factory.mktemp("recipe") / "recipe.toml"
    path.write_text(recipe_text("gguf", "Q8_0"))
    return fetched(parse_recipe(path.read_bytes(), path), StageCache(stage_cache_root))


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
