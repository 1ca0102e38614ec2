"""Benchmark GGUF artifacts on this CPU: what `edgekit build`, `edgekit bench` and `edgekit tune` run.

The schema of the result is documented in `edgekit.stages.bench`. Every measurement runs in a
fresh worker process (`edgekit.runtime.bench_worker`); runs are interleaved — run 1 of every
configuration and artifact, then run 2, … — so that a noisy neighbour slows all of them alike,
and every ratio (tuned/baseline, batch 4/batch 1, Q4/Q8, no-mmap/mmap) is computed within a run
and then summarised by its median over the runs.

Phase 1 sweeps the thread counts (decode and prompt separately) and picks the tuned settings;
phase 2 measures loads, the tuned configuration at each concurrency, and the default-settings
baseline. No torch, no build stages: this runs on the edge box too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgekit.errors import BenchError
from edgekit.runtime import machine
from edgekit.runtime.bandwidth import best_rate
from edgekit.runtime.bench_worker import RESULT_MARK
from edgekit.runtime.stats import median, ratio, summary

BENCH_SCHEMA = 1
# Bumped when what a measurement does changes (not only its JSON), so cached results are not reused.
BENCH_METHOD = 3
LOAD_MODES = ("mmap", "no_mmap", "mlock")
LOAD_KEYS = ("load_ms", "context_ms", "first_token_ms", "peak_rss_mib", "rss_anon_mib", "rss_file_mib", "locked_mib")
# Within this share of the best median, the smaller thread count wins: fewer threads leave cores
# to the rest of the box and spin less when the box is busy.
THREAD_TOLERANCE = 0.03


@dataclass(frozen=True)
class BenchTarget:
    name: str
    path: Path
    backend: str
    scheme: str
    bytes_per_token: int | None = None  # weights read per generated token, when the backend recorded it


@dataclass(frozen=True)
class BenchSettings:
    prompt_tokens: int = 128
    gen_tokens: int = 64
    runs: int = 3
    threads: tuple[int, ...] | None = None  # None: 1..physical cores (and logical where SMT adds)
    concurrency: tuple[int, ...] = (1, 2, 4)
    baseline: bool = True
    bandwidth_mib: int = 256
    n_ctx: int = 2048  # per sequence, as the runtime will use it
    n_batch: int = 256
    warmup_tokens: int = 4
    load_prompt_tokens: int = 8  # the load probes time "loaded and answered a short prompt"
    cpus: tuple[int, ...] | None = None  # pin the workers to these CPUs (a NUMA node), None: as we are
    loads: bool = True
    sweep_max_decode_s: float = 3.0  # a sweep point slower than this stops decoding early (≥ 4 tokens)
    job_timeout_s: float = 900.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Log = Callable[[str], None]


@dataclass
class _Samples:
    """Raw per-run values, keyed by a path of names; summarised at the end."""

    values: dict[tuple[str, ...], list[float]] = field(default_factory=dict)

    def add(self, key: tuple[str, ...], value: float | None) -> None:
        if value is not None:
            self.values.setdefault(key, []).append(float(value))

    def stat(self, *key: str) -> dict[str, Any] | None:
        found = self.values.get(key)
        return summary(found) if found else None


def run_job(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return its result."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "edgekit.runtime.bench_worker"],
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
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:") and int(line.split()[1], 16) & (1 << 14):  # CAP_IPC_LOCK
                return True, "CAP_IPC_LOCK"
    except (OSError, ValueError):
        pass
    return False, f"RLIMIT_MEMLOCK is {soft // 1024} KiB and no CAP_IPC_LOCK (raise it with `ulimit -l`)"


def pick_threads(by_threads: dict[str, dict[str, Any]], metric: str) -> int:
    """The thread count with the best median `metric`, preferring fewer within THREAD_TOLERANCE."""
    medians = {int(t): v[metric]["median"] for t, v in by_threads.items() if v.get(metric)}
    best = max(medians.values())
    return min(t for t, m in medians.items() if m >= best * (1 - THREAD_TOLERANCE))


class Benchmark:
    def __init__(self, targets: list[BenchTarget], settings: BenchSettings, log: Log | None = None) -> None:
        self.targets = targets
        self.settings = settings
        self.log = log or (lambda message: None)
        self.machine = machine.describe()
        physical, logical = self.machine["physical_cores"], self.machine["logical_cores"]
        self.threads = list(settings.threads or machine.thread_candidates(physical, logical))
        self.jobs_run = 0
        self.skipped: dict[str, str] = {}  # artifacts another backend's engine could not measure, and why

    # --- orchestration ------------------------------------------------------------------------

    def thread_sweep(
        self, samples: dict[str, _Samples] | None = None
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, int]]]:
        """Phase 1 alone (what `edgekit tune` runs): {artifact: {threads: {metric: summary}}} and the picks."""
        samples = samples if samples is not None else {t.name: _Samples() for t in self.targets}
        sweeps = self._sweep(self._measurable(), samples)
        tuned = {
            t.name: {
                "n_threads": pick_threads(sweeps[t.name], "decode_tok_s"),
                "n_threads_batch": pick_threads(sweeps[t.name], "prompt_tok_s"),
            }
            for t in self._measurable()
        }
        return sweeps, tuned

    def run(self) -> dict[str, Any]:
        started = time.time()
        bandwidth = self._bandwidth()
        samples = {t.name: _Samples() for t in self.targets}
        sweeps, tuned = self.thread_sweep(samples)
        extras = self._measure(self._measurable(), tuned, samples)
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
            artifacts[target.name] = self._artifact_result(
                target, samples[target.name], sweeps[target.name], tuned[target.name], bandwidth, extras[target.name]
            )
        return {
            "schema_version": BENCH_SCHEMA,
            "machine": self.machine,
            "bandwidth": bandwidth,
            "settings": {**self.settings.as_dict(), "threads_swept": self.threads},
            "artifacts": artifacts,
            "comparisons": self._comparisons(gguf, samples),
            "jobs": self.jobs_run,
            "seconds": round(time.time() - started, 1),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    def _measurable(self) -> list[BenchTarget]:
        return [t for t in self.targets if t.name not in self.skipped]

    def _job(self, job: dict[str, Any], target: BenchTarget | None = None) -> dict[str, Any] | None:
        """Run a job. A GGUF job that fails fails the bench; another backend's is recorded as skipped."""
        self.jobs_run += 1
        if target is None or target.backend == "gguf":
            return run_job(job, self.settings.job_timeout_s)
        try:
            return run_job(job, self.settings.job_timeout_s)
        except BenchError as exc:
            self.skipped[target.name] = f"its {target.backend} runtime engine could not be measured: {exc.message}"
            return None

    def _base_job(self, target: BenchTarget, threads: int, threads_batch: int) -> dict[str, Any]:
        s = self.settings
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
            "cpus": list(s.cpus) if s.cpus else None,
        }

    def _bandwidth(self) -> dict[str, Any]:
        s = self.settings
        counts = sorted({1, *[t for t in self.threads if t <= self.machine["logical_cores"]]})
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

    def _sweep(self, targets: list[BenchTarget], samples: dict[str, _Samples]) -> dict[str, dict[str, Any]]:
        for run in range(self.settings.runs):
            order = self.threads[run % len(self.threads) :] + self.threads[: run % len(self.threads)]
            for target in targets:
                self.log(f"bench  {target.name}: thread sweep {order} (run {run + 1}/{self.settings.runs})")
                job = {**self._base_job(target, 1, 1), "kind": "sweep", "threads": order}
                job["max_decode_s"] = self.settings.sweep_max_decode_s
                result = self._job(job, target)
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
        self, targets: list[BenchTarget], tuned: dict[str, dict[str, int]], samples: dict[str, _Samples]
    ) -> dict[str, dict[str, Any]]:
        s = self.settings
        extras: dict[str, dict[str, Any]] = {t.name: {"load_skipped": {}} for t in targets}
        for run in range(s.runs):
            for target in targets:
                if target.name in self.skipped:
                    continue
                got = samples[target.name]
                gguf = target.backend == "gguf"  # load modes and the Llama() baseline are llama.cpp's
                base = self._base_job(target, tuned[target.name]["n_threads"], tuned[target.name]["n_threads_batch"])
                self.log(f"bench  {target.name}: loads, concurrency {list(s.concurrency)}, baseline (run {run + 1})")
                if s.loads and gguf:
                    self._loads(target, base, got, extras[target.name]["load_skipped"])
                for concurrency in s.concurrency:
                    result = self._job({**base, "kind": "perf", "concurrency": concurrency}, target)
                    if result is None:
                        break
                    for key in ("decode_tok_s", "per_sequence_tok_s", "peak_rss_mib", "ttft_ms", "prompt_tok_s"):
                        got.add(("perf", str(concurrency), key), result[key])
                if target.name in self.skipped:
                    continue
                if s.baseline and gguf:
                    result = self._job({**base, "kind": "baseline"})
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

    def _loads(self, target: BenchTarget, base: dict[str, Any], got: _Samples, skipped: dict[str, str]) -> None:
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
            result = self._job(job)
            for key in LOAD_KEYS:
                got.add(("load", mode, cache, key), result.get(key))
        mmap_cold = self._last(got, ("load", "mmap", "cold", "first_token_ms"))
        no_mmap_cold = self._last(got, ("load", "no_mmap", "cold", "first_token_ms"))
        got.add(("ratio", "no_mmap_over_mmap_cold_first_token"), ratio(no_mmap_cold, mmap_cold))
        mmap_warm = self._last(got, ("load", "mmap", "warm", "first_token_ms"))
        no_mmap_warm = self._last(got, ("load", "no_mmap", "warm", "first_token_ms"))
        got.add(("ratio", "no_mmap_over_mmap_warm_first_token"), ratio(no_mmap_warm, mmap_warm))

    @staticmethod
    def _last(got: _Samples, key: tuple[str, ...]) -> float | None:
        values = got.values.get(key)
        return values[-1] if values else None

    # --- results ------------------------------------------------------------------------------

    def _artifact_result(
        self,
        target: BenchTarget,
        got: _Samples,
        sweep: dict[str, Any],
        tuned: dict[str, int],
        bandwidth: dict[str, Any],
        extras: dict[str, Any],
    ) -> dict[str, Any]:
        from edgekit.gguf_info import tensor_summary

        s = self.settings
        gguf = target.backend == "gguf"
        info = tensor_summary(target.path) if gguf else None  # bytes read per token: known exactly for GGUF
        bytes_per_token = info["bytes_per_token"] if info else target.bytes_per_token  # else: from the IR/graph
        one = str(min(s.concurrency))
        perf = {
            c: {k: got.stat("perf", str(c), k) for k in ("decode_tok_s", "per_sequence_tok_s", "peak_rss_mib")}
            for c in s.concurrency
        }
        decode = median(perf[int(one)]["decode_tok_s"])
        # The roofline at the tuned decode thread count: the best bandwidth seen with up to that many processes.
        usable = [v for p, v in bandwidth["best_gib_s_by_processes"].items() if int(p) <= tuned["n_threads"]]
        bandwidth_gib_s = max(usable or bandwidth["best_gib_s_by_processes"].values())
        roofline_tok_s = bandwidth_gib_s * 2**30 / bytes_per_token if bytes_per_token else None
        loads = {
            mode: {
                cache: {k: stat for k in LOAD_KEYS if (stat := got.stat("load", mode, cache, k))}
                for cache in ("cold", "warm")
                if got.stat("load", mode, cache, "load_ms")
            }
            for mode in LOAD_MODES
        }
        result: dict[str, Any] = {
            "backend": target.backend,
            "scheme": target.scheme,
            "file_mib": round(_size(target.path) / 2**20, 1),
            "bytes_per_token": bytes_per_token,
            "tensor_types": {k: v["params"] for k, v in info["tensor_types"].items()} if info else None,
            # headline figures: medians over the runs (spreads under "spread")
            "n_threads": tuned["n_threads"],
            "n_threads_batch": tuned["n_threads_batch"],
            "decode_tok_s": decode,
            "prompt_tok_s": median(got.stat("perf", one, "prompt_tok_s")),
            "ttft_ms": median(got.stat("perf", one, "ttft_ms")),
            "peak_rss_mib": median(perf[int(one)]["peak_rss_mib"]),
            "decode_tok_s_by_sequences": {str(c): median(perf[c]["decode_tok_s"]) for c in s.concurrency},
            "per_sequence_tok_s_by_sequences": {str(c): median(perf[c]["per_sequence_tok_s"]) for c in s.concurrency},
            "peak_rss_mib_by_sequences": {str(c): median(perf[c]["peak_rss_mib"]) for c in s.concurrency},
            "batch_speedup_by_sequences": {
                str(c): median(got.stat("ratio", "batch_over_single", str(c))) for c in s.concurrency
            },
            "decode_tok_s_by_threads": {t: median(v["decode_tok_s"]) for t, v in sweep.items()},
            "prompt_tok_s_by_threads": {t: median(v["prompt_tok_s"]) for t, v in sweep.items()},
            "bandwidth_gib_s": bandwidth_gib_s,
            "roofline_tok_s": round(roofline_tok_s, 2) if roofline_tok_s else None,
            "roofline_ratio": ratio(decode, roofline_tok_s),
        }
        for mode, caches in loads.items():
            for cache, stats in caches.items():
                result[f"load_ms_{mode}_{cache}"] = median(stats.get("load_ms"))
                result[f"first_token_ms_{mode}_{cache}"] = median(stats.get("first_token_ms"))
        for cache in ("cold", "warm"):
            key = f"no_mmap_over_mmap_{cache}_first_token"
            if got.stat("ratio", key):
                result[key] = median(got.stat("ratio", key))
        if s.baseline and got.stat("baseline", "decode_tok_s"):
            result.update(
                {
                    "baseline_decode_tok_s": median(got.stat("baseline", "decode_tok_s")),
                    "baseline_ttft_ms": median(got.stat("baseline", "ttft_ms")),
                    "baseline_prompt_tok_s": median(got.stat("baseline", "prompt_tok_s")),
                    "baseline_peak_rss_mib": median(got.stat("baseline", "peak_rss_mib")),
                    "tuned_over_baseline_decode": median(got.stat("ratio", "tuned_over_baseline_decode")),
                    "baseline_over_tuned_ttft": median(got.stat("ratio", "baseline_over_tuned_ttft")),
                    "baseline_settings": extras.get("baseline_settings"),
                }
            )
        result["load"] = {mode: caches for mode, caches in loads.items() if caches}
        if extras["load_skipped"]:
            result["load_skipped"] = extras["load_skipped"]
        result["spread"] = {" ".join(key): summary(values) for key, values in sorted(got.values.items())}
        return result

    def _comparisons(self, targets: list[BenchTarget], samples: dict[str, _Samples]) -> dict[str, Any]:
        """Q4_K_M decode speed over the highest-precision GGUF's, per run, then the median."""
        by_scheme = {t.scheme: t for t in targets}
        reference = next((by_scheme[s] for s in ("F16", "Q8_0") if s in by_scheme), None)
        q4 = by_scheme.get("Q4_K_M")
        if q4 is None or reference is None:
            return {}
        one = str(min(self.settings.concurrency))
        num = samples[q4.name].values.get(("perf", one, "decode_tok_s"), [])
        den = samples[reference.name].values.get(("perf", one, "decode_tok_s"), [])
        per_run = [n / d for n, d in zip(num, den, strict=False) if d]
        return {
            "q4_over_highest_precision_decode": {
                "numerator": q4.name,
                "denominator": reference.name,
                "ratio": summary(per_run) if per_run else None,
                "bytes_per_token_ratio": ratio(_bytes_per_token(q4.path), _bytes_per_token(reference.path)),
                "note": "decode tok/s of one sequence at the tuned settings, ratio taken within each run",
            }
        }


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _bytes_per_token(path: Path) -> int:
    from edgekit.gguf_info import tensor_summary

    return int(tensor_summary(path)["bytes_per_token"])


