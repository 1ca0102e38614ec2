"""bundle: assemble dist/<name>/ in a temp folder and rename it into place when complete.

Layout:
    manifest.json        provenance, every file's size and sha256, artifacts, verdicts
    runtime.toml         threads, NUMA, mmap/mlock, context, batch, concurrency, warm-up
    run.sh               launcher: verifies, applies NUMA/threads, starts serve or run
    recipe.toml          the recipe this bundle was built from
    models/<artifact>    one file (GGUF) or folder (OpenVINO IR, ONNX) per artifact
    tokenizer/           the source tokenizer files and chat template
    report.json/.md/.html  the accuracy sign-off (and benchmark figures)
    Dockerfile.edge      a runtime image for this bundle
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import Any

from edgekit import __version__
from edgekit.backends.base import Artifact, Checkpoint
from edgekit.fsutil import ensure_free_space, staging_dir, write_json_atomic, write_text_atomic
from edgekit.hashing import file_records, sha256_json
from edgekit.manifest import MANIFEST, SCHEMA_VERSION
from edgekit.recipe import Recipe
from edgekit.runtime.config import render_runtime_toml
from edgekit.versions import dist_version

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "tokenizer.model", "vocab.json", "merges.txt", "generation_config.json", "config.json")  # fmt: skip
PACKAGE_FILES = Path(__file__).resolve().parent.parent / "bundle_files"


def tool_versions(extra: dict[str, str | None] | None = None) -> dict[str, str | None]:
    v = dist_version
    found: dict[str, str | None] = {
        "python": platform.python_version(),
        "edgekit": __version__,
        "torch": v("torch"),
        "transformers": v("transformers"),
        "tokenizers": v("tokenizers"),
        "huggingface-hub": v("huggingface-hub"),
        "llama-cpp-python": v("llama-cpp-python"),
        "gguf": v("gguf"),
        "numpy": v("numpy"),
    }
    for dist in ("openvino", "openvino-tokenizers", "nncf", "optimum", "optimum-intel",
                 "optimum-onnx", "onnx", "onnxruntime"):  # fmt: skip
        if (value := v(dist)) is not None:
            found[dist] = value
    found.update(extra or {})
    return found


def artifact_filename(artifact: Artifact) -> str:
    return f"{artifact.name}.gguf" if artifact.path.is_file() else artifact.name


def write_bundle(
    final: Path,
    recipe: Recipe,
    checkpoint: Checkpoint,
    artifacts: list[Artifact],
    runtime: dict[str, Any],
    versions: dict[str, str | None],
    write_reports: Any,  # callable(staging_dir, artifact records) -> None
    verdicts: dict[str, str],
) -> Path:
    """Write the bundle; `write_reports(tmp, records)` adds report files before the manifest is sealed."""
    ensure_free_space(final.parent, sum(a.size for a in artifacts) + 16 * 2**20)
    with staging_dir(final) as tmp:
        records = []
        for artifact in artifacts:
            rel = Path("models") / artifact_filename(artifact)
            _copy(artifact.path, tmp / rel)
            files = file_records(tmp / rel)
            records.append(
                {
                    "name": artifact.name,
                    "backend": artifact.backend,
                    "scheme": artifact.scheme,
                    "path": rel.as_posix(),
                    "size": sum(f["size"] for f in files),
                    "sha256": files[0]["sha256"] if artifact.path.is_file() else sha256_json(files),
                    "tensor_types": artifact.details.get("tensor_types", {}),
                    "bits_per_weight": artifact.details.get("bits_per_weight"),
                    "verdict": verdicts.get(artifact.name, "not validated"),
                    "details": {k: v for k, v in artifact.details.items() if k not in ("tensor_types",)},
                    "cache_key": artifact.key,
                }
            )
        for name in TOKENIZER_FILES:
            if (checkpoint.path / name).is_file():
                _copy(checkpoint.path / name, tmp / "tokenizer" / name)
        write_text_atomic(tmp / "recipe.toml", recipe.text)
        write_text_atomic(tmp / "runtime.toml", render_runtime_toml(runtime))
        for name in ("run.sh", "Dockerfile.edge"):
            if (PACKAGE_FILES / name).is_file():
                shutil.copyfile(PACKAGE_FILES / name, tmp / name)
        if (tmp / "run.sh").exists():
            (tmp / "run.sh").chmod((tmp / "run.sh").stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        write_reports(tmp, records)
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "edgekit_version": __version__,
            "name": final.name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "built_on": {"machine": platform.machine(), "system": platform.system(), "python": sys.version.split()[0]},
            "recipe": {"path": str(recipe.path), "sha256": recipe.sha256},
            "source": {
                "uri": checkpoint.uri,
                "revision": checkpoint.revision,
                "files": [f.__dict__ for f in checkpoint.files],
                "reconstructed_from": checkpoint.reconstructed_from,
                "notes": list(checkpoint.notes),
            },
            "artifacts": records,
            "default_artifact": runtime.get("artifact"),
            "versions": versions,
            "files": [r for r in file_records(tmp) if r["path"] != MANIFEST],
        }
        write_json_atomic(tmp / MANIFEST, manifest)
    return final


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=_copy_file)
    else:
        _copy_file(src, dst)


def _copy_file(src: str | Path, dst: str | Path) -> None:
    # Copy, never hard-link: a bundle must not share inodes with the cache (editing one would edit both).
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)
