"""A signed bundle as an OCI artifact, in the CNCF ModelPack media types (github.com/modelpack/model-spec).

    config   application/vnd.cncf.model.config.v1+json        descriptor (name, release, source), config
                                                              (format, quantization), modelfs.diffIds
    layer 0  application/vnd.cncf.model.weight.config.v1.raw  manifest.json
    layer 1  application/vnd.dev.sigstore.bundle.v0.3+json    model.sig (the OpenSSF model signature)
    layer 2  application/vnd.cncf.model.weight.config.v1.tar  every file under 1 MiB, in one deterministic tar
    layer 3… application/vnd.cncf.model.weight.v1.raw         each model file of 1 MiB or more, as it is
             application/vnd.cncf.model.weight.config.v1.raw  (tokenizer/ files), or
             application/vnd.cncf.model.doc.v1.raw            (the report, plots, logs)

A raw layer's digest is its file's sha256, the one manifest.json lists: a box holding a file of that
sha256 in a slot links it instead of pulling it. Each layer names its path in `org.cncf.model.filepath`
and in `org.opencontainers.image.title` (so `oras pull` writes it there). Layers, their order and the
tar's bytes follow from the bundle alone: the same bundle always pushes to the same manifest digest.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.manifest import MANIFEST, SIGNATURE
from edgekit.ship.oci.errors import ArtifactError
from edgekit.ship.oci.reference import DIGEST
from edgekit.ship.pack import TAR_FORMAT, add_member

ARTIFACT_TYPE = "application/vnd.cncf.model.manifest.v1+json"
CONFIG = "application/vnd.cncf.model.config.v1+json"
WEIGHT = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_CONFIG = "application/vnd.cncf.model.weight.config.v1.raw"
WEIGHT_CONFIG_TAR = "application/vnd.cncf.model.weight.config.v1.tar"
DOC = "application/vnd.cncf.model.doc.v1.raw"
SIGSTORE_BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
RAW_TYPES = frozenset({WEIGHT, WEIGHT_CONFIG, DOC, SIGSTORE_BUNDLE})
FILEPATH = "org.cncf.model.filepath"
TITLE = "org.opencontainers.image.title"
SMALL_FILES = "small-files.tar"
OWN_LAYER = 2**20  # a file of at least this many bytes travels as its own layer
EDGEKIT_MANIFEST = "dev.edgekit.manifest.sha256"


@dataclass(frozen=True)
class Layer:
    media_type: str
    digest: str  # "sha256:…"
    size: int
    path: str  # its file in the bundle, or SMALL_FILES for the tar of the small ones
    data: bytes | None = None  # for the tar and the small raw layers: their bytes; else read from the bundle

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size,
                "annotations": {FILEPATH: self.path, TITLE: self.path}}  # fmt: skip


def layers_of(bundle: Path, manifest: dict[str, Any]) -> list[Layer]:
    """The bundle's layers, in the order a box needs them: manifest, signature, small files, model files."""
    manifest_bytes, signature = (bundle / MANIFEST).read_bytes(), (bundle / SIGNATURE).read_bytes()
    big = [f for f in manifest["files"] if f["size"] >= OWN_LAYER]
    small = [f for f in manifest["files"] if f["size"] < OWN_LAYER]
    tar = small_files_tar(bundle, [f["path"] for f in small])
    return [
        _blob(WEIGHT_CONFIG, MANIFEST, manifest_bytes),
        _blob(SIGSTORE_BUNDLE, SIGNATURE, signature),
        _blob(WEIGHT_CONFIG_TAR, SMALL_FILES, tar),
        *(Layer(_raw_type(f["path"]), f"sha256:{f['sha256']}", f["size"], f["path"]) for f in big),
    ]


def _blob(media_type: str, path: str, data: bytes) -> Layer:
    return Layer(media_type, "sha256:" + hashlib.sha256(data).hexdigest(), len(data), path, data)


def _raw_type(path: str) -> str:
    if path.startswith("models/"):
        return WEIGHT
    return WEIGHT_CONFIG if path.startswith("tokenizer/") else DOC


