"""Shared fixtures. Unit tests run in seconds (`pytest -m "not e2e"`); e2e tests use real models.

The contract and e2e suites share one stage cache per session (`stage_cache_root`, tests/support/stage_cache.py):
each test is handed it, or a cache of its own, explicitly.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgekit.store.cache import StageCache
from tests.support.stage_cache import shared_root


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A guard, not a cache to use: what a test runs without naming a cache gets an empty one, never the user's."""
    if "EDGEKIT_TEST_KEEP_CACHE" not in os.environ:
        monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="session")
def stage_cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one stage cache of the contract and e2e suites: SmolLM2's stages are built once per session."""
    return shared_root(tmp_path_factory)


@pytest.fixture
def stage_cache(stage_cache_root: Path) -> StageCache:
    """The shared cache, opened for this test (its `events` are this test's own)."""
    return StageCache(stage_cache_root)
