"""Benchmark measurements in a worker process: `python -m edgekit.runtime.bench.worker < job.json` runs one
job; `... worker --serve` runs one job per line of stdin, one after another, until stdin closes.

The bench gives each artifact a serving worker of its own (`edgekit.runtime.bench.jobs.Worker`), so no job pays
for starting Python and importing its engine, and no other artifact's libraries sit in its memory. Each job's
peak RSS is its own: the peak (VmHWM) is reset to the current RSS before every job, and the parent fixes
glibc's mmap threshold so that the buffers a job frees go back to the kernel. The page cache state is the one a
job asks for (a cold load evicts the model file first with posix_fadvise(DONTNEED)). Each result is printed as
one line starting with RESULT_MARK; llama.cpp's own output never is.

Jobs (`kind`):
    load       load with mmap / without / mmap+mlock, page cache cold or warm; time to first token
    perf       tuned settings: warm-up, TTFT of the prompt, then decode of `concurrency` sequences
    sweep      one load, then prompt and decode speed at each thread count
    baseline   plain `llama_cpp.Llama(model_path)` with its default settings, same prompt, greedy
    bandwidth  the STREAM-style probe (edgekit.runtime.bench.bandwidth) with P processes
    compute    each GGUF weight type's dot-product rate with T threads (edgekit.runtime.bench.compute)
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

RESULT_MARK = "EDGEKIT_BENCH_RESULT "
# Bench prompts are cut from this text (repeated as needed), so every run sees the same tokens.
PROMPT_TEXT = (
    "The edge gateway in the pump station collects readings from forty sensors every second. "
    "When the pressure in the main line drops, the operator on duty receives a short summary that "
    "explains which valve to check first, how the flow changed during the last hour, and whether "
    "the backup pump started as expected. The summary must be clear, brief and correct, because the "
    "operator reads it on a small screen while walking between the tanks. "
)


def prompt_ids(tokenize: Any, n: int) -> list[int]:
    ids: list[int] = []
    while len(ids) < n:
        ids += tokenize(PROMPT_TEXT)
    return ids[:n]


def memory_status() -> dict[str, float]:
    """Peak and current RSS of this process in MiB, split into anonymous and file-backed pages."""
    fields = {
        "VmHWM": "peak_rss_mib",
        "VmRSS": "rss_mib",
        "RssAnon": "rss_anon_mib",
        "RssFile": "rss_file_mib",
        "VmLck": "locked_mib",
    }
    out: dict[str, float] = {}
    try:
        for line in Path("/proc/self/status").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key in fields:
                out[fields[key]] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    if "peak_rss_mib" not in out:  # not Linux: ru_maxrss is KiB on Linux, bytes on macOS
        scale = 2**20 if sys.platform == "darwin" else 1024
        out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / scale / 1024, 1)
    return out


def evict(path: Path) -> None:
    """Drop the file's pages from the page cache (a cold load without root or drop_caches)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _engine(job: dict[str, Any], **overrides: Any) -> Any:
    """The artifact through its backend's runtime engine, configured as runtime.toml would configure it."""
    from edgekit.runtime.config import RuntimeConfig
    from edgekit.runtime.engines import load_engine

    config = RuntimeConfig(
        artifact="bench",
        n_threads=job["n_threads"],
        n_threads_batch=job["n_threads_batch"],
        n_ctx=overrides.get("n_ctx", job["n_ctx"]),
        n_batch=job["n_batch"],
        max_concurrent=overrides.get("max_sequences", 1),
        use_mmap=overrides.get("use_mmap", True),
        use_mlock=overrides.get("use_mlock", False),
    )
    return load_engine(job.get("backend", "gguf"), Path(job["artifact"]), None, config)


def initialise(backend: str) -> None:
    """Import the engine and initialise its library before any timer starts (llama.cpp: llama_backend_init)."""
    from edgekit.registry import spec

    module = spec(backend).engine_module()
    getattr(module, "initialise", lambda: None)()


def _warm_up(engine: Any, tokens: int) -> None:
    from edgekit.runtime.engines.base import Sampling

    engine.start(0, prompt_ids(engine.tokenize, 8), Sampling())
    for _ in range(tokens):
        engine.step()
    engine.finish(0)


