"""convert: the checkpoint into each backend's unquantized form (GGUF F16, OpenVINO/ONNX FP model).

Cached per (checkpoint, backend, converter versions, provenance): every target of a backend
quantizes from the same converted model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from edgekit.backends import get_backend
from edgekit.backends.base import BuildEnv, Checkpoint
from edgekit.cache import CacheEntry, StageCache
from edgekit.progress import Progress

STAGE = "convert"


def model_name(uri: str) -> str:
    """A model name from the source alone, so renaming a bundle does not invalidate conversions."""
    stem = uri.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"\.(gguf|safetensors)$", "", stem, flags=re.I) or "model"


def provenance(checkpoint: Checkpoint, model_section_sha256: str) -> dict[str, str]:
    """Metadata written into converted models (GGUF keys; other backends keep it in their config)."""
    from edgekit import __version__

    values = {
        "name": model_name(checkpoint.uri),
        "general.source.url": checkpoint.uri,
        "general.quantized_by": f"edgekit {__version__}",
        "edgekit.version": __version__,
        "edgekit.source.uri": checkpoint.uri,
        "edgekit.source.revision": checkpoint.revision or "",
        "edgekit.source.checkpoint_key": checkpoint.key,
        "edgekit.recipe.model_sha256": model_section_sha256,
    }
    if checkpoint.uri.startswith("hf://"):
        values["general.source.repo_url"] = "https://huggingface.co/" + checkpoint.uri.removeprefix("hf://")
    if checkpoint.reconstructed_from:
        values["edgekit.source.reconstructed_from"] = checkpoint.reconstructed_from
    return values


def run(
    backend_name: str,
    checkpoint: Checkpoint,
    env: BuildEnv,
    cache: StageCache,
    progress: Progress,
    meta: dict[str, str],
) -> CacheEntry:
    backend = get_backend(backend_name)
    backend.require()
    inputs: dict[str, Any] = {
        "checkpoint": checkpoint.key,
        "backend": backend_name,
        "versions": backend.versions(env),
        "provenance": meta,
    }

    def produce(out: Path) -> dict[str, Any]:
        backend.convert(checkpoint, out, env, progress, meta)
        return {"backend": backend_name}

    entry = cache.get_or_produce(STAGE, inputs, produce)
    if entry.reused:
        progress.log(f"convert: reusing {backend_name} conversion {entry.key[:12]}")
    return entry
