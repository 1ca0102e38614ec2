"""Hashes of source files, remembered by (path, size, mtime, inode) so a big source is hashed once."""

from __future__ import annotations

import os
from pathlib import Path

from edgekit._util.fsutil import write_text_atomic
from edgekit._util.hashing import sha256_file, sha256_text
from edgekit.store.records import SourceFile


def source_file(path: Path, name: str, cache_root: Path) -> SourceFile:
    real = path.resolve()
    stat = real.stat()
    return SourceFile(name, stat.st_size, memo_sha256(real, stat, cache_root))


def memo_sha256(path: Path, stat: os.stat_result, cache_root: Path) -> str:
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"
    memo = cache_root / "hash-memo" / sha256_text(key)
    if memo.is_file():
        value = memo.read_text().strip()
        if len(value) == 64:
            return value
    value = sha256_file(path)
    write_text_atomic(memo, value)
    return value
