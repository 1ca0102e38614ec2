"""Shared fixtures. Unit tests run in seconds (`pytest -m "not e2e"`); e2e tests use real models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests never touch the user's cache; e2e fixtures set their own shared cache."""
    if "EDGEKIT_TEST_KEEP_CACHE" not in os.environ:
        monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path_factory.mktemp("cache")))
