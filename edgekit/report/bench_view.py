"""The report's bench section for the renderers: per-artifact figures in rows, the rest flattened to key: value."""

from __future__ import annotations

import json
from typing import Any

from edgekit.report.text import fmt


def _summary_text(value: dict[str, Any]) -> str:
    if value.get("n", 1) > 1 and value.get("min") is not None:
        return f"{fmt(value['median'])} ({fmt(value['min'])}–{fmt(value['max'])}, n={value['n']})"
    return fmt(value.get("median"))


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict) and "median" in value:
        return [(prefix, _summary_text(value))]
    if isinstance(value, dict):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        out = []
        for i, v in enumerate(value):
            out += _flatten(v, f"{prefix}[{i}]")
        return out
    if isinstance(value, float):
        return [(prefix, fmt(value))]
    return [(prefix, json.dumps(value) if isinstance(value, list) else str(value))]


# Known per-artifact bench figures, in display order: key → label. Other numeric keys follow as they are.
BENCH_LABELS: dict[str, str] = {
    "decode_tok_s": "decode, one sequence (tok/s)",
    "prompt_tok_s": "prompt processing (tok/s)",
    "ttft_ms": "time to first token (ms)",
    "peak_rss_mib": "peak RSS (MiB)",
    "n_threads": "threads, decode (tuned)",
    "n_threads_batch": "threads, prompt (tuned)",
    "bandwidth_gib_s": "memory bandwidth (GiB/s)",
    "bytes_per_token": "weights read per token (bytes)",
    "peer_decode_tok_s": "llama-bench (same file, threads): decode (tok/s)",
    "peer_prompt_tok_s": "llama-bench (same file, threads): prompt (tok/s)",
    "decode_over_peer": "edgekit ÷ llama-bench, decode",
    "prompt_over_peer": "edgekit ÷ llama-bench, prompt",
    "roofline_tok_s": "bandwidth roof: decode (tok/s)",
    "roofline_ratio": "decode ÷ bandwidth roof",
    "compute_roof_tok_s": "compute roof: decode (tok/s)",
    "compute_roof_ratio": "decode ÷ compute roof",
    "roof_tok_s": "lower roof (tok/s)",
    "roof_ratio": "decode ÷ lower roof",
    "ops_per_token": "operations per token (matmuls)",
    "baseline_decode_tok_s": "Llama() defaults of llama-cpp-python: decode (tok/s)",
    "baseline_ttft_ms": "Llama() defaults: time to first token (ms)",
    "baseline_peak_rss_mib": "Llama() defaults: peak RSS (MiB)",
    "tuned_over_baseline_decode": "tuned ÷ Llama() defaults, decode",
    "baseline_over_tuned_ttft": "Llama() defaults ÷ tuned, time to first token",
    "load_ms_mmap_cold": "load, mmap, cold cache (ms)",
    "load_ms_no_mmap_cold": "load, no mmap, cold cache (ms)",
    "first_token_ms_mmap_cold": "load → first token, mmap, cold (ms)",
    "first_token_ms_no_mmap_cold": "load → first token, no mmap, cold (ms)",
    "first_token_ms_mmap_warm": "load → first token, mmap, warm (ms)",
    "first_token_ms_no_mmap_warm": "load → first token, no mmap, warm (ms)",
    "no_mmap_over_mmap_cold_first_token": "no mmap ÷ mmap, first token, cold",
}
BENCH_HIDDEN = {"spread", "tensor_types", "load", "backend", "scheme"}  # raw detail: in report.json only
BENCH_TOP = ("machine", "bandwidth", "comparisons", "settings", "jobs", "seconds", "created")


def bench_view(bench: Any) -> dict[str, Any] | None:
    if not isinstance(bench, dict) or not bench:
        return None
    from edgekit.report.plots import bench_artifacts, bench_scalars, bench_series

    scalars = bench_scalars(bench)
    artifacts = sorted(bench_artifacts(bench))
    order = [k for k in BENCH_LABELS if k in scalars] + [k for k in scalars if k not in BENCH_LABELS]
    scalar_rows = [
        {"metric": BENCH_LABELS.get(m, m), "values": [fmt(scalars[m].get(a)) for a in artifacts]} for m in order
    ]
    series = bench_series(bench)
    series_rows = []
    for metric, per in series.items():
        for name, points in sorted(per.items()):
            series_rows.append(
                {"metric": metric, "artifact": name, "points": " · ".join(f"{x:g}: {fmt(y)}" for x, y in points)}
            )
    per_artifact = found if isinstance(found := bench.get("artifacts"), dict) else {}
    other: list[tuple[str, str]] = []
    for name, data in per_artifact.items():
        if isinstance(data, dict) and data.get("skipped"):
            other.append((f"{name}", f"not benchmarked: {data['skipped']}"))
        elif isinstance(data, dict):
            rest = {k: v for k, v in data.items() if k not in scalars and k not in series and k not in BENCH_HIDDEN}
            other += [(f"{name}.{k}", v) for k, v in _flatten(rest)]
    for key in [k for k in BENCH_TOP if k in bench] + [k for k in bench if k not in BENCH_TOP]:
        if key in ("artifacts", "cache", "schema_version", "spread"):
            continue
        value = bench[key]
        if key in ("bandwidth", "compute") and isinstance(value, dict):
            value = {k: v for k, v in value.items() if not k.startswith("kernels_")}
        other += _flatten(value, key)
    return {"artifacts": artifacts, "scalars": scalar_rows, "series": series_rows, "other": other}
