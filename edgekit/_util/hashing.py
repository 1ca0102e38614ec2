"""Content hashes: files, folders and canonical JSON (the cache keys)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

CHUNK = 4 * 2**20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_json(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def file_records(root: Path) -> list[dict[str, Any]]:
    """Every file under `root` (or `root` itself) as {path, size, sha256}, sorted by path."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    base = root.parent if root.is_file() else root
    return [{"path": p.relative_to(base).as_posix(), "size": p.stat().st_size, "sha256": sha256_file(p)} for p in files]


def copy_hashed(src: Path, dst: Path) -> str:
    """Copy `src` to `dst` and return the sha256 of the bytes written, read once."""
    digest = hashlib.sha256()
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(CHUNK):
            digest.update(chunk)
            fout.write(chunk)
    return digest.hexdigest()
