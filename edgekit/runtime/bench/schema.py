"""The bench result's schema, as code (documented in `edgekit.stages.bench`)."""

from __future__ import annotations

from typing import Any

TOP_KEYS = ("schema_version", "machine", "bandwidth", "compute", "peer", "settings", "artifacts", "comparisons", "jobs",
            "seconds")  # fmt: skip
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
PEER_NUMBERS = ("peer_decode_tok_s", "peer_prompt_tok_s", "decode_over_peer", "prompt_over_peer")
COMPUTE_NUMBERS = ("ops_per_token", "compute_roof_tok_s", "compute_roof_ratio", "roof_tok_s", "roof_ratio")
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
    problems += _roof_and_peer_problems(result, number)
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


def _roof_and_peer_problems(result: dict[str, Any], number: Any) -> list[str]:
    """The compute roof and the peer row: measured for every GGUF artifact, or said why not."""
    problems: list[str] = []
    compute, peer = result.get("compute"), result.get("peer")
    if not isinstance(compute, dict) or not ("skipped" in compute or compute.get("best_gops_by_threads")):
        problems.append("compute must hold best_gops_by_threads or say why it was skipped")
    if not isinstance(peer, dict) or "available" not in peer:
        problems.append("peer must say whether llama-bench was available")
        peer = {}
    gguf = {n: a for n, a in result.get("artifacts", {}).items() if a.get("backend") == "gguf" and "skipped" not in a}
    if gguf and not peer.get("available") and not peer.get("missing") and result.get("settings", {}).get("peer"):
        problems.append("peer: llama-bench unavailable but no reason given")
    for name, a in gguf.items():
        if peer.get("available") and name not in (peer.get("failed") or {}):
            problems += [f"{name}.{k} is not a number: {a.get(k)!r}" for k in PEER_NUMBERS if not number(a.get(k))]
        if isinstance(compute, dict) and "skipped" not in compute:
            problems += [f"{name}.{k} is not a number: {a.get(k)!r}" for k in COMPUTE_NUMBERS if not number(a.get(k))]
    return problems