def job_load(job: dict[str, Any]) -> dict[str, Any]:
    from edgekit.runtime.engines.base import Sampling

    path = Path(job["artifact"])
    if job["page_cache"] == "cold":
        evict(path)
    else:
        with open(path, "rb") as f:  # make sure it is all in the page cache
            while f.read(16 * 2**20):
                pass
    initialise(job.get("backend", "gguf"))
    before = memory_status()
    start = time.perf_counter()
    # A small context: this measures getting the weights ready; the perf jobs measure the real context.
    engine = _engine(job, use_mmap=job["mode"] != "no_mmap", use_mlock=job["mode"] == "mlock", n_ctx=256)
    ids = prompt_ids(engine.tokenize, job["prompt_tokens"])
    ready = time.perf_counter()
    engine.start(0, ids, Sampling())
    first = time.perf_counter()
    status = memory_status()
    engine.close()
    return {
        "load_ms": engine.load_timings["model_ms"],
        "context_ms": engine.load_timings["context_ms"],
        "ready_ms": (ready - start) * 1000,
        "first_token_ms": (first - start) * 1000,
        "rss_before_load_mib": before.get("rss_mib"),
        **status,
    }


def _timed_prompts(engine: Any, ids: list[int], runs: int) -> list[float]:
    """Seconds to the first token of `ids`, `runs` times from an empty slot, after one untimed prompt of the
    same length (llama-bench's warm-up run: the first batch of a size pays for its buffers)."""
    from edgekit.runtime.engines.base import Sampling

    seconds = []
    for run in range(runs + 1):
        t0 = time.perf_counter()
        engine.start(0, ids, Sampling())
        if run:
            seconds.append(time.perf_counter() - t0)
        engine.finish(0)
    return seconds


def _prefilled(engine: Any, ids: list[int], concurrency: int) -> None:
    """`concurrency` sequences that each hold `ids` and have their first token, untimed. A serving engine keeps the
    cells a finished sequence held, so every repeat after the first prefills one token per sequence (serve's
    prefix reuse) instead of the whole prompt again; the KV state the decode starts from is the same."""
    from edgekit.runtime.engines.base import Sampling, ServingEngine

    if not isinstance(engine, ServingEngine):
        for seq in range(concurrency):
            engine.start(seq, ids, Sampling())
        return
    for seq in range(concurrency):
        engine.admit(seq, ids, Sampling())
    waiting = set(range(concurrency))
    while waiting:
        waiting -= engine.advance(len(ids) * concurrency).keys()


def _timed_decodes(engine: Any, ids: list[int], job: dict[str, Any]) -> list[float]:
    """Seconds for `gen_tokens` steps of `concurrency` sequences that each start from `ids`, `repeats` times.
    The prompts are not timed, as llama-bench's decode row (-d) does not time its depth."""
    seconds = []
    for _ in range(job.get("repeats", 1)):
        _prefilled(engine, ids, job["concurrency"])
        t0 = time.perf_counter()
        for _ in range(job["gen_tokens"]):
            engine.step()
        seconds.append(time.perf_counter() - t0)
        for seq in range(job["concurrency"]):
            engine.finish(seq)
    return seconds


