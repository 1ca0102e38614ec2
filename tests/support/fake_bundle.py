"""Small bundles whose model is a few bytes (nothing loads it), with their manifests: verify, inspect, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from edgekit._util.hashing import file_records
from edgekit.manifest import MANIFEST, SCHEMA_VERSION


def make_bundle(root: Path) -> Path:
    (root / "models").mkdir(parents=True)
    (root / "models" / "m.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 4)
    (root / "tokenizer").mkdir()
    (root / "tokenizer" / "tokenizer.json").write_text('{"model": {}}\n')
    (root / "runtime.toml").write_text("[runtime]\nartifact = 'm'\n")
    write_manifest(root, file_records(root))
    return root


def write_manifest(root: Path, files: object) -> None:
    (root / "manifest.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, "files": files, "artifacts": []}))


def flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def make_runnable_bundle(root: Path, tensor_types: object = None, metrics: object = None) -> Path:
    """A bundle whose manifest lists one GGUF artifact (its bytes are not a real model: nothing here loads it),
    a runtime.toml, and a report whose shapes vary as the report allows (bare counts, bare numbers)."""
    (root / "models").mkdir(parents=True)
    (root / "models" / "m.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 4 + b"\1" * 4)
    (root / "runtime.toml").write_text('[runtime]\nartifact = "m"\nn_threads = 1\nn_threads_batch = 1\n')
    types = {"Q8_0": 1200, "F32": {"tensors": 3, "params": 30}} if tensor_types is None else tensor_types
    report_metrics = {"kld_mean": {"value": 0.01, "ci95": [0.0, 0.02], "n": 10}, "top1": 0.97} if metrics is None \
        else metrics  # fmt: skip
    (root / "report.json").write_text(json.dumps({"artifacts": [{"name": "m", "metrics": report_metrics}]}))
    artifact = {"name": "m", "backend": "gguf", "scheme": "Q8_0", "path": "models/m.gguf", "size": 1032,
                "tensor_types": types, "bits_per_weight": 8.5, "verdict": "pass"}  # fmt: skip
    manifest = {"schema_version": SCHEMA_VERSION, "name": "tiny", "created": "2026-01-01T00:00:00Z",
                "edgekit_version": "0", "source": {"uri": "model"}, "artifacts": [artifact], "default_artifact": "m",
                "files": [r for r in file_records(root) if r["path"] != MANIFEST]}  # fmt: skip
    (root / MANIFEST).write_text(json.dumps(manifest))
    return root
