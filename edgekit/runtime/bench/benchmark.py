"""Benchmark GGUF artifacts on this CPU: what `edgekit build`, `edgekit bench` and `edgekit tune` run.

The schema of the result is documented in `edgekit.stages.bench`. Each artifact's measurements run one after
another in a worker process of its own (`edgekit.runtime.bench.worker --serve`, each job's peak RSS its own), the
machine's roofs in a fresh process each; runs are interleaved — run 1 of every
configuration and artifact, then run 2, … — so that a noisy neighbour slows all of them alike,
and every ratio (tuned/baseline, batch 4/batch 1, Q4/Q8, no-mmap/mmap) is computed within a run
and then summarised by its median over the runs.

Phase 1 sweeps the thread counts (decode and prompt separately) and picks the tuned settings;
phase 2 measures loads, the tuned configuration at each concurrency, llama.cpp's own llama-bench
on the same file and threads (the peer row), and the default-settings `Llama()` row. Before them,
the machine's two roofs: memory bandwidth and each weight type's dot-product rate. No torch, no build
stages: this runs on the edge box too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from edgekit.errors import BenchError
from edgekit.runtime import machine
from edgekit.runtime.bench import peer
from edgekit.runtime.bench.bandwidth import best_rate
from edgekit.runtime.bench.jobs import Worker, mlock_allowed, run_job
from edgekit.runtime.bench.results import (
    LOAD_KEYS,
    BenchResult,
    BenchTarget,
    Samples,
    artifact_result,
    comparisons,
)
from edgekit.runtime.bench.settings import BenchSettings
from edgekit.runtime.bench.stats import ratio

BENCH_SCHEMA = 1
# Bumped when what a measurement does changes (not only its JSON), so cached results are not reused.
# 8: a repeated decode starts from the prompt's kept cells, the prompt is timed at the lowest concurrency only
BENCH_METHOD = 8  # (7: an artifact's jobs share one worker process; 6: decode timed `repeats` times, as -r)
# Within this share of the best median, the smaller thread count wins: fewer threads leave cores
# to the rest of the box and spin less when the box is busy.
THREAD_TOLERANCE = 0.03


Log = Callable[[str], None]


def pick_threads(by_threads: dict[str, dict[str, Any]], metric: str) -> int:
    """The thread count with the best median `metric`, preferring fewer within THREAD_TOLERANCE."""
    medians = {int(t): v[metric]["median"] for t, v in by_threads.items() if v.get(metric)}
    best = max(medians.values())
    return min(t for t, m in medians.items() if m >= best * (1 - THREAD_TOLERANCE))


def engine_job(s: BenchSettings, target: BenchTarget, threads: int, threads_batch: int) -> dict[str, Any]:
    """What every job on `target`'s runtime engine takes (add its "kind" and the kind's own keys)."""
    return {
        "artifact": str(target.path),
        "backend": target.backend,
        "n_threads": threads,
        "n_threads_batch": threads_batch,
        "n_ctx": s.n_ctx,
        "n_batch": s.n_batch,
        "prompt_tokens": s.prompt_tokens,
        "gen_tokens": s.gen_tokens,
        "warmup_tokens": s.warmup_tokens,
        "repeats": s.repeats,
        "cpus": list(s.cpus) if s.cpus else None,
    }


class Benchmark:
    """`log` hears what is being measured; `advance` is called once per job run (`planned_jobs` of them)."""

    def __init__(self, targets: list[BenchTarget], settings: BenchSettings, log: Log | None = None,
                 advance: Callable[[], None] | None = None) -> None:  # fmt: skip
        self.targets = targets
        self.settings = settings
        self.log = log or (lambda message: None)
        self.advance = advance or (lambda: None)
        self.machine = machine.describe()
        physical, logical = self.machine["physical_cores"], self.machine["logical_cores"]
        self.threads = list(settings.threads or machine.thread_candidates(physical, logical))
        self.jobs_run = 0
        self.skipped: dict[str, str] = {}  # artifacts another backend's engine could not measure, and why
        found = peer.find_tool() if settings.peer else (None, "not run ([bench] peer = false)")
        self.peer_tool, self.peer_status = found
        self.peer_failed: dict[str, str] = {}  # artifacts llama-bench could not measure, and why
        self.peer_settings: dict[str, Any] | None = None
        self._workers: dict[str, Worker] = {}

    # --- orchestration ------------------------------------------------------------------------

    def thread_sweep(
        self, samples: dict[str, Samples] | None = None
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, int]]]:
        """Phase 1 alone (what `edgekit tune` runs): {artifact: {threads: {metric: summary}}} and the picks."""
        samples = samples if samples is not None else {t.name: Samples() for t in self.targets}
        try:
            sweeps = self._sweep(self._measurable(), samples)
        finally:
            self._close_workers()
        tuned = {
            t.name: {
                "n_threads": pick_threads(sweeps[t.name], "decode_tok_s"),
                "n_threads_batch": pick_threads(sweeps[t.name], "prompt_tok_s"),
            }
            for t in self._measurable()
        }
        return sweeps, tuned

    def run(self) -> BenchResult:
        started = time.time()
        bandwidth = self._bandwidth()
        compute = self._compute()
        samples = {t.name: Samples() for t in self.targets}
        sweeps, tuned = self.thread_sweep(samples)
        try:
            extras = self._measure(self._measurable(), tuned, samples)
        finally:
            self._close_workers()
        gguf = [t for t in self._measurable() if t.backend == "gguf"]
        artifacts: dict[str, Any] = {}
        for target in self.targets:
            if target.name in self.skipped:
                artifacts[target.name] = {
                    "backend": target.backend,
                    "scheme": target.scheme,
                    "skipped": self.skipped[target.name],
                }
                continue
            artifacts[target.name] = artifact_result(
                self.settings,
                target,
                samples[target.name],
                sweeps[target.name],
                tuned[target.name],
                {"bandwidth": bandwidth, "compute": compute},
                extras[target.name],
            )
        return BenchResult(
            schema_version=BENCH_SCHEMA,
            machine=self.machine,
            bandwidth=bandwidth,
            compute=compute,
            peer=self._peer_summary(gguf),
            settings={**self.settings.as_dict(), "threads_swept": self.threads},
            artifacts=artifacts,
            comparisons=comparisons(self.settings, gguf, samples),
            jobs=self.jobs_run,
            seconds=round(time.time() - started, 1),
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )

    def planned_jobs(self) -> int:
        """How many jobs `run` will start, before any ran (fewer when an artifact's engine cannot be measured)."""
        s = self.settings
        gguf = [t for t in self.targets if t.backend == "gguf"]
        per_run = 0
        for target in self.targets:
            per_run += 1 + len(s.concurrency)  # the thread sweep, then each concurrency
            if target.backend == "gguf":
                loads = (5 if mlock_allowed(int(target.path.stat().st_size * 1.2))[0] else 4) if s.loads else 0
                per_run += loads + (self.peer_tool is not None) + s.baseline
        return len(self._bandwidth_counts()) + len(self._compute_counts(gguf)) + s.runs * per_run

    def _bandwidth_counts(self) -> list[int]:
        return sorted({1, *[t for t in self.threads if t <= self.machine["logical_cores"]]})

    def _compute_counts(self, gguf: list[BenchTarget]) -> list[int]:
        if not self.settings.compute or not [t for t in gguf if t.path.is_file()]:
            return []
        return sorted({t for t in self.threads if t <= self.machine["logical_cores"]} or {1})

    def _measurable(self) -> list[BenchTarget]:
        return [t for t in self.targets if t.name not in self.skipped]

    def _job(self, job: dict[str, Any], target: BenchTarget | None = None) -> dict[str, Any]:
        """Run a job, in `target`'s worker when it is on an artifact, else in a fresh process; one that fails fails
        the bench."""
        self.jobs_run += 1
        try:
            if target is None:
                return run_job(job, self.settings.job_timeout_s)
            return self._workers.setdefault(target.name, Worker()).run(job, self.settings.job_timeout_s)
        finally:
            self.advance()

    def _close_workers(self) -> None:
        for worker in self._workers.values():
            worker.close()
        self._workers.clear()

    def _engine_job(self, job: dict[str, Any], target: BenchTarget) -> dict[str, Any] | None:
        """Run a job on `target`'s engine. A GGUF job that fails fails the bench; another backend's is recorded
        as skipped (None)."""
        if target.backend == "gguf":
            return self._job(job, target)
        try:
            return self._job(job, target)
        except BenchError as exc:
            self.skipped[target.name] = f"its {target.backend} runtime engine could not be measured: {exc.message}"
            return None

    def _bandwidth(self) -> dict[str, Any]:
        s = self.settings
        counts = self._bandwidth_counts()
        by_processes: dict[str, Any] = {}
        for processes in counts:
            self.log(f"bench  memory bandwidth, {processes} process(es) × {s.bandwidth_mib} MiB arrays")
            job = {
                "kind": "bandwidth",
                "array_mib": s.bandwidth_mib,
                "runs": s.runs,
                "processes": processes,
                "cpus": list(s.cpus) if s.cpus else None,
            }
            by_processes[str(processes)] = self._job(job)["kernels"]
        best = {p: best_rate(k) for p, k in by_processes.items()}
        return {
            "array_mib": s.bandwidth_mib,
            "kernels_gib_s_by_processes": by_processes,
            "best_gib_s_by_processes": best,
            "note": "STREAM-style numpy kernels, one thread per process; best kernel median per process count",
        }

    def _compute(self) -> dict[str, Any]:
        """Each GGUF weight type's dot-product rate at each swept thread count (llama.cpp's own kernels)."""
        gguf = [t for t in self.targets if t.backend == "gguf" and t.path.is_file()]
        counts = self._compute_counts(gguf)
        if not counts:
            return {"skipped": "not measured ([bench] compute = false, or no GGUF artifact)"}
        from edgekit.runtime.gguf_tensors import matmul_params_by_type

        types = sorted({kind for t in gguf for kind in matmul_params_by_type(t.path)})
        by_threads: dict[str, Any] = {}
        for threads in counts:
            self.log(f"bench  dot-product rate ({', '.join(types)}), {threads} thread(s)")
            job = {"kind": "compute", "threads": threads, "runs": self.settings.runs, "types": types,
                   "cpus": list(self.settings.cpus) if self.settings.cpus else None}  # fmt: skip
            by_threads[str(threads)] = self._job(job)["kernels"]
        return {
            "kernels_gops_by_threads": by_threads,
            "best_gops_by_threads": {
                t: {k: v["median"] for k, v in kernels.items()} for t, kernels in by_threads.items()
            },
            "note": "ggml matrix × vector products on cache-resident weights of each GGUF tensor type, in the buffer "
            "llama.cpp loads them into (CPU_REPACK where it repacks); GOP/s, one multiply-add = 2 operations; "
            "median of the runs",
        }

    def _peer_summary(self, gguf: list[BenchTarget]) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": peer.TOOL, "available": self.peer_tool is not None, "what": self.peer_status,
                               "settings": self.peer_settings}  # fmt: skip
        if self.peer_tool is None and gguf:
            out["missing"] = f"no peer row: {self.peer_status}"
        if self.peer_failed:
            out["failed"] = dict(self.peer_failed)
        return out

    def _peer(self, target: BenchTarget, base: dict[str, Any], got: Samples) -> None:
        """llama-bench on the same file and threads, right after edgekit's own run; ratios within the run."""
        if self.peer_tool is None or target.name in self.peer_failed:
            return
        self.jobs_run += 1
        try:
            result = peer.measure(self.peer_tool, base, self.settings.job_timeout_s)
        except BenchError as exc:
            self.peer_failed[target.name] = exc.message
            return
        finally:
            self.advance()
        got.add(("peer", "decode_tok_s"), result["decode_tok_s"])
        got.add(("peer", "prompt_tok_s"), result["prompt_tok_s"])
        one = str(min(self.settings.concurrency))
        for metric in ("decode_tok_s", "prompt_tok_s"):
            ours = self._last(got, ("perf", one, metric))
            got.add(("ratio", f"{metric.removesuffix('_tok_s')}_over_peer"), ratio(ours, result[metric]))
        self.peer_settings = result["settings"]

    def _sweep(self, targets: list[BenchTarget], samples: dict[str, Samples]) -> dict[str, dict[str, Any]]:
        for run in range(self.settings.runs):
            order = self.threads[run % len(self.threads) :] + self.threads[: run % len(self.threads)]
            for target in targets:
                self.log(f"bench  {target.name}: thread sweep {order} (run {run + 1}/{self.settings.runs})")
                job = {**engine_job(self.settings, target, 1, 1), "kind": "sweep", "threads": order}
                job["max_decode_s"] = self.settings.sweep_max_decode_s
                result = self._engine_job(job, target)
                if result is None:
                    continue
                for threads, values in result["by_threads"].items():
                    for metric, value in values.items():
                        samples[target.name].add(("sweep", threads, metric), value)
        return {
            t.name: {
                str(n): {m: samples[t.name].stat("sweep", str(n), m) for m in ("decode_tok_s", "prompt_tok_s")}
                for n in self.threads
            }
            for t in targets
            if t.name not in self.skipped
        }

    def _measure(
        self, targets: list[BenchTarget], tuned: dict[str, dict[str, int]], samples: dict[str, Samples]
    ) -> dict[str, dict[str, Any]]:
        s = self.settings
        extras: dict[str, dict[str, Any]] = {t.name: {"load_skipped": {}} for t in targets}
        for run in range(s.runs):
            for target in targets:
                if target.name in self.skipped:
                    continue
                got = samples[target.name]
                gguf = target.backend == "gguf"  # load modes and the Llama() baseline are llama.cpp's
                picked = tuned[target.name]
                base = engine_job(s, target, picked["n_threads"], picked["n_threads_batch"])
                self.log(f"bench  {target.name}: loads, concurrency {list(s.concurrency)}, baseline (run {run + 1})")
                if s.loads and gguf:
                    self._loads(target, base, got, extras[target.name]["load_skipped"])
                for concurrency in s.concurrency:
                    job = {**base, "kind": "perf", "concurrency": concurrency,
                           "time_prompt": concurrency == min(s.concurrency)}  # fmt: skip
                    result = self._engine_job(job, target)
                    if result is None:
                        break
                    for key in ("decode_tok_s", "per_sequence_tok_s", "peak_rss_mib", "ttft_ms", "prompt_tok_s"):
                        got.add(("perf", str(concurrency), key), result.get(key))
                if target.name in self.skipped:
                    continue
                if gguf:
                    self._peer(target, base, got)
                if s.baseline and gguf:
                    result = self._job({**base, "kind": "baseline"}, target)
                    extras[target.name]["baseline_settings"] = result["settings"]
                    for key in ("decode_tok_s", "ttft_ms", "prompt_tok_s", "peak_rss_mib", "load_ms"):
                        got.add(("baseline", key), result[key])
                    one = self._last(got, ("perf", str(min(s.concurrency)), "decode_tok_s"))
                    got.add(("ratio", "tuned_over_baseline_decode"), ratio(one, result["decode_tok_s"]))
                    ttft = self._last(got, ("perf", str(min(s.concurrency)), "ttft_ms"))
                    got.add(("ratio", "baseline_over_tuned_ttft"), ratio(result["ttft_ms"], ttft))
                first = self._last(got, ("perf", str(min(s.concurrency)), "decode_tok_s"))
                for concurrency in s.concurrency:
                    value = self._last(got, ("perf", str(concurrency), "decode_tok_s"))
                    got.add(("ratio", "batch_over_single", str(concurrency)), ratio(value, first))
        return extras

    def _loads(self, target: BenchTarget, base: dict[str, Any], got: Samples, skipped: dict[str, str]) -> None:
        size = target.path.stat().st_size
        plan = [("mmap", "cold"), ("no_mmap", "cold"), ("mmap", "warm"), ("no_mmap", "warm")]
        allowed, why = mlock_allowed(int(size * 1.2))
        if allowed:
            plan.append(("mlock", "warm"))
        else:
            skipped["mlock"] = why
        for mode, cache in plan:
            job = {
                **base,
                "kind": "load",
                "mode": mode,
                "page_cache": cache,
                "prompt_tokens": self.settings.load_prompt_tokens,
            }
            result = self._job(job, target)
            for key in LOAD_KEYS:
                got.add(("load", mode, cache, key), result.get(key))
        mmap_cold = self._last(got, ("load", "mmap", "cold", "first_token_ms"))
        no_mmap_cold = self._last(got, ("load", "no_mmap", "cold", "first_token_ms"))
        got.add(("ratio", "no_mmap_over_mmap_cold_first_token"), ratio(no_mmap_cold, mmap_cold))
        mmap_warm = self._last(got, ("load", "mmap", "warm", "first_token_ms"))
        no_mmap_warm = self._last(got, ("load", "no_mmap", "warm", "first_token_ms"))
        got.add(("ratio", "no_mmap_over_mmap_warm_first_token"), ratio(no_mmap_warm, mmap_warm))

    @staticmethod
    def _last(got: Samples, key: tuple[str, ...]) -> float | None:
        values = got.values.get(key)
        return values[-1] if values else None
