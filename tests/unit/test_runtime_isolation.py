"""The edge box never needs torch: importing the runtime (engines, serve, the CLI's run path) must not load it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.build_side import build_side

MODULES = [
    "edgekit.cli",
    "edgekit.cli.runtime",
    "edgekit.runtime.engines",
    "edgekit.runtime.loader",
    "edgekit.runtime.text.generate",
    "edgekit.runtime.serve.app",
    "edgekit.runtime.serve",
    "edgekit.runtime.serve.scheduler",
    "edgekit.runtime.bench.benchmark",
    "edgekit.runtime.bench.worker",
    "edgekit.runtime.bench.bundle",
    "edgekit.runtime.bench.tune",
    "edgekit.runtime.image",
    "edgekit.runtime.numa",
    "edgekit.runtime.smoke",
    "edgekit.cli.ship",
    "edgekit.ship.trust",
    "edgekit.ship.sign",
    "edgekit.ship.install",
    "edgekit.ship.box",
    "edgekit.ship.pack",
]


def test_runtime_imports_no_torch_transformers_or_build_side() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for name in {MODULES!r}: importlib.import_module(name)\n"
        "import llama_cpp, gguf, starlette, uvicorn\n"
        "from edgekit.registry import spec\n"
        "spec('gguf').engine_module()\n"
        "from edgekit.cli import cli\n"
        "cli.main(['run', '--help'], standalone_mode=False)\n"
        "cli.main(['serve', '--help'], standalone_mode=False)\n"
        "cli.main(['install', '--help'], standalone_mode=False)\n"
        "import model_signing.verifying, zstandard\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = build_side(loaded)
    assert not bad, f"the runtime imported build-side modules: {bad[:10]}"
    assert "edgekit.backends.gguf.engine" in loaded  # found through the registry, as a third party's would be
