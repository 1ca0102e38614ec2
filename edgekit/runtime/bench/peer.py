"""The peer row: llama.cpp's own `llama-bench` on the same GGUF file, threads and prompt, in the same run.

A user's real alternative to edgekit's runtime is llama.cpp at its best settings, so every run of the
bench measures both, one right after the other (interleaved: a noisy neighbour slows both alike), and
reports edgekit ÷ llama-bench per run. llama-bench is built by `edgekit toolchain --tools` from the
source package of the installed llama-cpp-python (same llama.cpp commit, same ggml libraries); when it
is not built, the bench says so instead of leaving the row out.

Two invocations per run, each matching what edgekit times:
    prompt   -p PROMPT -n 0 -t n_threads_batch              PROMPT tokens from an empty context
    decode   -p 0 -n GEN -d PROMPT -t n_threads             GEN tokens after PROMPT tokens of context
both with -b/-ub n_batch and llama-bench's own warm-up run. Both rows are repeated `repeats` times (-r), as
edgekit's perf job repeats its prompt and decode timings, and both sides report the mean rate.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from edgekit.errors import BenchError, EdgekitError, ToolsNotBuilt

TOOL = "llama-bench"
# llama-bench's settings that matter for a comparison, recorded with each result
RECORDED = ("n_threads", "n_batch", "n_ubatch", "flash_attn", "type_k", "type_v", "repack", "poll", "load_mode")


def find_tool() -> tuple[Path | None, str]:
    """(path, what it is) of the toolchain's llama-bench, or (None, why it is missing and how to build it)."""
    try:
        from edgekit.toolchain import llama_tool, tools_info

        path = llama_tool(TOOL)
    except ToolsNotBuilt as exc:  # the report says which command builds it
        return None, f"{exc.message}; run `edgekit toolchain {exc.flag}` once (it compiles llama.cpp's tools)"
    except EdgekitError as exc:
        return None, f"{exc.message}; {exc.hint}" if exc.hint else exc.message
    info = tools_info() or {}
    commit, version = info.get("llama_cpp_commit", "?"), info.get("llama_cpp_python", "?")
    return path, f"{TOOL} of llama.cpp {commit} (llama-cpp-python {version})"


def identity() -> str | None:
    """What the peer figures depend on (part of the bench's cache key): the tool's llama.cpp commit, or None."""
    path, described = find_tool()
    return described if path is not None else None


def _run(tool: Path, args: list[str], timeout: float, repeats: int) -> dict[str, Any]:
    try:
        proc = subprocess.run([str(tool), *args, "-r", str(repeats), "-o", "json"], capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise BenchError(f"{TOOL} {' '.join(args)} took over {timeout:.0f} s", "the machine is overloaded") from None
    try:
        rows = json.loads(proc.stdout) if proc.returncode == 0 else None
    except json.JSONDecodeError:
        rows = None
    if not rows:
        raise BenchError(f"{TOOL} failed with exit code {proc.returncode}: {proc.stderr.strip()[-600:]}",
                         f"run it by hand: {tool} {' '.join(args)}")  # fmt: skip
    return rows[-1]


def measure(tool: Path, job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """llama-bench's prompt and decode speed on `job`'s artifact, threads, prompt and generation lengths."""
    common = ["-m", job["artifact"], "-b", str(job["n_batch"]), "-ub", str(job["n_batch"])]
    repeats = job.get("repeats", 1)
    prompt = _run(tool, [*common, "-p", str(job["prompt_tokens"]), "-n", "0", "-t", str(job["n_threads_batch"])],
                  timeout, repeats)  # fmt: skip
    decode = _run(tool, [*common, "-p", "0", "-n", str(job["gen_tokens"]), "-d", str(job["prompt_tokens"]),
                         "-t", str(job["n_threads"])], timeout, repeats)  # fmt: skip
    return {
        "prompt_tok_s": float(prompt["avg_ts"]),
        "decode_tok_s": float(decode["avg_ts"]),
        "settings": {
            "prompt": _settings(prompt),
            "decode": {**_settings(decode), "n_depth": decode.get("n_depth")},
        },
    }


def _settings(row: dict[str, Any]) -> dict[str, Any]:
    return {**{k: row.get(k) for k in RECORDED}, "repetitions": len(row.get("samples_ns", []))}
