"""The llama-cpp-python source package of the installed version: where llama.cpp's converter and tools come from.

It holds llama.cpp's whole tree under `vendor/llama.cpp` at the commit the installed runtime was built
from. We download it with pip (from the configured registry, or pip's cache) into a temporary folder;
nothing of it is copied into this repository.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from edgekit.errors import MissingDependencyError, ToolchainError

VENDOR = "vendor/llama.cpp/"


def llama_cpp_python_version() -> str:
    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        raise MissingDependencyError("llama-cpp-python", "gguf") from None


def toolchain_root() -> Path:
    """Where llama.cpp's tools are kept, once per version: $EDGEKIT_TOOLCHAIN, else ~/.cache/edgekit/toolchain.

    Apart from the stage cache, so a fresh or throw-away stage cache (CI, tests) does not fetch them again.
    """
    if env := os.environ.get("EDGEKIT_TOOLCHAIN"):
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "edgekit" / "toolchain"


def version_dir(pkg_version: str, part: str = "") -> Path:
    """What is kept for one llama-cpp-python version: its converter (`part` ""), its built tools ("tools")."""
    return toolchain_root() / f"llama-cpp-python-{pkg_version}{'-' + part if part else ''}"


def download_sdist(pkg_version: str, into: Path, what: str) -> Path:
    """The source package's .tar.gz, downloaded into `into`; `what` says what it is needed for (in errors)."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
        "--disable-pip-version-check", "-d", str(into), f"llama-cpp-python=={pkg_version}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    archives = list(into.glob("llama_cpp_python-*.tar.gz"))
    if proc.returncode != 0 or not archives:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise ToolchainError(
            f"could not download the llama-cpp-python {pkg_version} source package for {what}:\n{tail}",
            "check access to the package registry, or set EDGEKIT_LLAMA_CPP_DIR to a llama.cpp checkout "
            "of the same version",
        )
    return archives[0]


def read_changelog(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name.split("/", 1)[-1] == "CHANGELOG.md":
                extracted = tar.extractfile(member)
                return extracted.read().decode("utf-8", "replace") if extracted else ""
    return ""


def extract_vendor(archive: Path, dest: Path, keep: tuple[str, ...] | None = None) -> None:
    """Extract `vendor/llama.cpp/` (only the paths starting with one of `keep`, when given) into `dest`."""
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            inner = member.name.split("/", 1)[-1]
            rel = inner.removeprefix(VENDOR)
            if rel == inner or not rel or (keep is not None and not rel.startswith(keep)):
                continue
            member.name = rel
            members.append(member)
        if not members:
            raise ToolchainError(f"{archive.name} does not contain {VENDOR}")
        dest.mkdir(parents=True, exist_ok=True)
        tar.extractall(dest, members=members, filter="data")


def commit_from_changelog(changelog: str, pkg_version: str) -> str | None:
    """llama-cpp-python's changelog names the llama.cpp commit each release vendors."""
    section = re.search(rf"^## \[{re.escape(pkg_version)}\](.*?)(?=^## \[|\Z)", changelog, re.M | re.S)
    if not section:
        return None
    match = re.search(r"llama\.cpp@([0-9a-f]{7,40})", section.group(1))
    return match.group(1) if match else None
