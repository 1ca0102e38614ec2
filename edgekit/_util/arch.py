"""CPU architecture names as `uname -m` prints them on Linux."""

from __future__ import annotations

import platform

# Other spellings of the same architectures (macOS and Windows, Docker's platform names).
ALIASES = {"arm64": "aarch64", "amd64": "x86_64"}


def arch_name(name: str | None = None) -> str:
    """`name` (default: this machine's) as Linux spells it: aarch64, x86_64."""
    found = (name if name is not None else platform.machine()).lower()
    return ALIASES.get(found, found)
