"""Everything a box of another architecture installs to run a bundle, as wheels: no compiler, no network.

`box_runtime("aarch64", extras)` gathers into one folder (the toolchain cache, once per content):
- llama-cpp-python cross-compiled for the box (`edgekit.toolchain.box.wheel`);
- edgekit's own wheel, built from its source tree (an editable install) or downloaded at this version;
- every other dependency of `edgekit[extras]`, as the box's Python (3.11) and architecture take them, with
  pip's `download --platform`, at the versions constraints.txt pins where the source tree has one.
`edgekit pack --box aarch64` carries the folder in the pack (`edgekit.ship.box_runtime`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path
from urllib.parse import unquote, urlparse

from filelock import FileLock

from edgekit import __version__
from edgekit._util.hashing import sha256_file, sha256_json
from edgekit.errors import ToolchainError
from edgekit.observe.progress import Progress
from edgekit.toolchain.box.arch import PYTHON, BoxArch, box_arch
from edgekit.toolchain.box.wheel import llama_wheel
from edgekit.toolchain.sdist import toolchain_root

RUNTIME_JSON = "runtime.json"
FORMAT = 1
# 1980-01-01, the first date a zip can hold: edgekit's wheel is then the same bytes for the same source.
SOURCE_DATE_EPOCH = "315532800"


@dataclass(frozen=True)
class BoxRuntime:
    """A folder of wheels that installs `edgekit[extras]` on a box of `arch` with Python `python`."""

    arch: str
    march: str
    python: str
    edgekit: str
    extras: tuple[str, ...]
    folder: Path
    wheels: dict[str, str]  # file name → sha256

    @property
    def requirement(self) -> str:
        return f"edgekit[{','.join(self.extras)}]=={self.edgekit}"

    def describe(self) -> dict[str, object]:
        return {"format": FORMAT, "arch": self.arch, "march": self.march, "python": self.python,
                "edgekit": self.edgekit, "extras": list(self.extras), "requirement": self.requirement,
                "wheels": self.wheels}  # fmt: skip


def box_runtime(arch_name: str, extras: tuple[str, ...], progress: Progress, *, march: str | None = None,
                jobs: int | None = None) -> BoxRuntime:  # fmt: skip
    arch = box_arch(arch_name)
    chosen = arch.march(march)
    extras = tuple(sorted(extras))
    llama = llama_wheel(arch, chosen, progress, jobs)
    with tempfile.TemporaryDirectory(prefix="edgekit-wheel-") as tmp:
        own = _edgekit_wheel(Path(tmp))
        constraints = _constraints()
        key = sha256_json({"format": FORMAT, "edgekit": sha256_file(own), "llama": sha256_file(llama),
                           "extras": extras, "python": PYTHON,
                           "constraints": sha256_file(constraints) if constraints else None})  # fmt: skip
        folder = toolchain_root() / "box" / arch.name / f"runtime-{__version__}-{key[:12]}"
        with FileLock(str(folder.parent / f".{folder.name}.lock")):
            if not (folder / RUNTIME_JSON).is_file():
                with progress.task(f"toolchain  download the {arch.name} wheels of edgekit[{','.join(extras)}] "
                                   f"for Python {PYTHON}"):  # fmt: skip
                    _gather(arch, extras, own, llama, constraints, folder)
                _describe(arch, chosen, extras, folder)
                _prune(folder)
    stored = json.loads((folder / RUNTIME_JSON).read_text(encoding="utf-8"))
    return BoxRuntime(arch.name, chosen, PYTHON, __version__, extras, folder, stored["wheels"])


def _gather(arch: BoxArch, extras: tuple[str, ...], own: Path, llama: Path, constraints: Path | None,
            folder: Path) -> None:  # fmt: skip
    work = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".partial"))
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--only-binary=:all:",
               "--python-version", PYTHON, "--implementation", "cp", "--abi", f"cp{PYTHON.replace('.', '')}",
               "--abi", "abi3", "--abi", "none", *(a for p in arch.pip_platforms for a in ("--platform", p)),
               "--find-links", str(llama.parent), "--find-links", str(own.parent), "-d", str(work),
               f"edgekit[{','.join(extras)}]=={__version__}"]  # fmt: skip
        if constraints:
            cmd += ["-c", str(constraints)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
            raise ToolchainError(f"pip could not gather the {arch.name} wheels of edgekit[{','.join(extras)}] "
                                 f"for Python {PYTHON}:\n{tail}", "check access to the package registry; a "
                                 "dependency without a wheel for the box cannot be installed there without a "
                                 "compiler")  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(work, folder)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _prune(kept: Path, keep: int = 3) -> None:
    """Older wheel folders of this architecture (another edgekit source, other extras): the newest few stay."""
    others = sorted((p for p in kept.parent.glob("runtime-*") if p.is_dir() and p != kept),
                    key=lambda p: p.stat().st_mtime, reverse=True)  # fmt: skip
    for old in others[keep - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def _describe(arch: BoxArch, march: str, extras: tuple[str, ...], folder: Path) -> None:
    wheels = {p.name: sha256_file(p) for p in sorted(folder.glob("*.whl"))}
    described = BoxRuntime(arch.name, march, PYTHON, __version__, extras, folder, wheels).describe()
    tmp = folder / f".{RUNTIME_JSON}.tmp"
    tmp.write_text(json.dumps(described, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, folder / RUNTIME_JSON)


def _source_tree() -> Path | None:
    """The folder edgekit is installed from in editable mode (a checkout), or None.

    Every edgekit distribution on the path is asked: in the checkout itself, setuptools' `edgekit.egg-info`
    comes first and has no direct_url.json."""
    for found in distributions(name="edgekit"):
        info = json.loads(found.read_text("direct_url.json") or "{}")
        url = urlparse(info.get("url", ""))
        if url.scheme == "file" and info.get("dir_info", {}).get("editable"):
            return Path(unquote(url.path))
    return None


def _edgekit_wheel(into: Path) -> Path:
    source = _source_tree()
    if source is not None:
        # Built from a copy: setuptools writes edgekit.egg-info into the tree it builds, which would then shadow
        # the installed metadata of the checkout.
        tree = _copy_of_package(source, into / "src")
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-w", str(into),
               str(tree)]  # fmt: skip
    else:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-d", str(into), f"edgekit=={__version__}"]  # fmt: skip
    env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wheels = list(into.glob("edgekit-*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise ToolchainError(f"could not get edgekit {__version__}'s own wheel for the box:\n{tail}",
                             "install edgekit from a checkout (pip install -e), or from a registry")  # fmt: skip
    return wheels[0]


def _copy_of_package(source: Path, dest: Path) -> Path:
    """What building edgekit's wheel reads: pyproject.toml, the README it names, the edgekit package."""
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)
    shutil.copytree(source / "edgekit", dest / "edgekit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _constraints() -> Path | None:
    source = _source_tree()
    found = source / "constraints.txt" if source else None
    return found if found and found.is_file() else None
