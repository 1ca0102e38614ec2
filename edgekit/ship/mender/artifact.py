"""`edgekit pack --mender`: the signed pack as a Mender artifact, and the module a box needs to install it.

`mender-artifact write module-image -T edgekit-bundle` wraps the .edgekit pack as the payload, for the
device types given; its name is NAME-RELEASE. On the box, `edgekit mender-module` writes the update module
into Mender's modules folder: a two-line script that runs this Python's `edgekit.ship.mender` for one
install root (and trust folder).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from edgekit._util.fsutil import write_bytes_atomic
from edgekit._util.hashing import sha256_file
from edgekit.errors import EdgekitError, ExitCode, PackError, UsageError
from edgekit.ship.pack import Packed

MODULE = "edgekit-bundle"
MODULES_DIR = Path("/usr/share/mender/modules/v3")
DEVICE_TYPE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"


class MenderToolMissing(EdgekitError):
    exit_code = ExitCode.ENVIRONMENT


@dataclass(frozen=True)
class MenderArtifact:
    path: Path
    sha256: str
    size: int
    name: str
    device_types: tuple[str, ...]


def check_mender(device_types: tuple[str, ...]) -> str:
    """Before anything is written: the tool, and device types Mender would take. Returns the tool's path."""
    tool = shutil.which("mender-artifact")
    if tool is None:
        raise MenderToolMissing("mender-artifact is not installed", "apt-get install mender-artifact")
    if not device_types:
        raise UsageError("--mender needs at least one --device-type", "e.g. --device-type raspberrypi5")
    for device_type in device_types:
        if not re.fullmatch(DEVICE_TYPE, device_type):
            raise UsageError(f"{device_type!r} is not a device type", "letters, digits and . _ -, as in "
                             "/var/lib/mender/device_type")  # fmt: skip
    return tool


def write_mender(packed: Packed, device_types: tuple[str, ...]) -> MenderArtifact:
    tool = check_mender(device_types)
    name = f"{packed.name}-{packed.release}"
    out = packed.path.with_suffix(".mender")
    tmp = out.with_name(f".{out.name}.tmp")
    command = [tool, "write", "module-image", "-T", MODULE, "-n", name, "-o", str(tmp), "-f", str(packed.path)]
    for device_type in device_types:
        command += ["-t", device_type]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise PackError(str(out), f"mender-artifact failed: {proc.stderr.strip()[-300:]}")
    tmp.replace(out)
    return MenderArtifact(out, sha256_file(out), out.stat().st_size, name, device_types)


def install_module(root: Path, modules_dir: Path = MODULES_DIR, trust_dir: Path | None = None) -> Path:
    """Write Mender's `edgekit-bundle` update module: this Python, this install root (and trust folder)."""
    env = f"EDGEKIT_TRUST_DIR={shlex.quote(str(trust_dir.absolute()))} " if trust_dir else ""
    script = (f"#!/bin/sh\n# edgekit's Mender update module (edgekit mender-module)\n{env}exec "
              f"{shlex.quote(sys.executable)} -m edgekit.ship.mender --root {shlex.quote(str(root.absolute()))} "
              '"$@"\n')  # fmt: skip
    modules_dir.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(modules_dir / MODULE, script.encode(), mode=0o755)
    return modules_dir / MODULE
