"""llama.cpp's own HF→GGUF converter, of the same llama.cpp version as the installed runtime.

llama-cpp-python ships llama.cpp compiled, but not `convert_hf_to_gguf.py` nor its `gguf-py`.
Both are inside the source package of the same llama-cpp-python release; on first use we take
them from there (pip download from the configured registry, or pip's cache), keep only the
converter files, and cache them per version. Nothing of llama.cpp is copied into this repo.
A user may instead point at an existing llama.cpp checkout (recipe `[toolchain] llama_cpp_dir`
or `EDGEKIT_LLAMA_CPP_DIR`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from edgekit._util.hashing import sha256_file
from edgekit.errors import ToolchainError
from edgekit.toolchain.sdist import (
    commit_from_changelog,
    download_sdist,
    extract_vendor,
    llama_cpp_python_version,
    read_changelog,
    version_dir,
)

CONVERTER_SCRIPT = "convert_hf_to_gguf.py"
# What we keep from the source package: the converter, its model modules, its gguf-py, licences.
KEEP = (CONVERTER_SCRIPT, "conversion/", "gguf-py/", "LICENSE")


@dataclass(frozen=True)
class Converter:
    root: Path  # the llama.cpp folder holding convert_hf_to_gguf.py and gguf-py/
    origin: str  # where it came from, for provenance
    llama_cpp_commit: str | None
    script_sha256: str

    @property
    def script(self) -> Path:
        return self.root / CONVERTER_SCRIPT

    def identity(self) -> dict[str, str | None]:
        """What determines the converter's output bytes (part of the convert stage's cache key)."""
        return {"llama_cpp_commit": self.llama_cpp_commit, "script_sha256": self.script_sha256}


def get_converter(llama_cpp_dir: str | None = None) -> Converter:
    found = cached_converter(llama_cpp_dir)
    if found is not None:
        return found
    pkg_version = llama_cpp_python_version()
    target = version_dir(pkg_version)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{target.name}.lock")):
        if not (target / "llama.cpp" / CONVERTER_SCRIPT).is_file():
            _fetch_from_sdist(pkg_version, target)
    return _from_toolchain(target, pkg_version)


def cached_converter(llama_cpp_dir: str | None = None) -> Converter | None:
    """The converter if it is here already (a checkout, or fetched before), without fetching it."""
    explicit = llama_cpp_dir or os.environ.get("EDGEKIT_LLAMA_CPP_DIR")
    if explicit:
        return _from_checkout(Path(explicit).expanduser())
    pkg_version = llama_cpp_python_version()
    target = version_dir(pkg_version)
    return _from_toolchain(target, pkg_version) if (target / "llama.cpp" / CONVERTER_SCRIPT).is_file() else None


def _from_toolchain(target: Path, pkg_version: str) -> Converter:
    root = target / "llama.cpp"
    commit_file = target / "LLAMA_CPP_COMMIT"
    commit = commit_file.read_text().strip() if commit_file.is_file() else None
    return Converter(
        root, f"llama-cpp-python {pkg_version} source package", commit or None, sha256_file(root / CONVERTER_SCRIPT)
    )


def _from_checkout(root: Path) -> Converter:
    if not (root / CONVERTER_SCRIPT).is_file() or not (root / "gguf-py").is_dir():
        raise ToolchainError(
            f"{root} is not a llama.cpp checkout (no {CONVERTER_SCRIPT} or gguf-py/)",
            "point [toolchain] llama_cpp_dir / EDGEKIT_LLAMA_CPP_DIR at the root of a llama.cpp checkout",
        )
    commit = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    return Converter(root, f"checkout {root}", commit, sha256_file(root / CONVERTER_SCRIPT))


def _fetch_from_sdist(pkg_version: str, target: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="edgekit-sdist-") as tmp:
        archive = download_sdist(pkg_version, Path(tmp), "llama.cpp's converter")
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial"))
        try:
            changelog = _extract_converter(archive, staging / "llama.cpp")
            commit = commit_from_changelog(changelog, pkg_version)
            (staging / "LLAMA_CPP_COMMIT").write_text((commit or "") + "\n")
            (staging / "ORIGIN").write_text(f"{archive.name}\n")
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _extract_converter(archive: Path, dest: Path) -> str:
    """Extract the converter files into `dest`; return the package's CHANGELOG text."""
    extract_vendor(archive, dest, KEEP)
    if not (dest / CONVERTER_SCRIPT).is_file():
        raise ToolchainError(f"{archive.name} does not contain vendor/llama.cpp/{CONVERTER_SCRIPT}")
    return read_changelog(archive)
