"""One measurement in a fresh worker process, and what the machine allows (mlock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import edgekit
from edgekit.errors import BenchError
from edgekit.runtime.bench.worker import RESULT_MARK


def run_job(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return its result."""
    env = dict(os.environ)
    package_root = str(Path(edgekit.__file__).resolve().parents[1])  # the folder that holds edgekit/
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "edgekit.runtime.bench.worker"],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise BenchError(
            f"bench job {job['kind']} on {job.get('artifact', 'this machine')} took over {timeout:.0f} s",
            "the machine is overloaded or the settings are too large; lower [bench] prompt_tokens/gen_tokens",
        ) from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    result = json.loads(lines[-1][len(RESULT_MARK) :]) if lines else None
    if proc.returncode != 0 or not isinstance(result, dict) or "error" in result:
        reason = result["error"] if isinstance(result, dict) and "error" in result else proc.stderr.strip()[-800:]
        raise BenchError(
            f"bench job {job['kind']} ({job.get('mode') or job.get('concurrency') or ''}) failed with exit code "
            f"{proc.returncode}: {reason}",
            "set EDGEKIT_DEBUG=1 to see llama.cpp's log; check free memory",
        )
    return result


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
