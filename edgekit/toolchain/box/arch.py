"""The box architectures edgekit builds a runtime for, and what that takes for each."""

from __future__ import annotations

import re
from dataclasses import dataclass

from edgekit._util.arch import arch_name
from edgekit.errors import UsageError

# The box's Python: Debian bookworm's, as on the images of Jetson, i.MX and Raspberry Pi OS boards today.
PYTHON = "3.11"
# The oldest glibc a box may have for the wheels pip picks (manylinux_2_17 = CentOS 7's) up to bookworm's 2.36.
GLIBC = range(17, 37)


@dataclass(frozen=True)
class BoxArch:
    """One CPU architecture: how to cross-compile llama.cpp for it and which wheels pip may take for it."""

    name: str  # as `uname -m` prints it
    gnu_triplet: str  # the cross-compiler's prefix (Debian's gcc-<triplet>)
    system_processor: str  # CMAKE_SYSTEM_PROCESSOR
    baseline: str  # the -march every box of the architecture runs (GGML_CPU_ARM_ARCH)
    march_pattern: str  # what --march accepts

    @property
    def wheel_platform(self) -> str:
        """The tag of a wheel compiled here for the box (linux_*: built against bookworm's glibc, not manylinux)."""
        return f"linux_{self.name}"

    @property
    def pip_platforms(self) -> tuple[str, ...]:
        return (self.wheel_platform, *(f"manylinux_2_{minor}_{self.name}" for minor in GLIBC),
                f"manylinux2014_{self.name}")  # fmt: skip

    def march(self, wanted: str | None) -> str:
        chosen = wanted or self.baseline
        if not re.fullmatch(self.march_pattern, chosen):
            raise UsageError(f"--march {chosen!r} is not an {self.name} architecture for gcc's -march",
                             f"give one like {self.baseline} or armv8.2-a+dotprod+i8mm")  # fmt: skip
        return chosen


# ARMv8-A with NEON is what every ARM64 box runs (Cortex-A53 to Neoverse). llama.cpp picks its kernels at compile
# time on ARM (its runtime dispatch needs GGML_BACKEND_DL, which llama-cpp-python does not load), so a fleet of
# newer boards can be given --march armv8.2-a+dotprod+i8mm for the dot-product and int8 matrix kernels.
ARCHES: dict[str, BoxArch] = {
    "aarch64": BoxArch("aarch64", "aarch64-linux-gnu", "aarch64", "armv8-a", r"armv[89](\.[0-9])?-a(\+[a-z0-9]+)*"),
}


def box_arch(name: str) -> BoxArch:
    normalised = arch_name(name)
    if normalised not in ARCHES:
        known = ", ".join(ARCHES)
        raise UsageError(f"no box runtime is built for {name!r}", f"use one of: {known}; an x86-64 box installs "
                         "edgekit[runtime] with pip (scripts/install.sh compiles llama-cpp-python)")  # fmt: skip
    return ARCHES[normalised]
