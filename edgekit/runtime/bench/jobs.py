"""Measurements in worker processes (a fresh one per job, or one `Worker` serving an artifact's jobs), and what
the machine allows (mlock)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

import edgekit
from edgekit.errors import BenchError
from edgekit.runtime.bench.worker import RESULT_MARK

WORKER = [sys.executable, "-m", "edgekit.runtime.bench.worker"]
# An explicit threshold turns off glibc's dynamic one, which rises after large frees and then serves the next
# large buffers from the heap, where a serving worker's next job would find them counted in its RSS.
MMAP_THRESHOLD = str(4 * 2**20)


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    package_root = str(Path(edgekit.__file__).resolve().parents[1])  # the folder that holds edgekit/
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["MALLOC_MMAP_THRESHOLD_"] = MMAP_THRESHOLD
    return env


def run_job(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return its result."""
    try:
        proc = subprocess.run(WORKER, input=json.dumps(job), capture_output=True, text=True, timeout=timeout,
                              env=worker_env())  # fmt: skip
    except subprocess.TimeoutExpired:
        raise _too_slow(job, timeout) from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    result = json.loads(lines[-1][len(RESULT_MARK) :]) if lines else None
    return _checked(job, result, proc.returncode, proc.stderr)


class Worker:
    """One worker process that runs jobs one after another (`worker --serve`), started at the first job.

    A job that fails or times out takes the process with it; the next job starts a fresh one."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._results: queue.Queue[str | None] = queue.Queue()
        self._stderr: IO[str] | None = None

    @property
    def pid(self) -> int | None:
        """The serving process's id; None before the first job and after `close`."""
        return self._proc.pid if self._proc is not None else None

    def run(self, job: dict[str, Any], timeout: float) -> dict[str, Any]:
        proc = self._started()
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(job) + "\n")
            proc.stdin.flush()
            line = self._results.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise _too_slow(job, timeout) from None
        except BrokenPipeError:
            line = None
        result = json.loads(line[len(RESULT_MARK) :]) if line else None
        if not isinstance(result, dict) or "error" in result:
            code = proc.poll() if line else proc.wait()
            stderr = self._stderr_tail()
            self.close()
            return _checked(job, result, code if code is not None else 1, stderr)
        return result

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.stdin:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _started(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 (lives as long as the process; close())
            self._results = queue.Queue()
            self._proc = subprocess.Popen([*WORKER, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._stderr, text=True, env=worker_env())  # fmt: skip
            threading.Thread(target=self._read, args=(self._proc, self._results), daemon=True).start()
        return self._proc

    @staticmethod
    def _read(proc: subprocess.Popen[str], results: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(RESULT_MARK):
                results.put(line)
        results.put(None)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()[-4000:]


def _too_slow(job: dict[str, Any], timeout: float) -> BenchError:
    return BenchError(
        f"bench job {job['kind']} on {job.get('artifact', 'this machine')} took over {timeout:.0f} s",
        "the machine is overloaded or the settings are too large; lower [bench] prompt_tokens/gen_tokens",
    )


def _checked(job: dict[str, Any], result: Any, returncode: int, stderr: str) -> dict[str, Any]:
    """`result` if the job succeeded, else a BenchError naming the job and why."""
    if returncode == 0 and isinstance(result, dict) and "error" not in result:
        return result
    reason = result["error"] if isinstance(result, dict) and "error" in result else stderr.strip()[-800:]
    raise BenchError(
        f"bench job {job['kind']} ({job.get('mode') or job.get('concurrency') or ''}) failed with exit code "
        f"{returncode}: {reason}",
        "set EDGEKIT_DEBUG=1 to see llama.cpp's log; check free memory",
    )


def mlock_allowed(size: int) -> tuple[bool, str]:
    """Whether this process may lock `size` bytes in RAM (RLIMIT_MEMLOCK or CAP_IPC_LOCK)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY or soft >= size:
        return True, "RLIMIT_MEMLOCK allows it"
    try:
        for line in Path("/proc/self/status").read_text(errors="replace").splitlines():
            if line.startswith("CapEff:") and int(line.split()[1], 16) & (1 << 14):  # CAP_IPC_LOCK
                return True, "CAP_IPC_LOCK"
    except (OSError, ValueError):
        pass
    return False, f"RLIMIT_MEMLOCK is {soft // 1024} KiB and no CAP_IPC_LOCK (raise it with `ulimit -l`)"
