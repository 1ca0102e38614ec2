"""Run many `python -m edgekit ...` invocations quickly: import edgekit once, then fork one child per run.

Each child is a separate process that runs `edgekit/__main__.py` exactly as `python -m edgekit`
does, in its own working folder, with its own environment, stdout/stderr files and exit status;
only the ~0.5 s of imports common to every run is paid once, in this parent. Nothing that reads
the environment at import time (huggingface_hub, transformers) is imported here, so each child
sees its own HF_HUB_OFFLINE/HF_HUB_CACHE.

Usage (from a test): `python tests/support/forkcli.py < cases.jsonl > results.jsonl`, one JSON object per
line: {"name", "args", "cwd", "env", "stdout", "stderr"} in, {"name", "returncode"} out.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
from typing import Any

import edgekit.backends.catalog
import edgekit.cli
import edgekit.observe.progress
import edgekit.pipeline.build
import edgekit.plan.preflight
import edgekit.runtime.config

edgekit.backends.catalog.build_backends()  # imports every built-in backend's build side

del edgekit  # imported for their side effect: the module cache every child inherits

HEAVY = ("huggingface_hub", "transformers", "torch")
assert not [m for m in sys.modules if m.split(".")[0] in HEAVY], "would freeze the parent's environment into children"


def _child(case: dict[str, Any]) -> int:
    os.chdir(case["cwd"])
    os.environ.clear()
    os.environ.update(case["env"])
    for fd, path in ((1, case["stdout"]), (2, case["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = ["edgekit", *case["args"]]
    try:
        runpy.run_module("edgekit", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 70
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def main() -> None:
    cases = [json.loads(line) for line in sys.stdin if line.strip()]
    parallel = max(1, int(os.environ.get("FORKCLI_PARALLEL", os.cpu_count() or 1)))
    running: dict[int, str] = {}
    pending = list(cases)
    results: dict[str, int] = {}
    while pending or running:
        while pending and len(running) < parallel:
            case = pending.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os._exit(_child(case))
            running[pid] = case["name"]
        pid, status = os.wait()
        results[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    for case in cases:
        print(json.dumps({"name": case["name"], "returncode": results[case["name"]]}))


if __name__ == "__main__":
    main()
