"""A bench result from raw samples: the medians, series, ratios and spreads `edgekit.stages.bench` documents."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from edgekit.runtime.bench.compute import compute_roof
from edgekit.runtime.bench.settings import BenchSettings
from edgekit.runtime.bench.stats import median, ratio, summary
from edgekit.store.results import CacheRef, StageResult

LOAD_MODES = ("mmap", "no_mmap", "mlock")
LOAD_KEYS = ("load_ms", "context_ms", "first_token_ms", "peak_rss_mib", "rss_anon_mib", "rss_file_mib", "locked_mib")


@dataclass(frozen=True)
class BenchTarget:
    name: str
    path: Path
    backend: str
    scheme: str
    bytes_per_token: int | None = None  # weights read per generated token, as the backend recorded it
    tensor_types: dict[str, dict[str, int]] | None = None  # {type: {tensors, params, bytes}} as written

    @classmethod
    def from_record(cls, path: Path, record: dict[str, Any]) -> BenchTarget:
        """A target from a bundle manifest's artifact record (what `edgekit bench` and `tune` measure)."""
        details = record.get("details") or {}
        return cls(record["name"], path, record["backend"], record["scheme"], details.get("bytes_per_token"),
                   record.get("tensor_types"))  # fmt: skip


@dataclass
class BenchResult(StageResult):
    """A bench run's figures, in the layout `edgekit.stages.bench` documents; what the bundle (runtime.toml, the
    systemd unit's memory limit) and the report read of it."""

    artifacts: dict[str, dict[str, Any]]  # name → its figures, or {backend, scheme, skipped: reason}
    schema_version: int | None = None
    machine: dict[str, Any] | None = None
    bandwidth: dict[str, Any] | None = None
    compute: dict[str, Any] | None = None
    peer: dict[str, Any] | None = None
    settings: dict[str, Any] | None = None
    comparisons: dict[str, Any] | None = None
    jobs: int | None = None
    seconds: float | None = None
    created: str | None = None
    skipped: str | None = None  # nothing was measured (every artifact failed its gates), and why
    bundle: dict[str, Any] | None = None  # `edgekit bench BUNDLE`: the bundle measured
    cache: CacheRef | None = None  # in a build: the stage cache entry these figures came from

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> Self:
        read = super().from_json({k: v for k, v in stored.items() if k != "cache"})
        if stored.get("cache"):
            read.cache = CacheRef(**stored["cache"])
        return read

    def figures(self, artifact: str) -> dict[str, Any]:
        """What was measured of `artifact` ({} when it was not benchmarked)."""
        return self.artifacts.get(artifact) or {}

    def peak_rss_mib(self, artifact: str) -> float | None:
        """The largest resident memory measured serving `artifact` (any number of sequences), if measured."""
        measured = self.figures(artifact)
        peaks = [v for v in (measured.get("peak_rss_mib_by_sequences") or {}).values() if v]
        return max(peaks or [p for p in [measured.get("peak_rss_mib")] if p], default=None)


@dataclass
class Samples:
    """Raw per-run values, keyed by a path of names; summarised at the end."""

    values: dict[tuple[str, ...], list[float]] = field(default_factory=dict)

    def add(self, key: tuple[str, ...], value: float | None) -> None:
        if value is not None:
            self.values.setdefault(key, []).append(float(value))

    def stat(self, *key: str) -> dict[str, Any] | None:
        found = self.values.get(key)
        return summary(found) if found else None


