"""docs/models.md lists the tested architectures per backend exactly as the test matrix defines them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_docs_table_is_generated_from_the_matrix() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "arch_matrix.py"), "--check"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
