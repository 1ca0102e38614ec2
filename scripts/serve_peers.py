"""Start `edgekit serve BUNDLE` and llama.cpp's `llama-server` on the same GGUF file, configured alike.

Used by `scripts/bench_serve.py --launch BUNDLE`. The bundle is verified and its runtime config resolved
for this box by edgekit's own loader (runtime.toml + runtime.local.toml; threads capped to the CPUs we may
use; NUMA decided); llama-server (built by `edgekit toolchain --server` from the same llama.cpp commit as
the runtime) gets the same settings: threads, batch threads, context per slot × slots, parallel slots,
batch size, mmap/mlock and NUMA strategy. Everything else stays at llama-server's own defaults (prompt
cache in RAM, slot selection by prompt similarity, continuous batching).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from edgekit.runtime.loader import BundleInfo, inspect_bundle
from edgekit.toolchain import llama_tool

NUMA_FLAGS = {"isolate": "isolate", "distribute": "distribute"}
LOAD_MODES = {(True, False): "mmap", (True, True): "mmap+mlock", (False, True): "mlock", (False, False): "none"}


def llama_server_command(info: BundleInfo, port: int, host: str = "127.0.0.1") -> list[str]:
    config = info.config
    if info.artifact["backend"] != "gguf":
        raise SystemExit(f"{info.model_name} is not a GGUF artifact: llama-server runs GGUF files only")
    command = [
        str(llama_tool("llama-server")),
        "--model", str(info.model_path),
        "--host", host,
        "--port", str(port),
        "--threads", str(config.n_threads),
        "--threads-batch", str(config.n_threads_batch),
        "--ctx-size", str(config.n_ctx * config.max_concurrent),
        "--parallel", str(config.max_concurrent),
        "--batch-size", str(max(config.n_batch, config.max_concurrent)),
        "--ubatch-size", str(max(config.n_batch, config.max_concurrent)),
        "--load-mode", LOAD_MODES[config.use_mmap, config.use_mlock],
        "--metrics",
        "--no-webui",
    ]  # fmt: skip
    if config.numa in NUMA_FLAGS:
        command += ["--numa", "numactl" if os.environ.get("EDGEKIT_NUMACTL") else NUMA_FLAGS[config.numa]]
    return command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"{url} was not ready after {timeout:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def launched(bundle: Path) -> Iterator[tuple[str, str]]:
    """(edgekit URL, llama-server URL), both ready; both stopped on exit."""
    info = inspect_bundle(bundle)
    ports = free_port(), free_port()
    commands = [
        [sys.executable, "-m", "edgekit", "serve", str(bundle), "--port", str(ports[0]), "--log-level", "warning"],
        llama_server_command(info, ports[1]),
    ]
    logs = Path(tempfile.mkdtemp(prefix="serve-peers-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, command in enumerate(commands):
            with open(logs / f"server{i}.log", "wb") as log:
                procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        for url, proc, i in zip(urls, procs, range(2), strict=True):
            wait_ready(url, proc, logs / f"server{i}.log")
        print(f"edgekit serve: {urls[0]}\nllama-server:  {urls[1]}\n  {' '.join(commands[1])}", file=sys.stderr)
        yield urls[0], urls[1]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
