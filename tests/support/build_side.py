"""Which imported modules belong to the build side: what a box (run, serve, an engine) must never load."""

from __future__ import annotations

import re

BUILD_PACKAGES = (
    "torch", "transformers", "optimum", "nncf",
    "edgekit.stages", "edgekit.plan", "edgekit.pipeline", "edgekit.executors", "edgekit.recipe", "edgekit.report",
    "edgekit.backends.base", "edgekit.backends.child", "edgekit.backends.calibration",
)  # fmt: skip
# A backend package's build side: its build module, child-process entry points and default gates.
BUILD_MODULE = re.compile(
    r"^edgekit\.backends\.\w+\.(build|child|gates|quantize_child|levers|sensitivity|options)(\.|$)"
)


def build_side(modules: list[str]) -> list[str]:
    return [
        m for m in modules if m in BUILD_PACKAGES or m.startswith(tuple(p + "." for p in BUILD_PACKAGES))
        or BUILD_MODULE.match(m)
    ]  # fmt: skip
