"""`edgekit push BUNDLE oci://HOST/REPO:TAG`: the signed bundle as a ModelPack artifact (`layout.py`).

Blobs the registry already holds are not sent again (a new release uploads what changed); the manifest
goes last, so a tag never names an artifact with a missing layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.errors import PackUnsigned, UsageError
from edgekit.manifest import SIGNATURE, verify_bundle
from edgekit.observe.progress import Progress
from edgekit.ship.oci.client import Connection, Registry
from edgekit.ship.oci.layout import Layer, image_manifest, layers_of, model_config
from edgekit.ship.oci.reference import parse_reference

MIB = 2**20


@dataclass(frozen=True)
class Pushed:
    reference: str  # pinned: oci://HOST/REPO@sha256:…
    tag: str
    digest: str
    name: str
    release: int
    layers: int
    size: int  # every layer and the config
    uploaded: int  # bytes sent; the rest the registry already held

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def push_bundle(bundle: Path, reference: str, connection: Connection, progress: Progress) -> Pushed:
    ref = parse_reference(reference)
    if ref.digest:
        raise UsageError(f"{reference}: push to a tag, not a digest", "e.g. oci://HOST/REPO:stable")
    manifest = verify_bundle(bundle)
    signature = bundle / SIGNATURE
    if signature.is_symlink() or not signature.is_file():
        raise PackUnsigned(bundle)
    layers = layers_of(bundle, manifest)
    config = model_config(manifest, layers)
    registry = Registry(ref, connection, push=True)
    blobs = [*layers, config]
    uploaded = 0
    with progress.task(f"push {ref}", sum(b.size for b in blobs) / MIB, "MiB") as task:
        for blob in blobs:
            uploaded += _upload(registry, bundle, blob)
            task.advance(blob.size / MIB)
    body = image_manifest(manifest, config, layers)
    digest = registry.put_manifest(ref.target, body)
    return Pushed(str(ref.pinned(digest)), ref.target, digest, manifest["name"], int(manifest.get("release", 0)),
                  len(layers), sum(b.size for b in blobs), uploaded)  # fmt: skip


def _upload(registry: Registry, bundle: Path, blob: Layer) -> int:
    if registry.has_blob(blob.digest):
        return 0
    if blob.data is not None:
        registry.upload_blob(blob.data, blob.digest, blob.size)
    else:
        with open(bundle / blob.path, "rb") as f:
            registry.upload_blob(f, blob.digest, blob.size)
    return blob.size
