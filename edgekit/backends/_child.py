"""Run a backend's heavy step (export, compression) in a child Python process, logged to a file.

A child keeps torch tracer warnings, NNCF and ONNX Runtime progress bars and C++ logs out of the
user's terminal and in a log we can show the tail of; it returns its memory when it exits, and it
dies with the build (`die_with_parent`) instead of writing into a temp folder nobody will use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from edgekit.errors import StageError
from edgekit.procutil import die_with_parent


def run_child(module: str, spec: dict[str, Any], log_path: Path, what: str, threads: int | None = None) -> str:
    """`python -m module SPEC.json`, the spec written beside the log; raises StageError with the log's tail."""
    spec_path = log_path.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
           "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            proc = subprocess.run(
                [sys.executable, "-m", module, str(spec_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=die_with_parent(),
            )
    finally:
        spec_path.unlink(missing_ok=True)
    text = log_path.read_text(encoding="utf-8", errors="replace")
    if proc.returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-15:])
        raise StageError(what, f"failed with exit code {proc.returncode}:\n{tail}", f"full log: {log_path}")
    return text


def read_spec(argv: list[str]) -> dict[str, Any]:
    """In the child: the spec its parent wrote."""
    if len(argv) != 1:
        raise SystemExit("usage: python -m MODULE SPEC.json (run by edgekit, not by hand)")
    return json.loads(Path(argv[0]).read_text(encoding="utf-8"))