def small_files_tar(bundle: Path, paths: list[str]) -> bytes:
    """A POSIX tar of `paths`, its members as in a pack (`edgekit.ship.pack.add_member`)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=TAR_FORMAT) as tar:
        for rel in paths:
            add_member(tar, bundle / rel, rel)
    return out.getvalue()


def model_config(manifest: dict[str, Any], layers: list[Layer]) -> Layer:
    """The ModelPack config: what the model is and where it came from (the bundle manifest's provenance)."""
    source = manifest.get("source") or {}
    default = next((a for a in manifest.get("artifacts", []) if a.get("name") == manifest.get("default_artifact")),
                   None) or {}  # fmt: skip
    config = {
        "descriptor": {
            "createdAt": manifest.get("created"),
            "name": manifest["name"],
            "version": str(int(manifest.get("release", 0))),
            **({"sourceURL": str(source["uri"])} if source.get("uri") else {}),
            **({"revision": str(source["revision"])} if source.get("revision") else {}),
        },
        "config": {
            "format": str(default.get("backend") or "gguf"),
            **({"quantization": str(default["scheme"])} if default.get("scheme") else {}),
        },
        "modelfs": {"type": "layers", "diffIds": [layer.digest for layer in layers]},
    }
    return _blob(CONFIG, "config", json.dumps(config, indent=2, sort_keys=True).encode())


def image_manifest(manifest: dict[str, Any], config: Layer, layers: list[Layer]) -> bytes:
    body = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": config.media_type, "digest": config.digest, "size": config.size},
        "layers": [layer.descriptor() for layer in layers],
        "annotations": {
            "org.opencontainers.image.title": manifest["name"],
            "org.opencontainers.image.version": str(int(manifest.get("release", 0))),
            "org.opencontainers.image.created": str(manifest.get("created", "")),
            EDGEKIT_MANIFEST: next(layer.digest for layer in layers if layer.path == MANIFEST).removeprefix("sha256:"),
        },
    }
    return json.dumps(body, indent=2, sort_keys=True).encode()


# --- the box's side: what a pulled manifest must be ---------------------------------------------------------------


@dataclass(frozen=True)
class Pulled:
    """A pulled OCI manifest, checked: where the bundle's manifest, signature and files are."""

    manifest_layer: Layer
    signature_layer: Layer
    tar_layer: Layer
    raw_layers: list[Layer]


def parse_manifest(body: bytes, label: str) -> Pulled:
    try:
        manifest = json.loads(body)
        layers = [_layer(d) for d in manifest["layers"]]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ArtifactError(label, f"its manifest is not an OCI image manifest with layers ({exc})") from None
    if manifest.get("artifactType") != ARTIFACT_TYPE:
        raise ArtifactError(label, f"it is not a model artifact (artifactType {manifest.get('artifactType')!r}, "
                            f"not {ARTIFACT_TYPE}): was it pushed by edgekit push?")  # fmt: skip
    by_path = {layer.path: layer for layer in layers}
    for path in (MANIFEST, SIGNATURE, SMALL_FILES):
        if path not in by_path:
            raise ArtifactError(label, f"its manifest has no layer for {path}")
    if len(by_path) != len(layers):
        raise ArtifactError(label, "two of its layers name the same file")
    raw = [layer for layer in layers if layer.path not in (MANIFEST, SIGNATURE, SMALL_FILES)]
    for layer in raw:
        if layer.media_type not in RAW_TYPES:
            raise ArtifactError(label, f"layer {layer.path} has media type {layer.media_type}, not a raw file")
    return Pulled(by_path[MANIFEST], by_path[SIGNATURE], by_path[SMALL_FILES], raw)


def _layer(descriptor: dict[str, Any]) -> Layer:
    annotations = descriptor.get("annotations") or {}
    path = annotations.get(FILEPATH) or annotations.get(TITLE)
    digest, size = descriptor["digest"], descriptor["size"]
    if not isinstance(path, str) or not isinstance(size, int) or not DIGEST.fullmatch(str(digest)):
        raise ValueError(f"layer {digest} names no file path, or has no sha256 digest and size")
    return Layer(descriptor["mediaType"], digest, size, path)
