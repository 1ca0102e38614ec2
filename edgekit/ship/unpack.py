"""Stream an .edgekit pack into a folder, refusing anything that is not exactly what its manifest lists.

The signature and the manifest come first; `prepare` (the installer) sees them before a byte of a model
is written (free space, where the slot goes). Then every member must be a regular file at a plain relative
path, listed once in the manifest, of the listed size; it is written with O_EXCL|O_NOFOLLOW (nothing in
the folder is a link: none is ever made) and hashed as it streams, and a differing sha256 stops the
unpacking at that file. After the listed files a pack may carry a box runtime (`edgekit pack --box`), checked
file by file against its own listing and not written (`edgekit.ship.box_runtime`). Nothing here trusts the
pack: the installer verifies the signature afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from edgekit._util.hashing import CHUNK
from edgekit.errors import MissingDependencyError, PackError
from edgekit.manifest import MANIFEST, SCHEMA_VERSION, SIGNATURE, listed_files, plain_relative
from edgekit.ship import box_runtime

SIGNATURE_MAX = 2**20
MANIFEST_MAX = 64 * 2**20
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Head:
    """What a pack says of itself before its files arrive (unverified until the signature is checked)."""

    signature: bytes
    manifest_bytes: bytes
    manifest: dict[str, Any]
    listed: dict[str, dict[str, Any]]

    @property
    def total_bytes(self) -> int:
        return len(self.signature) + len(self.manifest_bytes) + sum(r["size"] for r in self.listed.values())


@dataclass(frozen=True)
class Unpacked:
    path: Path
    head: Head
    sha256: str  # of the pack's bytes as they arrived


class _Source:
    """The pack's bytes, hashed as they are read (the sha256 `edgekit pack` printed)."""

    def __init__(self, raw: IO[bytes], prefix: bytes = b"") -> None:
        self.raw, self.prefix, self.digest = raw, prefix, hashlib.sha256(prefix)

    def read(self, size: int = -1) -> bytes:
        if self.prefix:
            data, self.prefix = (self.prefix, b"") if size < 0 or size >= len(self.prefix) else (
                self.prefix[:size], self.prefix[size:])  # fmt: skip
            return data
        data = self.raw.read() if size < 0 else self.raw.read(size)
        self.digest.update(data)
        return data


def unpack(raw: IO[bytes], label: str, prepare: Callable[[Head], Path]) -> Unpacked:
    """Read the pack from `raw`; write its files into the folder `prepare(head)` returns."""
    magic = raw.read(4)
    source = _Source(raw, magic)
    try:
        data = _decompressed(source) if magic == ZSTD_MAGIC else source
        with tarfile.open(fileobj=data, mode="r|") as tar:  # type: ignore[call-overload]
            members = iter(tar)
            head = _head(tar, members, label)
            dest = prepare(head)
            write_file(dest / SIGNATURE, iter([head.signature]), 0o644)
            write_file(dest / MANIFEST, iter([head.manifest_bytes]), 0o644)
            seen = _extract_all(tar, members, head.listed, dest, label)
        _trailer(data, label)
    except (tarfile.TarError, EOFError) as exc:
        raise PackError(label, f"truncated or damaged ({exc})") from None
    except _zstd_errors() as exc:
        raise PackError(label, f"truncated or damaged (zstd: {exc})") from None
    missing = sorted(set(head.listed) - seen)
    if missing:
        raise PackError(label, f"truncated: it ends before {missing[0]}" + (
            f" and {len(missing) - 1} more files its manifest lists" if len(missing) > 1 else ""))  # fmt: skip
    return Unpacked(dest, head, source.digest.hexdigest())


def _head(tar: tarfile.TarFile, members: Iterator[tarfile.TarInfo], label: str) -> Head:
    signature = _small(tar, next(members, None), SIGNATURE, SIGNATURE_MAX, label)
    manifest_bytes = _small(tar, next(members, None), MANIFEST, MANIFEST_MAX, label)
    return parse_head(signature, manifest_bytes, label)


