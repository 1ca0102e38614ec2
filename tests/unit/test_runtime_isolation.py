"""The edge box never needs torch: importing the runtime (engines, serve, the CLI's run path) must not load it."""

from __future__ import annotations

import json
import subprocess
import sys

MODULES = [
    "edgekit.cli",
    "edgekit.cli_runtime",
    "edgekit.runtime.engines",
    "edgekit.runtime.engines.gguf",
    "edgekit.runtime.loader",
    "edgekit.runtime.generate",
    "edgekit.runtime.server",
    "edgekit.runtime.serve",
    "edgekit.runtime.scheduler",
    "edgekit.runtime.benchmark",
    "edgekit.runtime.bench_worker",
    "edgekit.runtime.bundle_bench",
    "edgekit.runtime.tune",
    "edgekit.runtime.image",
    "edgekit.runtime.numa",
]
FORBIDDEN = ("torch", "transformers", "edgekit.stages", "edgekit.backends", "edgekit.recipe", "edgekit.pipeline")


def test_runtime_imports_no_torch_transformers_or_build_side() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for name in {MODULES!r}: importlib.import_module(name)\n"
        "import llama_cpp, gguf, starlette, uvicorn\n"
        "from edgekit.cli import cli\n"
        "cli.main(['run', '--help'], standalone_mode=False)\n"
        "cli.main(['serve', '--help'], standalone_mode=False)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = [m for m in loaded if m in FORBIDDEN or m.startswith(tuple(f + "." for f in FORBIDDEN))]
    assert not bad, f"the runtime imported build-side modules: {bad[:10]}"
