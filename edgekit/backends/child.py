"""Run a backend's heavy step (conversion, export, compression) in a child process, logged to a file.

A child keeps torch tracer warnings, NNCF and ONNX Runtime output, llama.cpp's C-level stderr and C++
logs out of the user's terminal and in a log file in the stage's cache entry (copied into the bundle's
`logs/`), which we show the tail of when it fails and scan for the warnings that matter
(`edgekit.observe.notices`); with `--verbose` it is streamed to the terminal as well. It returns its memory
when it exits, and it dies with the build (`die_with_parent`) instead of writing into a temp folder
nobody will use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from edgekit._util.procutil import die_with_parent
from edgekit.errors import StageError
from edgekit.observe import stagelog

# Progress bars are off (a log of carriage returns helps nobody); warnings stay on: they go to the log.
QUIET_ENV = {"TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_logged(
    cmd: list[str], log_path: Path, what: str, env: dict[str, str] | None = None, cwd: Path | None = None,
    on_line: Callable[[str], None] | None = None,
) -> str:  # fmt: skip
    """Run `cmd` (in `cwd`) with its output in `log_path`; return the log, or raise StageError with its tail.

    `env` adds to (or, with an empty value, removes from) this process's environment; `on_line` sees each
    line of the output as it comes (a progress count: the output itself still goes only to the log).
    """
    full_env = {**os.environ, **QUIET_ENV, **(env or {})}
    full_env = {k: v for k, v in full_env.items() if v != ""}
    echo = stagelog.echoing()
    with open(log_path, "wb") as log:
        if echo is None and on_line is None:
            returncode = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=cwd,
                                        preexec_fn=die_with_parent()).returncode  # fmt: skip
        else:
            returncode = _streamed(cmd, full_env, log, cwd, echo, on_line)
    text = log_path.read_text(encoding="utf-8", errors="replace")
    stagelog.scan(text)
    if returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-15:])
        raise StageError(what, f"failed with exit code {returncode}:\n{tail}", f"full log: {log_path}")
    return text


def _streamed(cmd: list[str], env: dict[str, str], log: BinaryIO, cwd: Path | None, echo: TextIO | None,
              on_line: Callable[[str], None] | None) -> int:  # fmt: skip
    """The child's output into the log and, as it comes, to `echo` (--verbose) and line by line to `on_line`."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                            preexec_fn=die_with_parent())  # fmt: skip
    stdout = proc.stdout
    assert stdout is not None
    partial = b""
    # typeshed types Popen.stdout as IO[bytes]; with the default buffering it is a BufferedReader, which has read1
    for chunk in iter(lambda: stdout.read1(65536), b""):  # type: ignore[attr-defined]
        log.write(chunk)
        log.flush()
        if echo is not None:
            echo.write(chunk.decode("utf-8", errors="replace"))
            echo.flush()
        if on_line is not None:
            *lines, partial = (partial + chunk).split(b"\n")
            for line in lines:
                on_line(line.decode("utf-8", errors="replace"))
    if on_line is not None and partial:
        on_line(partial.decode("utf-8", errors="replace"))
    return proc.wait()


def run_child(module: str, spec: dict[str, Any], log_path: Path, what: str, threads: int | None = None) -> str:
    """`python -m module SPEC.json`, the spec written beside the log; raises StageError with the log's tail."""
    spec_path = log_path.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    try:
        env = {"OMP_NUM_THREADS": str(threads)} if threads else {}
        return run_logged([sys.executable, "-m", module, str(spec_path)], log_path, what, env)
    finally:
        spec_path.unlink(missing_ok=True)


def read_spec(argv: list[str]) -> dict[str, Any]:
    """In the child: the spec its parent wrote."""
    if len(argv) != 1:
        raise SystemExit("usage: python -m MODULE SPEC.json (run by edgekit, not by hand)")
    return json.loads(Path(argv[0]).read_text(encoding="utf-8"))
