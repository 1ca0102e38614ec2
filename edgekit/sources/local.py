"""Local sources: a Hugging Face checkpoint folder, a GGUF file, either inside an installed package (pkg://).

Found and checked without hashing or writing anything, so preflight can run it before any work.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import SourceError
from edgekit.sources import PICKLE_SUFFIXES, resolve_pkg

GGUF_MAGIC = b"GGUF"
# Files a checkpoint folder needs besides weights; anything else in a local folder is left behind.
CHECKPOINT_FILES = ("*.json", "tokenizer.model", "*.tiktoken", "merges.txt", "vocab.txt", "*.jinja")


@dataclass(frozen=True)
class LocalSource:
    kind: str  # "dir" or "gguf"
    path: Path  # local folder or GGUF file
    files: tuple[Path, ...]  # what the checkpoint takes from it
    package: str | None = None  # import name of the package of a pkg:// source


def local_path(uri: str, base_dir: Path) -> Path:
    """A local path from the recipe (pkg://, file:// or relative to the recipe's folder)."""
    if uri.startswith("pkg://"):
        return resolve_pkg(uri)
    path = Path(uri.removeprefix("file://")).expanduser()
    return path if path.is_absolute() else base_dir / path


def locate_local(uri: str, base_dir: Path, allow_pickle: bool) -> LocalSource:
    """Find a local or pkg:// source and the files to take from it, without hashing or writing anything."""
    package = uri.removeprefix("pkg://").split("/", 1)[0] if uri.startswith("pkg://") else None
    path = local_path(uri, base_dir)
    if not path.exists():
        raise SourceError(f"{uri}: no such file or folder ({path})", "fix [model] source")
    if path.is_file():
        check_gguf_file(path, uri)
        return LocalSource("gguf", path, (path,), package)
    if not path.is_dir():
        raise SourceError(f"{uri}: neither a regular file nor a folder ({path})", "fix [model] source")
    return LocalSource("dir", path, checkpoint_files(path, allow_pickle, uri), package)


def check_gguf_file(path: Path, uri: str) -> None:
    if path.suffix.lower() != ".gguf":
        raise SourceError(
            f"{uri}: a single-file source must be a .gguf file",
            "point [model] source at a Hugging Face checkpoint folder or a .gguf file",
        )
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise SourceError(f"{uri}: cannot be read ({exc.strerror})", "check the file's permissions") from None
    if magic != GGUF_MAGIC:
        raise SourceError(
            f"{uri}: not a GGUF file (it does not start with {GGUF_MAGIC.decode()!r})",
            "point [model] source at a real .gguf file or a Hugging Face checkpoint folder",
        )


def checkpoint_files(folder: Path, allow_pickle: bool, uri: str) -> tuple[Path, ...]:
    """The weights and side files a checkpoint folder contributes."""
    weights = pick_weights(folder, allow_pickle, uri)
    return tuple(sorted({p for pattern in CHECKPOINT_FILES for p in folder.glob(pattern)} | set(weights)))


def pick_weights(folder: Path, allow_pickle: bool, uri: str) -> list[Path]:
    safetensors = sorted(folder.glob("*.safetensors"))
    if safetensors:
        return safetensors
    pickles = sorted(p for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file())
    if pickles and not allow_pickle:
        raise SourceError(
            f"{uri}: only pickle weights ({', '.join(p.name for p in pickles[:3])}); loading them can run code",
            "convert them to safetensors, or set [model] allow_pickle = true if you trust their origin",
        )
    if not pickles:
        raise SourceError(f"{uri}: no model weights (*.safetensors) in {folder}")
    return pickles
