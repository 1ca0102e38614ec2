"""Runtime engines. Each backend's engine lives in its own package (`edgekit.backends.<name>.engine`) and is
found through the backend registry, so a third-party backend's artifacts run, serve and bench like the
built-in ones; a box needs only its backend's packages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.registry import spec
from edgekit.runtime.engines.base import Engine, Sampling


def load_engine(backend: str, artifact: Path, bundle: Path | None, config: Any) -> Engine:
    """Load `artifact` with the engine of `backend`, configured by a RuntimeConfig."""
    return spec(backend).open_engine(artifact, bundle, config)


__all__ = ["Engine", "Sampling", "load_engine"]
