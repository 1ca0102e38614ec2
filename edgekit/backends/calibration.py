"""Calibration data for data-aware quantization (OpenVINO INT4, ONNX Runtime outlier exclusion).

The parent writes the calibration text beside the child's log for the duration of the child; the
child cuts token windows from the end of it (validation scores the start of the same text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import StageError

CALIBRATION_FILE = "calibration.txt"
SOURCE = "the [validation] text, token windows taken from its end (validation scores its start)"
BUG = "this is a bug in edgekit: the pipeline passes the [validation] text when needs_calibration() says so"


def add_calibration(
    spec: dict[str, Any], out_dir: Path, text: str | None, samples: int, tokens: int, what: str
) -> dict[str, Any]:
    """Write the text for the child and point `spec` at it; return the record the manifest keeps.

    The caller removes the file with `remove_calibration` once the child has run.
    """
    if text is None:
        raise StageError("quantize", f"{what} was given no calibration text", BUG)
    spec["calibration_file"] = str(out_dir / CALIBRATION_FILE)
    (out_dir / CALIBRATION_FILE).write_text(text, encoding="utf-8")
    return {"source": SOURCE, "samples": samples, "tokens_per_sample": tokens}


def remove_calibration(out_dir: Path) -> None:
    (out_dir / CALIBRATION_FILE).unlink(missing_ok=True)


def windows_from_end(ids: np.ndarray, samples: int, length: int) -> list[np.ndarray]:
    """Up to `samples` windows of `length` token ids, from the end of `ids` backwards."""
    windows = []
    for i in range(samples):
        end = len(ids) - i * length
        if end - length < 0:
            break
        windows.append(ids[end - length : end])
    if not windows:
        raise SystemExit(f"the calibration text has {len(ids)} tokens, fewer than one window of {length}")
    print(f"calibration: {len(windows)} windows of {length} tokens from the end of a {len(ids)}-token text", flush=True)
    return windows
