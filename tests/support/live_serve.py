"""`edgekit serve` as a child process on a free loopback port, for tests that talk to it as clients do."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def live_server(bundle: Path, log_path: Path, timeout: float = 120, args: Sequence[str] = ()) -> Iterator[str]:
    """The server's base URL once /health says ok (`args`: more `edgekit serve` options); stopped on exit."""
    with serve_process(bundle, log_path, timeout, args) as (url, _):
        yield url


@contextlib.contextmanager
def serve_process(
    bundle: Path, log_path: Path, timeout: float = 120, args: Sequence[str] = ()
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The server's base URL and its process once /health says ok; stopped (SIGTERM, then kill) on exit."""
    port = free_port()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edgekit",
                "serve",
                str(bundle),
                "--port",
                str(port),
                "--log-level",
                "warning",
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            assert proc.poll() is None, log_path.read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            assert time.time() < deadline, "serve did not become ready:\n" + log_path.read_text()
            time.sleep(0.1)
        yield url, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
