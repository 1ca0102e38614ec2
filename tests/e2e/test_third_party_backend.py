"""A backend written outside the repository, installed in the test like any package, is built, validated,
bundled, run, served and benchmarked: the build side and the box find it through the same registry.

The package offers llama.cpp's legacy quantization types (Q4_0, Q5_0), which the built-in gguf backend does
not: its build side reuses edgekit's GGUF build (the public `BuildBackend` API), its engine is edgekit's GGUF
engine. Its `SPEC` lives in a light module, so the runtime can read it without importing its build side.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from edgekit.manifest import verify_bundle
from tests.support.tiny_project import TINY_RECIPE, build_env, make_project

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "edgekit-legacy-quants"
version = "0.1.0"

[project.entry-points."edgekit.backends"]
gguf-legacy = "edgekit_legacy_quants:SPEC"

[tool.setuptools]
packages = ["edgekit_legacy_quants"]
"""
SPEC_MODULE = """
from edgekit.registry import BackendSpec

SPEC = BackendSpec(
    name="gguf-legacy",
    build="edgekit_legacy_quants.build:LegacyQuants",
    engine="edgekit.backends.gguf.engine:open_engine",
    runtime_extra="runtime",
)
"""
BUILD_MODULE = """
from edgekit.backends.gguf.backend import GGUFBuild


class LegacyQuants(GGUFBuild):
    name = "gguf-legacy"
    schemes = ("Q4_0", "Q5_0")
    default_scheme_gates = {}
    bytes_per_param = {"Q4_0": 0.57, "Q5_0": 0.69}
"""


def install_plugin(tmp_path: Path) -> Path:
    package = tmp_path / "plugin"
    (package / "edgekit_legacy_quants").mkdir(parents=True)
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "edgekit_legacy_quants" / "__init__.py").write_text(SPEC_MODULE)
    (package / "edgekit_legacy_quants" / "build.py").write_text(BUILD_MODULE)
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site)]
    proc = subprocess.run([*pip, str(package)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return site


def edgekit(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=900)  # fmt: skip


def test_a_third_party_backend_builds_validates_bundles_runs_serves_and_benches(
    tiny_model: Path, llama_cpp_dir: Path, tmp_path: Path
) -> None:
    env = {**build_env(tmp_path / "cache", llama_cpp_dir), "PYTHONPATH": str(install_plugin(tmp_path))}
    recipe = TINY_RECIPE.replace('backend = "gguf"\nscheme = "Q8_0"', 'backend = "gguf-legacy"\nscheme = "Q4_0"')
    project = make_project(tmp_path / "project", tiny_model, recipe)
    built = edgekit("build", "recipe.toml", env=env, cwd=project)
    assert built.returncode == 0, built.stderr
    bundle = project / "dist" / "tiny"
    (record,) = verify_bundle(bundle)["artifacts"]
    assert (record["name"], record["backend"], record["path"]) == ("gguf-legacy-Q4_0", "gguf-legacy",
                                                                   "models/gguf-legacy-Q4_0.gguf")  # fmt: skip
    assert "Q4_0" in record["tensor_types"]
    report = json.loads((bundle / "report.json").read_text())
    (validated,) = report["artifacts"]
    assert validated["tokenizer_check"]["identical"] and validated["metrics"]["kld_mean"]["n"] > 100
    assert validated["verdict"] == "inconclusive" and "no accuracy gates" in validated["reasons"][0]

    ran = edgekit("run", str(bundle), "--prompt", "Once upon a time", "--max-tokens", "4", "-q", env=env)
    assert ran.returncode == 0 and ran.stdout.strip(), ran.stderr

    benched = edgekit("bench", str(bundle), "--runs", "1", "--prompt-tokens", "8", "--gen-tokens", "4",
                      "--threads", "1", "--concurrency", "1", "--no-baseline", "--no-loads", "--bandwidth-mib", "16",
                      "--json", env=env)  # fmt: skip
    assert benched.returncode == 0, benched.stderr
    measured = json.loads(benched.stdout)["artifacts"]["gguf-legacy-Q4_0"]
    assert "skipped" not in measured and measured["decode_tok_s"] > 0

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "edgekit", "serve", str(bundle), "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, server)
        answer = httpx.post(f"{url}/v1/completions", json={"prompt": "Hello", "max_tokens": 3}, timeout=60)
        assert answer.status_code == 200 and answer.json()["model"].endswith("gguf-legacy-Q4_0"), answer.text
    finally:
        server.terminate()
        server.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, server: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert server.poll() is None, server.stderr.read() if server.stderr else "server exited"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("the server never became ready")
