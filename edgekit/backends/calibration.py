"""Calibration data for data-aware quantization (OpenVINO INT4, ONNX Runtime outlier exclusion).

The plan cuts the calibration tokens once, from a range of text that validation never scores (see
`edgekit.plan.calibration`), and hands the token ids to the backend. The parent writes them beside the
child's log for the duration of the child; the child cuts them into windows, each a fresh sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import StageError

CALIBRATION_FILE = "calibration.npy"
BUG = "this is a bug in edgekit: the plan passes calibration token ids when calibration_tokens() is not 0"


def add_calibration(
    spec: dict[str, Any], out_dir: Path, ids: Sequence[int] | None, samples: int, tokens: int, what: str
) -> dict[str, Any]:
    """Write the token ids for the child and point `spec` at it; return the record the manifest keeps.

    The caller removes the file with `remove_calibration` once the child has run.
    """
    if ids is None or len(ids) < samples * tokens:
        given = 0 if ids is None else len(ids)
        raise StageError("quantize", f"{what} needs {samples * tokens} calibration tokens and was given {given}", BUG)
    spec["calibration_file"] = str(out_dir / CALIBRATION_FILE)
    np.save(out_dir / CALIBRATION_FILE, np.asarray(ids, dtype=np.int64))
    return {"samples": samples, "tokens_per_sample": tokens}


def remove_calibration(out_dir: Path) -> None:
    (out_dir / CALIBRATION_FILE).unlink(missing_ok=True)


def calibration_windows(spec: dict[str, Any]) -> list[np.ndarray]:
    """The child's side: `calibration_samples` consecutive windows of `calibration_tokens` ids."""
    ids = np.load(spec["calibration_file"]).astype(np.int64)
    samples, length = spec["calibration_samples"], spec["calibration_tokens"]
    windows = [ids[i * length : (i + 1) * length] for i in range(min(samples, len(ids) // length))]
    print(f"calibration: {len(windows)} windows of {length} tokens ({len(ids)} ids given)", flush=True)
    return windows