# --- the schema, as code (documented in edgekit.stages.bench) -------------------------------------

TOP_KEYS = ("schema_version", "machine", "bandwidth", "settings", "artifacts", "comparisons", "jobs", "seconds")
MACHINE_KEYS = ("cpu_model", "arch", "physical_cores", "logical_cores", "numa_nodes", "memory_total_mib", "fingerprint")
ARTIFACT_NUMBERS = (
    "bytes_per_token",
    "n_threads",
    "n_threads_batch",
    "decode_tok_s",
    "prompt_tok_s",
    "ttft_ms",
    "peak_rss_mib",
    "bandwidth_gib_s",
    "roofline_tok_s",
    "roofline_ratio",
)
ARTIFACT_SERIES = (
    "decode_tok_s_by_sequences",
    "per_sequence_tok_s_by_sequences",
    "peak_rss_mib_by_sequences",
    "batch_speedup_by_sequences",
    "decode_tok_s_by_threads",
    "prompt_tok_s_by_threads",
)
# Bytes read per token: exact from a GGUF; other backends report it when their artifact recorded it.
GGUF_ONLY = ("bytes_per_token", "roofline_tok_s", "roofline_ratio")
BASELINE_NUMBERS = (
    "baseline_decode_tok_s",
    "baseline_ttft_ms",
    "tuned_over_baseline_decode",
    "baseline_over_tuned_ttft",
)


