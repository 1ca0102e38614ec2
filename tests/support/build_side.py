"""Which imported modules belong to the build side: what a box (run, serve, an engine) must never load."""

from __future__ import annotations

import re

BUILD_PACKAGES = (
    "torch", "transformers", "optimum", "nncf",
    "edgekit.stages", "edgekit.plan", "edgekit.pipeline", "edgekit.executors", "edgekit.recipe", "edgekit.report",
    "edgekit.backends.base", "edgekit.backends.catalog", "edgekit.backends.child", "edgekit.backends.calibration",
    "edgekit.backends.support", "edgekit.backends.optimum_backend",
)  # fmt: skip
# A backend package's build side: its backend module, child-process entry points, default gates, quantizer tools.
BUILD_MODULE = re.compile(
    r"^edgekit\.backends\.\w+\.(backend|child|gates|quantize_child|llama_tools|sensitivity|options)(\.|$)"
)


def build_side(modules: list[str]) -> list[str]:
    return [
        m for m in modules if m in BUILD_PACKAGES or m.startswith(tuple(p + "." for p in BUILD_PACKAGES))
        or BUILD_MODULE.match(m)
    ]  # fmt: skip
