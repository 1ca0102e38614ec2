from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgekit._util.hashing import file_records
from edgekit.errors import IntegrityError
from edgekit.manifest import SCHEMA_VERSION, verify_bundle


def make_bundle(root: Path) -> Path:
    (root / "models").mkdir(parents=True)
    (root / "models" / "m.gguf").write_bytes(b"GGUF" + b"\0" * 100)
    (root / "runtime.toml").write_text("[runtime]\n")
    manifest = {"schema_version": SCHEMA_VERSION, "files": file_records(root), "artifacts": []}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def test_intact_bundle_verifies(tmp_path: Path) -> None:
    assert verify_bundle(make_bundle(tmp_path / "b"))["schema_version"] == SCHEMA_VERSION


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (lambda b: (b / "models" / "m.gguf").write_bytes(b"GGUF" + b"\1" * 100), "models/m.gguf: sha256 differs"),
        (lambda b: (b / "models" / "m.gguf").write_bytes(b"GGUF"), "models/m.gguf: size"),
        (lambda b: (b / "runtime.toml").unlink(), "runtime.toml: missing"),
        (lambda b: (b / "models" / "extra.gguf").write_bytes(b"x"), "models/extra.gguf: not in the manifest"),
        (lambda b: (b / "manifest.json").write_text("{"), "not valid JSON"),
    ],
)
def test_tampered_bundle_is_refused_naming_the_file(tmp_path: Path, tamper, expected: str) -> None:
    bundle = make_bundle(tmp_path / "b")
    tamper(bundle)
    with pytest.raises(IntegrityError, match=expected):
        verify_bundle(bundle)


def test_symlink_swapped_in_is_refused(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    outside = tmp_path / "outside.toml"
    outside.write_text("[runtime]\n")
    (bundle / "runtime.toml").unlink()
    (bundle / "runtime.toml").symlink_to(outside)
    with pytest.raises(IntegrityError, match="link"):
        verify_bundle(bundle)


def test_local_runtime_override_is_allowed(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    (bundle / "runtime.local.toml").write_text("[runtime]\nn_threads = 2\n")
    verify_bundle(bundle)
