"""The runtime a pack may carry for a box of another architecture: `edgekit pack BUNDLE --box aarch64`.

After the bundle's files, such a pack holds `box-runtime/runtime.json` (the architecture, Python, the requirement and
the sha256 of every other runtime file), `box-runtime/install.sh` and `box-runtime/wheels/*.whl`. A new box takes them
out with tar and runs `sh box-runtime/install.sh` (no compiler, no network: `edgekit/bundle_files/install-runtime.sh`),
then `edgekit install PACK` as any box does. The runtime is not part of the release: `edgekit install` checks
that it is for this box's architecture and that every file has its listed sha256, and does not keep it.

The model signature covers the bundle, not these wheels: a box bootstraps from a pack whose sha256 (which
`edgekit pack` prints) it knows; from then on only what the trust policy signed runs.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from jinja2 import Template

from edgekit._util.arch import arch_name
from edgekit._util.hashing import CHUNK
from edgekit.errors import BoxMismatch, PackError
from edgekit.manifest import plain_relative

DIR = "box-runtime"
DESCRIPTION = f"{DIR}/runtime.json"
INSTALL = "install.sh"
TEMPLATE = Path(__file__).resolve().parent.parent / "bundle_files" / "install-runtime.sh"
DESCRIPTION_MAX = 2**20


class BoxRuntime(Protocol):
    """The wheels a box of `arch` installs `requirement` from (`edgekit.toolchain.box.BoxRuntime` is one)."""

    @property
    def arch(self) -> str: ...
    @property
    def march(self) -> str: ...
    @property
    def python(self) -> str: ...
    @property
    def requirement(self) -> str: ...
    @property
    def folder(self) -> Path: ...
    @property
    def wheels(self) -> dict[str, str]: ...  # file name → sha256


@dataclass(frozen=True)
class Member:
    """One runtime file as a pack member: its name in the pack, and its bytes or the file that holds them."""

    name: str
    path: Path | None = None
    data: bytes = b""
    mode: int = 0o644


def members(runtime: BoxRuntime) -> list[Member]:
    install = Template(TEMPLATE.read_text(encoding="utf-8"), keep_trailing_newline=True).render(
        arch=runtime.arch, python=runtime.python, requirement=runtime.requirement).encode()  # fmt: skip
    files = {INSTALL: hashlib.sha256(install).hexdigest(), **{f"wheels/{n}": s for n, s in runtime.wheels.items()}}
    description = {"format": 1, "arch": runtime.arch, "march": runtime.march, "python": runtime.python,
                   "requirement": runtime.requirement, "files": files}  # fmt: skip
    return [
        Member(DESCRIPTION, data=(json.dumps(description, indent=2) + "\n").encode()),
        Member(f"{DIR}/{INSTALL}", data=install, mode=0o755),
        *(Member(f"{DIR}/wheels/{name}", path=runtime.folder / name) for name in runtime.wheels),
    ]


def check_runtime(tar: tarfile.TarFile, first: tarfile.TarInfo, rest: Iterator[tarfile.TarInfo], label: str) -> None:
    """Read the runtime members (`first` is the first of them): for this box's architecture, each file as listed.

    Nothing is written: the runtime was installed from the pack by `box-runtime/install.sh`."""
    if first.name != DESCRIPTION or not first.isreg() or first.size > DESCRIPTION_MAX:
        raise PackError(label, f"after the bundle's files a pack may hold only its box runtime, starting with "
                               f"{DESCRIPTION}; found {first.name!r}")  # fmt: skip
    description = _description(tar, first, label)
    if description["arch"] != arch_name():
        raise BoxMismatch(label, description["arch"], arch_name())
    listed: dict[str, str] = description["files"]
    seen: set[str] = set()
    for member in rest:
        rel = member.name.removeprefix(f"{DIR}/")
        if rel == member.name or rel not in listed or rel in seen or not member.isreg():
            raise PackError(label, f"member {member.name} is not a file {DESCRIPTION} lists (an extra file)")
        if _sha256(tar, member) != listed[rel]:
            raise PackError(label, f"{member.name}: sha256 differs from {DESCRIPTION} (a changed byte)")
        seen.add(rel)
    if missing := sorted(set(listed) - seen):
        raise PackError(label, f"truncated: its box runtime lacks {DIR}/{missing[0]}" + (
            f" and {len(missing) - 1} more files" if len(missing) > 1 else ""))  # fmt: skip


def _description(tar: tarfile.TarFile, member: tarfile.TarInfo, label: str) -> dict[str, Any]:
    stream = tar.extractfile(member)
    try:
        found = json.loads(stream.read() if stream else b"")
        files = found["files"]
        arch = found["arch"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise PackError(label, f"{DESCRIPTION} is not a box runtime's description ({exc})") from None
    if (
        not isinstance(arch, str)
        or not isinstance(files, dict)
        or not all(isinstance(k, str) and plain_relative(k) and isinstance(v, str) for k, v in files.items())
    ):
        raise PackError(label, f"{DESCRIPTION} lists its files wrongly")
    return dict(found)


def _sha256(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    stream = tar.extractfile(member)
    digest = hashlib.sha256()
    while stream is not None and (chunk := stream.read(CHUNK)):
        digest.update(chunk)
    return digest.hexdigest()