def schema_problems(result: dict[str, Any]) -> list[str]:
    """What in a bench result does not follow the documented schema (empty when it does)."""

    def number(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and value == value and value >= 0

    problems = [f"missing top-level key {k}" for k in TOP_KEYS if k not in result]
    problems += [f"machine.{k} missing" for k in MACHINE_KEYS if k not in result.get("machine", {})]
    best = result.get("bandwidth", {}).get("best_gib_s_by_processes", {})
    if not best or not all(number(v) and v > 0 for v in best.values()):
        problems.append("bandwidth.best_gib_s_by_processes must map process counts to GiB/s")
    settings = result.get("settings", {})
    for name, a in result.get("artifacts", {}).items():
        if "skipped" in a:
            continue
        gguf = a.get("backend") == "gguf"
        required = ARTIFACT_NUMBERS if gguf else tuple(k for k in ARTIFACT_NUMBERS if k not in GGUF_ONLY)
        problems += [f"{name}.{k} is not a number: {a.get(k)!r}" for k in required if not number(a.get(k))]
        for key in ARTIFACT_SERIES:
            series = a.get(key)
            if not isinstance(series, dict) or not series or not all(number(v) for v in series.values()):
                problems.append(f"{name}.{key} must map counts to numbers: {series!r}")
        if sorted(int(c) for c in a.get("decode_tok_s_by_sequences", {})) != sorted(settings.get("concurrency", [])):
            problems.append(f"{name}.decode_tok_s_by_sequences does not cover settings.concurrency")
        if settings.get("baseline") and gguf:
            problems += [f"{name}.{k} missing" for k in BASELINE_NUMBERS if not number(a.get(k))]
        if settings.get("loads") and gguf:
            for mode, cache in (("mmap", "cold"), ("no_mmap", "cold"), ("mmap", "warm"), ("no_mmap", "warm")):
                if not number(a.get(f"first_token_ms_{mode}_{cache}")):
                    problems.append(f"{name}.first_token_ms_{mode}_{cache} missing")
            if "mlock" not in a.get("load", {}) and "mlock" not in a.get("load_skipped", {}):
                problems.append(f"{name}: mlock neither measured nor skipped with a reason")
        for key, stat in a.get("spread", {}).items():
            if not {"median", "min", "max", "n"} <= set(stat) or not stat["min"] <= stat["median"] <= stat["max"]:
                problems.append(f"{name}.spread[{key}] is not a {{median, min, max, n}} summary")
    return problems