def artifact_result(
    settings: BenchSettings,
    target: BenchTarget,
    got: Samples,
    sweep: dict[str, Any],
    tuned: dict[str, int],
    roofs: dict[str, Any],
    extras: dict[str, Any],
) -> dict[str, Any]:
    s = settings
    bytes_per_token = target.bytes_per_token  # read from the artifact by its backend at quantize time
    one = str(min(s.concurrency))
    perf = {
        c: {k: got.stat("perf", str(c), k) for k in ("decode_tok_s", "per_sequence_tok_s", "peak_rss_mib")}
        for c in s.concurrency
    }
    decode = median(perf[int(one)]["decode_tok_s"])
    # The roofline at the tuned decode thread count: the best bandwidth seen with up to that many processes.
    best = roofs["bandwidth"]["best_gib_s_by_processes"]
    bandwidth_gib_s = max([v for p, v in best.items() if int(p) <= tuned["n_threads"]] or best.values())
    roofline_tok_s = bandwidth_gib_s * 2**30 / bytes_per_token if bytes_per_token else None
    result: dict[str, Any] = {
        "backend": target.backend,
        "scheme": target.scheme,
        "file_mib": round(_size(target.path) / 2**20, 1),
        "bytes_per_token": bytes_per_token,
        "tensor_types": {k: v["params"] for k, v in target.tensor_types.items()} if target.tensor_types else None,
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
    result.update(_compute_figures(target, tuned["n_threads"], roofs["compute"], decode, roofline_tok_s))
    result.update(_peer_figures(got))
    result.update(_load_figures(got, extras))
    if s.baseline and got.stat("baseline", "decode_tok_s"):
        result.update(_baseline_figures(got, extras))
    result["spread"] = {" ".join(key): summary(values) for key, values in sorted(got.values.items())}
    return result


def _compute_figures(
    target: BenchTarget, threads: int, compute: dict[str, Any], decode: float | None, bandwidth_roof: float | None
) -> dict[str, Any]:
    """The compute roof at the tuned decode threads, and decode ÷ the lower of the two roofs (GGUF only)."""
    rates_by_threads = compute.get("best_gops_by_threads") or {}
    usable = [int(t) for t in rates_by_threads if int(t) <= threads] or [int(t) for t in rates_by_threads]
    if target.backend != "gguf" or not usable or not target.path.is_file():
        return {}
    from edgekit.runtime.gguf_tensors import matmul_params_by_type

    params = matmul_params_by_type(target.path)
    rates = rates_by_threads[str(max(usable))]
    roof = compute_roof({t: 2 * n for t, n in params.items()}, rates)
    lower = min((r for r in (roof, bandwidth_roof) if r), default=None)
    return {
        "ops_per_token": 2 * sum(params.values()),
        "compute_gops": {k: rates.get(k) for k in params},
        "compute_roof_tok_s": round(roof, 2) if roof else None,
        "compute_roof_ratio": ratio(decode, roof),
        "roof_tok_s": round(lower, 2) if lower else None,
        "roof_ratio": ratio(decode, lower),
        "bound_by": None if lower is None else ("compute" if lower == roof else "bandwidth"),
    }


def _peer_figures(got: Samples) -> dict[str, Any]:
    """llama-bench on the same file: its medians, and edgekit ÷ llama-bench taken within each run."""
    if not got.stat("peer", "decode_tok_s"):
        return {}
    decode, prompt = got.stat("ratio", "decode_over_peer"), got.stat("ratio", "prompt_over_peer")
    return {
        "peer_decode_tok_s": median(got.stat("peer", "decode_tok_s")),
        "peer_prompt_tok_s": median(got.stat("peer", "prompt_tok_s")),
        "decode_over_peer": median(decode),
        "prompt_over_peer": median(prompt),
        "decode_over_peer_runs": [decode["min"], decode["max"]] if decode else None,
        "prompt_over_peer_runs": [prompt["min"], prompt["max"]] if prompt else None,
    }


def _load_figures(got: Samples, extras: dict[str, Any]) -> dict[str, Any]:
    """The load probes: per mode and page-cache state, and the no-mmap ÷ mmap ratios taken within each run."""
    loads = {
        mode: {
            cache: {k: stat for k in LOAD_KEYS if (stat := got.stat("load", mode, cache, k))}
            for cache in ("cold", "warm")
            if got.stat("load", mode, cache, "load_ms")
        }
        for mode in LOAD_MODES
    }
    figures: dict[str, Any] = {}
    for mode, caches in loads.items():
        for cache, stats in caches.items():
            figures[f"load_ms_{mode}_{cache}"] = median(stats.get("load_ms"))
            figures[f"first_token_ms_{mode}_{cache}"] = median(stats.get("first_token_ms"))
    for cache in ("cold", "warm"):
        key = f"no_mmap_over_mmap_{cache}_first_token"
        if got.stat("ratio", key):
            figures[key] = median(got.stat("ratio", key))
    figures["load"] = {mode: caches for mode, caches in loads.items() if caches}
    if extras["load_skipped"]:
        figures["load_skipped"] = extras["load_skipped"]
    return figures


def _baseline_figures(got: Samples, extras: dict[str, Any]) -> dict[str, Any]:
    return {
        "baseline_decode_tok_s": median(got.stat("baseline", "decode_tok_s")),
        "baseline_ttft_ms": median(got.stat("baseline", "ttft_ms")),
        "baseline_prompt_tok_s": median(got.stat("baseline", "prompt_tok_s")),
        "baseline_peak_rss_mib": median(got.stat("baseline", "peak_rss_mib")),
        "tuned_over_baseline_decode": median(got.stat("ratio", "tuned_over_baseline_decode")),
        "baseline_over_tuned_ttft": median(got.stat("ratio", "baseline_over_tuned_ttft")),
        "baseline_settings": extras.get("baseline_settings"),
    }


def comparisons(settings: BenchSettings, targets: list[BenchTarget], samples: dict[str, Samples]) -> dict[str, Any]:
    """Q4_K_M decode speed over the highest-precision GGUF's, per run, then the median."""
    by_scheme = {t.scheme: t for t in targets}
    reference = next((by_scheme[s] for s in ("F16", "Q8_0") if s in by_scheme), None)
    q4 = by_scheme.get("Q4_K_M")
    if q4 is None or reference is None:
        return {}
    one = str(min(settings.concurrency))
    num = samples[q4.name].values.get(("perf", one, "decode_tok_s"), [])
    den = samples[reference.name].values.get(("perf", one, "decode_tok_s"), [])
    per_run = [n / d for n, d in zip(num, den, strict=False) if d]
    return {
        "q4_over_highest_precision_decode": {
            "numerator": q4.name,
            "denominator": reference.name,
            "ratio": summary(per_run) if per_run else None,
            "bytes_per_token_ratio": ratio(q4.bytes_per_token, reference.bytes_per_token),
            "note": "decode tok/s of one sequence at the tuned settings, ratio taken within each run",
        }
    }


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
