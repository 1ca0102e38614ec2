"""What finished stages hand on: a checkpoint folder, an artifact. Plain value objects built from cache entries."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SourceFile:
    path: str
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class Checkpoint:
    """A Hugging Face checkpoint folder that the reference and every backend start from."""

    path: Path | None  # None: the fetch did not run (only GGUF artifacts of a GGUF source were needed)
    key: str  # content key of the fetch task
    uri: str
    revision: str | None  # resolved commit sha for hf://, None otherwise
    files: tuple[SourceFile, ...]  # the source files as fetched, with hashes
    reconstructed_from: str | None = None  # "GGUF Q4_1" when weights were dequantized from a quantized file
    notes: tuple[str, ...] = ()
    speed_only: bool = False  # random weights (a synthetic:// source): nothing to sign off but speed

    def provenance(self) -> dict[str, Any]:
        """The source as the manifest and the report's sign-off record it."""
        out: dict[str, Any] = {
            "uri": self.uri,
            "revision": self.revision,
            "files": [f.to_dict() for f in self.files],
            "reconstructed_from": self.reconstructed_from,
            "notes": list(self.notes),
        }
        if self.speed_only:
            out["speed_only"] = True
        return out


@dataclass
class Artifact:
    """One quantized model, in the cache until the bundle is assembled."""

    name: str  # unique within a bundle, e.g. "gguf-Q4_K_M"
    backend: str
    scheme: str
    path: Path  # a file (GGUF) or a folder (IR, ONNX)
    key: str
    details: dict[str, Any] = field(default_factory=dict)  # tensor types, bits per weight, ...
    recorded: dict[str, str] = field(default_factory=dict)  # sha256 of each file when its cache entry was made

    def recorded_sha256(self, file: Path) -> str | None:
        return self.recorded.get(file.relative_to(self.path.parent).as_posix())

    @property
    def files(self) -> list[Path]:
        if self.path.is_file():
            return [self.path]
        return sorted(p for p in self.path.rglob("*") if p.is_file())

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.files)
