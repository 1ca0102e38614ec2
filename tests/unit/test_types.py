"""edgekit/ type-checks: mypy, with the settings in pyproject.toml ([tool.mypy]: check_untyped_defs, the pydantic
plugin), reports no error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_mypy_reports_no_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
                           "--cache-dir", str(tmp_path / "mypy-cache")],
                          capture_output=True, text=True, cwd=REPO, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.stdout.startswith("Success: no issues found"), proc.stdout[-2000:]
