"""What `edgekit bench BUNDLE --json` measured on a target box, brought back to the build machine as a file.

A `scheme = "auto"` ladder with `objective = "fastest"` ranks its passing candidates by these figures
(`edgekit build RECIPE --box-results FILE`) instead of benchmarking them here: the build machine's speed
says little about an ARM box's, where llama.cpp repacks Q4_0 and IQ4_NL for NEON, i8mm or SVE. A figure
belongs to a candidate when the model file the box measured has the candidate's sha256 (the bench result
lists the file of every artifact it measured), so a bundle of the ladder's schemes built as explicit
targets and benched on the box serves any later build of the same model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.errors import UsageError
from edgekit.runtime.bench.results import BenchResult

HOW = "on the box: edgekit bench BUNDLE --json > box.json, with a bundle of the ladder's schemes as targets"


@dataclass(frozen=True)
class BoxFigure:
    """One model file's decode rate on one box."""

    decode_tok_s: float
    box: str  # the box's machine, as its bench described it
    file: str  # the results file it came from


@dataclass(frozen=True)
class BoxResults:
    """Decode rates measured on target boxes, by the sha256 of the model file measured."""

    figures: dict[str, BoxFigure]
    files: tuple[str, ...]

    def of(self, sha256: str | None) -> BoxFigure | None:
        return self.figures.get(sha256 or "")

    @classmethod
    def load(cls, paths: list[Path]) -> BoxResults:
        figures: dict[str, BoxFigure] = {}
        for path in paths:
            for sha256, figure in _read(path).items():
                known = figures.get(sha256)
                if known is None or figure.decode_tok_s > known.decode_tok_s:
                    figures[sha256] = figure  # the same file measured on two boxes: the faster box's figure
        return cls(figures, tuple(str(p) for p in paths))


def _read(path: Path) -> dict[str, BoxFigure]:
    try:
        stored: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        result = BenchResult.from_json(stored)
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"--box-results {path}: not an `edgekit bench --json` result ({exc})", HOW) from None
    machine = result.machine or {}
    if machine.get("emulated"):
        raise UsageError(
            f"--box-results {path}: measured under emulation ({machine.get('arch')} on a "
            f"{machine.get('cpu_model')}): speed under emulation says nothing about the box",
            "bench the bundle on the box itself",
        )
    files = (result.bundle or {}).get("artifact_sha256")
    if not files:
        raise UsageError(f"--box-results {path}: it does not say which model files it measured "
                         "(an `edgekit bench` before this version, or a build's bench)", HOW)  # fmt: skip
    box = f"{machine.get('arch', '?')} {machine.get('cpu_model', '?')}, {machine.get('physical_cores', '?')} cores"
    out = {}
    for name, sha256 in files.items():
        rate = result.figures(name).get("decode_tok_s")
        if isinstance(rate, int | float) and rate > 0:
            out[sha256] = BoxFigure(float(rate), box, str(path))
    return out
