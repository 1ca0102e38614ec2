"""Fetch an edgekit artifact from a registry into a folder: what `edgekit install oci://…` and `pull` share.

1. resolve the tag to a digest (a pinned digest is checked against the manifest's bytes);
2. fetch manifest.json and model.sig, check their shape, check that every raw layer is a file the
   manifest lists at its size and sha256, and let `prepare` make the folder (free space, the slot);
3. each raw layer whose sha256 a file on the box already has (`reuse`: the installed slots) is linked,
   not downloaded; every other layer streams into DOWNLOADS/sha256-HEX.part, hashed as it arrives, and
   becomes DOWNLOADS/sha256-HEX only when its digest matches. A dropped connection is retried with a
   Range request from the byte it reached, and a later run resumes the .part a killed one left;
4. the small files' tar is unpacked with the pack's checks (`edgekit.ship.unpack`).

Nothing here trusts the registry: the installer verifies the signature over the folder afterwards.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import requests

from edgekit._util.hashing import CHUNK
from edgekit.errors import PackError
from edgekit.manifest import MANIFEST, SIGNATURE
from edgekit.observe.progress import Progress, Task
from edgekit.ship.oci.client import Registry
from edgekit.ship.oci.errors import ArtifactError, RegistryError
from edgekit.ship.oci.layout import Layer, Pulled, parse_manifest
from edgekit.ship.oci.reference import Reference
from edgekit.ship.unpack import MANIFEST_MAX, SIGNATURE_MAX, Head, check_member, extract_member, parse_head, write_file

RETRIES = 4
BACKOFF = 0.5  # seconds, doubled after each retry
MIB = 2**20
STREAM_ERRORS = (requests.exceptions.RequestException, RegistryError, ConnectionError, TimeoutError)


@dataclass
class Transfer:
    """Bytes of the artifact by how they reached the box."""

    fetched: int = 0  # downloaded now
    resumed: int = 0  # already downloaded by an earlier, interrupted run
    reused: int = 0  # linked from a file an installed slot holds
    total: int = 0
    retries: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Fetched:
    path: Path
    head: Head
    reference: Reference  # pinned to the digest it resolved to
    digest: str
    transfer: Transfer = field(default_factory=Transfer)


Prepare = Callable[[Head, int], Path]  # (the manifest as it arrived, bytes still to download) → the folder to fill


def fetch_artifact(
    registry: Registry, downloads: Path, reuse: dict[str, Path], prepare: Prepare, progress: Progress
) -> Fetched:
    body, digest = registry.manifest(registry.ref.target)
    pinned = registry.ref.pinned(digest)
    label = str(pinned)
    pulled = parse_manifest(body, label)
    downloads.mkdir(parents=True, exist_ok=True)
    transfer = Transfer(total=sum(layer.size for layer in _all(pulled)))
    blobs = _Blobs(registry, downloads, transfer, label)
    head = _head(blobs, pulled, label)
    to_download = [layer for layer in [pulled.tar_layer, *pulled.raw_layers] if layer.digest[7:] not in reuse]
    dest = prepare(head, sum(layer.size - blobs.have(layer) for layer in to_download))
    write_file(dest / SIGNATURE, iter([head.signature]), 0o644)
    write_file(dest / MANIFEST, iter([head.manifest_bytes]), 0o644)
    with progress.task(f"pull {pinned}", sum(layer.size for layer in to_download) / MIB, "MiB") as task:
        blobs.task = task
        for layer in pulled.raw_layers:
            _place(blobs, layer, reuse.get(layer.digest[7:]), dest, head)
        _unpack_small_files(blobs.get(pulled.tar_layer), head, pulled, dest, label)
    return Fetched(dest, head, pinned, digest, transfer)


def _all(pulled: Pulled) -> list[Layer]:
    return [pulled.manifest_layer, pulled.signature_layer, pulled.tar_layer, *pulled.raw_layers]


def _head(blobs: _Blobs, pulled: Pulled, label: str) -> Head:
    for layer, limit in ((pulled.manifest_layer, MANIFEST_MAX), (pulled.signature_layer, SIGNATURE_MAX)):
        if layer.size > limit:
            raise ArtifactError(label, f"its {layer.path} layer is {layer.size:,} bytes, over the {limit:,} one needs")
    signature, manifest_bytes = blobs.get(pulled.signature_layer), blobs.get(pulled.manifest_layer)
    try:
        head = parse_head(signature.read_bytes(), manifest_bytes.read_bytes(), label)
    except PackError as exc:
        raise ArtifactError(label, exc.problem) from None
    for layer in pulled.raw_layers:
        record = head.listed.get(layer.path)
        if record is None:
            raise ArtifactError(label, f"layer {layer.path} is a file its manifest.json does not list")
        if layer.size != record["size"] or layer.digest != f"sha256:{record['sha256']}":
            raise ArtifactError(label, f"layer {layer.path} ({layer.digest}, {layer.size:,} bytes) is not the file "
                                "its manifest.json lists")  # fmt: skip
    return head


def _place(blobs: _Blobs, layer: Layer, held: Path | None, dest: Path, head: Head) -> None:
    target = dest / layer.path
    target.parent.mkdir(parents=True, exist_ok=True)
    if held is not None and _linked(held, target):
        blobs.transfer.reused += layer.size
        return
    _link_or_copy(blobs.get(layer), target)


def _linked(source: Path, target: Path) -> bool:
    try:
        os.link(source, target)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOENT):
            return False
        raise
    return True


def _link_or_copy(source: Path, target: Path) -> None:
    if not _linked(source, target):
        shutil.copyfile(source, target)
        os.chmod(target, 0o644)


def _unpack_small_files(tar_path: Path, head: Head, pulled: Pulled, dest: Path, label: str) -> None:
    seen = {layer.path for layer in pulled.raw_layers}
    try:
        with tarfile.open(tar_path, mode="r:") as tar:
            for member in tar:
                record = check_member(member, head.listed, seen, label)
                extract_member(tar, member, record, dest, label)
                seen.add(member.name)
    except PackError as exc:
        raise ArtifactError(label, f"{pulled.tar_layer.path}: {exc.problem}") from None
    except tarfile.TarError as exc:
        raise ArtifactError(label, f"{pulled.tar_layer.path} is not a tar ({exc})") from None
    missing = sorted(set(head.listed) - seen)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ArtifactError(label, f"a layer is missing: its manifest.json lists {missing[0]}{more}, which no layer "
                            "of the artifact holds")  # fmt: skip


class _Blobs:
    """Layers downloaded into one folder, each verified against its digest before it is used."""

    def __init__(self, registry: Registry, folder: Path, transfer: Transfer, label: str) -> None:
        self.registry, self.folder, self.transfer, self.label = registry, folder, transfer, label
        self.task: Task | None = None

    def path(self, layer: Layer) -> Path:
        return self.folder / layer.digest.replace(":", "-")

    def have(self, layer: Layer) -> int:
        """Bytes of `layer` already here (complete, or the part an interrupted run left)."""
        done, part = self.path(layer), self.path(layer).with_suffix(".part")
        if done.is_file():
            return layer.size
        return min(part.stat().st_size, layer.size) if part.is_file() else 0

    def get(self, layer: Layer) -> Path:
        done = self.path(layer)
        if done.is_file():  # verified when it was completed
            self.transfer.resumed += layer.size
            self._advance(layer.size)
            return done
        part = _Part(done.with_suffix(".part"), layer.size)
        self.transfer.resumed += part.offset
        self._advance(part.offset)
        for attempt in range(RETRIES + 1):
            if part.offset == layer.size:
                break  # every byte is here already (a kill between the last write and the rename)
            try:
                self._stream(layer, part)
                break
            except STREAM_ERRORS as exc:
                if attempt == RETRIES:
                    raise RegistryError(f"{self.label}: the registry stopped sending {layer.path} at byte "
                                        f"{part.offset:,} of {layer.size:,} ({exc})", "run the same command again: it "
                                        "resumes from there; the box still runs what it ran") from None  # fmt: skip
                self.transfer.retries += 1
                time.sleep(BACKOFF * 2**attempt)
        if part.offset != layer.size or "sha256:" + part.digest.hexdigest() != layer.digest:
            part.path.unlink(missing_ok=True)
            raise ArtifactError(self.label, f"layer {layer.path}: what arrived ({part.offset:,} bytes) does not match "
                                f"its digest {layer.digest} (a changed byte)")  # fmt: skip
        os.replace(part.path, done)
        return done

    def _stream(self, layer: Layer, part: _Part) -> None:
        """Append the rest of the layer to `part` (what reached it stays there and in its hash if this fails)."""
        with self.registry.open_blob(layer.digest, part.offset) as response:
            if part.offset and response.status_code == 200:  # the registry ignored the Range: start again
                self.transfer.resumed -= part.offset
                part.restart()
            with open(part.path, "ab") as out:
                os.fchmod(out.fileno(), 0o644)  # linked into a slot the service's user reads, whatever the umask
                for chunk in _chunks(response, layer.size - part.offset):
                    part.append(out, chunk)
                    self.transfer.fetched += len(chunk)
                    self._advance(len(chunk))
                out.flush()
                os.fsync(out.fileno())

    def _advance(self, size: int) -> None:
        if self.task is not None and size:
            self.task.advance(size / MIB)


def _chunks(response: requests.Response, limit: int) -> Iterator[bytes]:
    """The body, and not a byte past what the layer should hold (a registry that sends more is cut short)."""
    for chunk in response.iter_content(CHUNK):
        if len(chunk) > limit:
            yield chunk[: limit + 1]  # one byte over: the length check after the stream refuses it
            return
        limit -= len(chunk)
        yield chunk


class _Part:
    """A layer's bytes so far on disk, and their sha256 state: hashed once when a run picks up what an earlier
    one left, then kept up to date chunk by chunk (a retry continues from it, not from a re-read)."""

    def __init__(self, path: Path, size: int) -> None:
        self.path, self.digest, self.offset = path, hashlib.sha256(), 0
        if not path.is_file() or path.stat().st_size > size:
            path.unlink(missing_ok=True)
            return
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                self.digest.update(chunk)
                self.offset += len(chunk)

    def append(self, out: IO[bytes], chunk: bytes) -> None:
        out.write(chunk)
        self.digest.update(chunk)
        self.offset += len(chunk)

    def restart(self) -> None:
        self.path.unlink(missing_ok=True)
        self.digest, self.offset = hashlib.sha256(), 0
