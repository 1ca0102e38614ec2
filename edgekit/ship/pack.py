"""`edgekit pack`: a signed bundle as one file, NAME-RELEASE.edgekit, to copy to the boxes.

A POSIX tar whose first members are model.sig and manifest.json, then every file manifest.json lists,
in its order: a box reads the signature and the manifest first, checks its disk space, and streams the
rest into a slot, hashing each file as it arrives (`edgekit.ship.unpack`). Only regular files, no
folders or links; owner 0, mtime 0, mode 644 (755 for executables): the same bundle always packs to the
same bytes, so the printed sha256 identifies the release. `--zstd` compresses it (single-threaded zstd,
deterministic too; quantized weights shrink little).
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from edgekit._util.fsutil import ensure_free_space, fsync_dir
from edgekit._util.hashing import sha256_file
from edgekit.errors import MissingDependencyError, PackUnsigned, UsageError
from edgekit.manifest import MANIFEST, SIGNATURE, verify_bundle
from edgekit.ship import box_runtime
from edgekit.ship.box_runtime import BoxRuntime

SUFFIX = ".edgekit"
ZSTD_LEVEL = 3
TAR_FORMAT = tarfile.PAX_FORMAT


@dataclass(frozen=True)
class Packed:
    path: Path
    sha256: str
    size: int
    files: int
    name: str
    release: int
    zstd: bool
    box: str | None = None  # the architecture whose runtime it carries (`--box`), or None

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "path": str(self.path)}


def pack_name(manifest: dict[str, Any], box: str | None = None) -> str:
    """NAME-RELEASE.edgekit; with the runtime for another architecture's boxes, NAME-RELEASE.ARCH.edgekit."""
    return f"{manifest['name']}-{int(manifest.get('release', 0))}{'.' + box if box else ''}{SUFFIX}"


def pack_bundle(bundle: Path, out: Path | None = None, *, zstd: bool = False,
                runtime: BoxRuntime | None = None) -> Packed:  # fmt: skip
    """Write `bundle` (verified, and signed) as one deterministic file; return where, its size and sha256.

    `runtime`: the wheels a box of another architecture installs edgekit from, carried after the bundle's files."""
    bundle = Path(bundle)
    manifest = verify_bundle(bundle)
    signature = bundle / SIGNATURE
    if signature.is_symlink() or not signature.is_file():
        raise PackUnsigned(bundle)
    members = [SIGNATURE, MANIFEST, *(f["path"] for f in manifest["files"])]
    extra = box_runtime.members(runtime) if runtime else []
    target = _target(bundle, out, pack_name(manifest, runtime.arch if runtime else None))
    extra_bytes = sum(m.path.stat().st_size if m.path else len(m.data) for m in extra)
    ensure_free_space(target.parent, sum((bundle / m).stat().st_size for m in members) + extra_bytes + 2**20)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            with _compressed(raw, zstd) as stream, tarfile.open(fileobj=stream, mode="w|", format=TAR_FORMAT) as tar:
                for rel in members:
                    add_member(tar, bundle / rel, rel)
                for member in extra:
                    _add_runtime_member(tar, member)
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
        fsync_dir(target.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return Packed(target, sha256_file(target), target.stat().st_size, len(members), manifest["name"],
                  int(manifest.get("release", 0)), zstd, runtime.arch if runtime else None)  # fmt: skip


def _target(bundle: Path, out: Path | None, name: str) -> Path:
    target = Path.cwd() / name if out is None else (Path(out) / name if Path(out).is_dir() else Path(out))
    if target.absolute().resolve().is_relative_to(bundle.absolute().resolve()):
        raise UsageError(f"{target} is inside the bundle {bundle}", "write the pack elsewhere (-o FILE or DIR)")
    return target


def add_member(tar: tarfile.TarFile, path: Path, rel: str) -> None:
    """`path` as member `rel`, mode 644 or 755 (see `_header`)."""
    with open(path, "rb") as f:
        tar.addfile(_header(rel, path.stat().st_size, 0o755 if path.stat().st_mode & 0o100 else 0o644), f)


def _header(rel: str, size: int, mode: int) -> tarfile.TarInfo:
    """Owner 0, mtime 0: the same files always tar to the same bytes."""
    info = tarfile.TarInfo(rel)
    info.size, info.mode, info.mtime = size, mode, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add_runtime_member(tar: tarfile.TarFile, member: box_runtime.Member) -> None:
    if member.path is not None:
        add_member(tar, member.path, member.name)
    else:
        tar.addfile(_header(member.name, len(member.data), member.mode), io.BytesIO(member.data))


@contextlib.contextmanager
def _compressed(raw: IO[bytes], zstd: bool) -> Iterator[IO[bytes]]:
    if not zstd:
        yield raw
        return
    try:
        import zstandard
    except ImportError:
        raise MissingDependencyError("the `zstandard` package (needed for --zstd)", "runtime") from None
    writer = zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(raw, closefd=False)
    try:
        yield writer
    finally:
        writer.flush(zstandard.FLUSH_FRAME)
        writer.close()
