"""Run `edgekit` in this process (its real entry point: one error table, exit codes) and make small bundles."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

from edgekit._util.hashing import file_records
from edgekit.manifest import MANIFEST, SCHEMA_VERSION


def edgekit(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """`edgekit ARGS` as `main()` runs it: (exit code, stdout, stderr)."""
    from edgekit.cli import cli
    from edgekit.cli.errors import run_reporting_errors

    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.chdir(cwd or os.getcwd()):
        try:
            run_reporting_errors(lambda: cli.main(list(args), prog_name="edgekit", standalone_mode=False))
        except SystemExit as exc:
            code = exc.code
    return (code if isinstance(code, int) else 1), out.getvalue(), err.getvalue()


def make_runnable_bundle(root: Path, tensor_types: object = None, metrics: object = None) -> Path:
    """A bundle whose manifest lists one GGUF artifact (its bytes are not a real model: nothing here loads it),
    a runtime.toml, and a report whose shapes vary as the report allows (bare counts, bare numbers)."""
    (root / "models").mkdir(parents=True)
    (root / "models" / "m.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 4 + b"\1" * 4)
    (root / "runtime.toml").write_text('[runtime]\nartifact = "m"\nn_threads = 1\nn_threads_batch = 1\n')
    types = {"Q8_0": 1200, "F32": {"tensors": 3, "params": 30}} if tensor_types is None else tensor_types
    report_metrics = {"kld_mean": {"value": 0.01, "ci95": [0.0, 0.02], "n": 10}, "top1": 0.97} if metrics is None \
        else metrics  # fmt: skip
    (root / "report.json").write_text(json.dumps({"artifacts": [{"name": "m", "metrics": report_metrics}]}))
    artifact = {"name": "m", "backend": "gguf", "scheme": "Q8_0", "path": "models/m.gguf", "size": 1032,
                "tensor_types": types, "bits_per_weight": 8.5, "verdict": "pass"}  # fmt: skip
    manifest = {"schema_version": SCHEMA_VERSION, "name": "tiny", "created": "2026-01-01T00:00:00Z",
                "edgekit_version": "0", "source": {"uri": "model"}, "artifacts": [artifact], "default_artifact": "m",
                "files": [r for r in file_records(root) if r["path"] != MANIFEST]}  # fmt: skip
    (root / MANIFEST).write_text(json.dumps(manifest))
    return root
