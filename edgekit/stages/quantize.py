"""quantize: each target's scheme from its backend's converted model. One cache entry per target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.backends import get_backend
from edgekit.backends.base import Artifact, BuildEnv
from edgekit.cache import CacheEntry, StageCache
from edgekit.progress import Progress
from edgekit.recipe import Target

STAGE = "quantize"


def run(
    target: Target,
    converted: CacheEntry,
    env: BuildEnv,
    cache: StageCache,
    progress: Progress,
    calibration_text: str | None = None,
) -> Artifact:
    backend = get_backend(target.backend)
    inputs: dict[str, Any] = {
        "converted": converted.key,
        "backend": target.backend,
        "scheme": target.scheme,
        "options": target.options.model_dump(mode="json"),
        "versions": backend.versions(env),
    }
    if calibration_text is not None:
        from edgekit.hashing import sha256_text

        inputs["calibration_sha256"] = sha256_text(calibration_text)

    def produce(out: Path) -> dict[str, Any]:
        relpath, details = backend.quantize(
            converted.path, target.scheme, target.options, out, env, progress, calibration_text
        )
        return {"path": relpath, "details": details}

    entry = cache.get_or_produce(STAGE, inputs, produce)
    if entry.reused:
        progress.log(f"quantize: reusing {target.name} {entry.key[:12]}")
    return Artifact(
        name=target.name,
        backend=target.backend,
        scheme=target.scheme,
        path=entry.path / entry.result["path"],
        key=entry.key,
        details=entry.result["details"],
    )
