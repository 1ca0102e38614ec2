"""Runtime engines, one module per backend, imported lazily so a box needs only its backend's packages."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from edgekit.errors import MissingDependencyError, UsageError
from edgekit.runtime.engines.base import Engine, Sampling

ENGINES: dict[str, tuple[str, str]] = {
    # backend name → (module, pip extra that installs it)
    "gguf": ("edgekit.runtime.engines.gguf", "runtime"),
    "openvino": ("edgekit.runtime.engines.openvino", "runtime-openvino"),
    "onnxruntime": ("edgekit.runtime.engines.onnxruntime", "runtime-onnx"),
}


def load_engine(backend: str, artifact: Path, bundle: Path | None, config: Any) -> Engine:
    """Load `artifact` with the engine of `backend`, configured by a RuntimeConfig."""
    if backend not in ENGINES:
        raise UsageError(f"no runtime engine for backend {backend!r}", f"known: {', '.join(ENGINES)}")
    module_name, extra = ENGINES[backend]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise MissingDependencyError(f"the {backend} runtime ({exc.name})", extra) from None
    return module.open_engine(artifact, bundle, config)


__all__ = ["ENGINES", "Engine", "Sampling", "load_engine"]
