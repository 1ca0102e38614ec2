"""Where an install's files come from: a pack (a file, or stdin) or an OCI registry.

Either way the installer gets the same `Unpacked` folder, made by its `prepare` once the manifest has
arrived, and records the same `origin` (what `edgekit status` shows: the pack's sha256, or the registry
reference, the digest it resolved to and the bytes fetched, resumed and reused).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

from edgekit.errors import IntegrityError, UsageError
from edgekit.manifest import load_manifest
from edgekit.observe.progress import Progress
from edgekit.ship.slots import InstallRoot
from edgekit.ship.unpack import Unpacked, unpack

Prepare = Callable[..., Path]
DOWNLOADS = "downloads"  # under the install root: layers being pulled, kept across a failed or killed install


class Fill(Protocol):
    label: str  # "pack FILE", or the OCI reference: what the messages name

    def fill(self, prepare: Prepare) -> Unpacked: ...

    def origin(self, unpacked: Unpacked) -> dict[str, Any]: ...

    def done(self) -> None: ...


class PackFill:
    def __init__(self, source: Path | str) -> None:
        self.source = source
        self.label = "pack stdin" if str(source) == "-" else f"pack {source}"

    def fill(self, prepare: Prepare) -> Unpacked:
        with _opened(self.source) as raw:
            return unpack(raw, self.label.removeprefix("pack "), prepare)

    def origin(self, unpacked: Unpacked) -> dict[str, Any]:
        return {"kind": "pack", "path": str(self.source), "sha256": unpacked.sha256}

    def done(self) -> None:
        pass


class RegistryFill:
    def __init__(self, box: InstallRoot, reference: str, connection: Any, progress: Progress) -> None:
        from edgekit.ship.oci.reference import parse_reference

        self.box, self.ref, self.connection, self.progress = box, parse_reference(reference), connection, progress
        self.label = str(self.ref)
        self.fetched: Any = None

    def fill(self, prepare: Prepare) -> Unpacked:
        from edgekit.ship.oci.client import Registry
        from edgekit.ship.oci.pull import fetch_artifact

        registry = Registry(self.ref, self.connection)
        self.fetched = fetch_artifact(registry, self.box.root / DOWNLOADS, held_files(self.box), prepare,
                                      self.progress)  # fmt: skip
        return Unpacked(self.fetched.path, self.fetched.head, self.fetched.digest)

    def origin(self, unpacked: Unpacked) -> dict[str, Any]:
        return {"kind": "oci", "reference": str(self.ref), "digest": self.fetched.digest,
                "pinned": str(self.fetched.reference), "transfer": self.fetched.transfer.as_dict()}  # fmt: skip

    def done(self) -> None:
        shutil.rmtree(self.box.root / DOWNLOADS, ignore_errors=True)


def held_files(box: InstallRoot) -> dict[str, Path]:
    """sha256 → a file of that content in an installed slot (verified when it was installed; never edited)."""
    held: dict[str, Path] = {}
    for slot in box.installed():
        try:
            manifest = load_manifest(slot)
        except IntegrityError:
            continue
        for record in manifest.get("files", []):
            path = slot / record["path"]
            if path.is_file() and not path.is_symlink() and path.stat().st_size == record["size"]:
                held.setdefault(record["sha256"], path)
    return held


@contextlib.contextmanager
def _opened(source: Path | str) -> Iterator[IO[bytes]]:
    if str(source) == "-":
        yield sys.stdin.buffer
        return
    try:
        f = open(source, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise UsageError(f"cannot read the pack {source}: {exc.strerror}", "check the path") from None
    with f:
        yield f