def parse_head(signature: bytes, manifest_bytes: bytes, label: str) -> Head:
    """The signature and manifest as they arrived, checked for shape (not trust: that comes after the files)."""
    try:
        manifest = json.loads(manifest_bytes)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PackError(label, f"{MANIFEST} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("schema_version") != SCHEMA_VERSION:
        raise PackError(label, f"{MANIFEST} is not an edgekit manifest of schema {SCHEMA_VERSION}")
    problems: list[str] = []
    listed = listed_files(manifest, problems)
    if problems:
        raise PackError(label, f"{MANIFEST}: {problems[0]}")
    name, release = manifest.get("name"), manifest.get("release", 0)
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise PackError(label, f"{MANIFEST} names the bundle {name!r}, not a plain name")
    if not isinstance(release, int) or isinstance(release, bool) or release < 0:
        raise PackError(label, f"{MANIFEST} has release {release!r}, not a whole number ≥ 0")
    return Head(signature, manifest_bytes, manifest, listed)


def _small(tar: tarfile.TarFile, member: tarfile.TarInfo | None, expected: str, limit: int, label: str) -> bytes:
    if member is None:
        raise PackError(label, f"empty: no {expected}")
    if member.name != expected or not member.isreg():
        what = "it is not signed: " if expected == SIGNATURE and member.name == MANIFEST else ""
        raise PackError(label, f"{what}an edgekit pack starts with {SIGNATURE} then {MANIFEST}, not {member.name!r}")
    if member.size > limit:
        raise PackError(label, f"{expected} is {member.size:,} bytes, over the {limit:,} a real one needs")
    stream = tar.extractfile(member)
    data = stream.read() if stream is not None else b""
    if len(data) != member.size:
        raise PackError(label, f"truncated inside {expected}")
    return data


def _extract_all(
    tar: tarfile.TarFile, members: Iterator[tarfile.TarInfo], listed: dict[str, dict[str, Any]], dest: Path, label: str
) -> set[str]:
    seen: set[str] = set()
    for member in members:
        if member.name.startswith(f"{box_runtime.DIR}/") and member.name not in listed:
            box_runtime.check_runtime(tar, member, members, label)
            break
        record = check_member(member, listed, seen, label)
        extract_member(tar, member, record, dest, label)
        seen.add(member.name)
    return seen


def check_member(
    member: tarfile.TarInfo, listed: dict[str, dict[str, Any]], seen: set[str], label: str
) -> dict[str, Any]:
    name = member.name
    if not plain_relative(name) or name in (SIGNATURE, MANIFEST):
        raise PackError(label, f"member {name!r} would be written outside the slot or over {MANIFEST} (path traversal)")
    if member.issym() or member.islnk():
        kind = "a symlink" if member.issym() else "a hard link"
        raise PackError(label, f"member {name} is {kind} (to {member.linkname!r}); a pack holds regular files only")
    if not member.isreg():
        raise PackError(label, f"member {name} is not a regular file; a pack holds regular files only")
    if name in seen:
        raise PackError(label, f"member {name} appears twice")
    if name not in listed:
        raise PackError(label, f"member {name} is not in its manifest (an extra file)")
    if member.size != listed[name]["size"]:
        raise PackError(label, f"member {name} is {member.size:,} bytes, its manifest says {listed[name]['size']:,}")
    return listed[name]


def extract_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, record: dict[str, Any], dest: Path, label: str
) -> None:
    """Write one checked member into `dest`, hashing it on the way; a differing sha256 stops the install."""
    stream = tar.extractfile(member)
    assert stream is not None  # a regular file always has data
    digest = hashlib.sha256()

    def chunks() -> Iterator[bytes]:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
            yield chunk

    write_file(dest / member.name, chunks(), 0o755 if member.mode & 0o100 else 0o644)
    if digest.hexdigest() != record["sha256"]:
        raise PackError(label, f"{member.name}: sha256 differs from its manifest (a changed byte)")


def write_file(path: Path, chunks: Iterator[bytes], mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), mode)
        for chunk in chunks:
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())


def _trailer(data: Any, label: str) -> None:
    """After the end-of-archive blocks only zero padding may follow (read to the end: the sha256 needs it)."""
    while chunk := data.read(CHUNK):
        if chunk.strip(b"\0"):
            raise PackError(label, "data after the end of the archive")


def _decompressed(source: _Source) -> Any:
    try:
        import zstandard
    except ImportError:
        raise MissingDependencyError("the `zstandard` package (this pack is zstd-compressed)", "runtime") from None
    return zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=True)  # type: ignore[arg-type]


def _zstd_errors() -> tuple[type[BaseException], ...]:
    try:
        import zstandard
    except ImportError:
        return ()
    return (zstandard.ZstdError,)