def job_perf(job: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    engine = _engine(job, max_sequences=job["concurrency"])
    timings = getattr(engine, "load_timings", None) or {"model_ms": (time.perf_counter() - start) * 1000}
    _warm_up(engine, job["warmup_tokens"])
    ids = prompt_ids(engine.tokenize, job["prompt_tokens"])
    prompt: dict[str, float] = {}
    if job.get("time_prompt", True):  # a prompt is one sequence's at any concurrency: timed once per run
        ttfts = _timed_prompts(engine, ids, job.get("repeats", 1))
        prompt = {"ttft_ms": statistics.median(ttfts) * 1000,
                  "prompt_tok_s": statistics.mean(len(ids) / t for t in ttfts)}  # fmt: skip
    decodes = _timed_decodes(engine, ids, job)
    status = memory_status()
    engine.close()
    per_sequence = statistics.mean(job["gen_tokens"] / t for t in decodes)
    return {  # rates are means over the repeats, as llama-bench's avg_ts
        "load_ms": timings["model_ms"],
        **prompt,
        "decode_tok_s": job["concurrency"] * per_sequence,  # aggregate over the sequences
        "per_sequence_tok_s": per_sequence,
        **status,
    }


def job_sweep(job: dict[str, Any]) -> dict[str, Any]:
    from edgekit.runtime.engines.base import Sampling

    engine = _engine(job)
    _warm_up(engine, job["warmup_tokens"])
    ids = prompt_ids(engine.tokenize, job["prompt_tokens"])
    out: dict[str, dict[str, float]] = {}
    for threads in job["threads"]:
        engine.set_threads(threads, threads)
        t0 = time.perf_counter()
        engine.start(0, ids, Sampling())
        prompt = time.perf_counter() - t0
        # A thread count that is far too slow (e.g. more threads than the box has free cores: llama.cpp's
        # threads spin at every barrier while one waits for a CPU) is measured on fewer tokens.
        t0 = time.perf_counter()
        tokens = 0
        while tokens < job["gen_tokens"]:
            engine.step()
            tokens += 1
            if tokens >= 4 and time.perf_counter() - t0 > job["max_decode_s"]:
                break
        decode = time.perf_counter() - t0
        engine.finish(0)
        out[str(threads)] = {"prompt_tok_s": len(ids) / prompt, "decode_tok_s": tokens / decode}
    engine.close()
    return {"by_threads": out}


def job_baseline(job: dict[str, Any]) -> dict[str, Any]:
    """llama-cpp-python as most people first use it: `Llama(model_path)`, nothing else set."""
    from llama_cpp import Llama

    needed = job["prompt_tokens"] + job["gen_tokens"] + 8
    kwargs: dict[str, Any] = {"verbose": False}
    if needed > 512:  # Llama's default n_ctx; the only setting we must change for longer bench prompts
        kwargs["n_ctx"] = needed
    start = time.perf_counter()
    llm = Llama(model_path=job["artifact"], **kwargs)
    load_ms = (time.perf_counter() - start) * 1000

    def tokenize(text: str) -> list[int]:
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    ids = prompt_ids(tokenize, job["prompt_tokens"])
    warm = llm.generate(ids, temp=0.0)  # warmed like the tuned run: a prompt of the timed length, then decode
    for _ in range(job["warmup_tokens"] + 1):
        next(warm)
    llm.reset()  # no prefix reuse: the timed prompt is evaluated in full
    t0 = time.perf_counter()
    tokens = llm.generate(ids, temp=0.0)
    next(tokens)
    ttft = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(job["gen_tokens"]):
        next(tokens)
    elapsed = time.perf_counter() - t0
    settings = {
        "n_threads": llm.n_threads,
        "n_threads_batch": llm.n_threads_batch,
        "n_ctx": llm.n_ctx(),
        "n_batch": llm.n_batch,
        "use_mmap": True,
    }
    status = memory_status()
    llm.close()
    return {
        "load_ms": load_ms,
        "ttft_ms": ttft * 1000,
        "prompt_tok_s": len(ids) / ttft,
        "decode_tok_s": job["gen_tokens"] / elapsed,
        "settings": settings,
        **status,
    }


def job_bandwidth(job: dict[str, Any]) -> dict[str, Any]:
    from edgekit.runtime.bench.bandwidth import probe

    return {"kernels": probe(job["array_mib"], job["runs"], job["processes"])}


def job_compute(job: dict[str, Any]) -> dict[str, Any]:
    from edgekit.runtime.bench.compute import probe

    return {"kernels": probe(job["threads"], job["runs"], tuple(job["types"]))}


JOBS = {"load": job_load, "perf": job_perf, "sweep": job_sweep, "baseline": job_baseline, "bandwidth": job_bandwidth,
        "compute": job_compute}  # fmt: skip


def reset_peak_rss() -> None:
    """Start this process's peak RSS (VmHWM) again from its current RSS (Linux; elsewhere it keeps growing)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def answer(job: dict[str, Any]) -> int:
    """Run `job` and print its result line (or its error's); the exit code a one-job worker returns."""
    if job.get("cpus") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, job["cpus"])  # e.g. the NUMA node `edgekit tune` will bind to
    try:
        result = JOBS[job["kind"]](job)
    except Exception as exc:  # reported to the parent, which raises a BenchError naming the job
        print(RESULT_MARK + json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


def serve() -> int:
    for line in sys.stdin:
        if line.strip():
            reset_peak_rss()
            answer(json.loads(line))
    return 0


def main() -> int:
    if sys.argv[1:] == ["--serve"]:
        return serve()
    return answer(json.loads(sys.stdin.read()))


if __name__ == "__main__":
    sys.exit(main())
