"""runtime.toml values from a bench result: threads from the sweep, mmap from the load probes,
concurrency from the batched decode figures. Used by the build (runtime.toml) and `edgekit tune`
(runtime.local.toml)."""

from __future__ import annotations

from typing import Any

from edgekit.runtime.bench.results import BenchResult

# use_mmap stays on unless reading the file into private memory answers a cold first prompt at
# least this much faster (mmap shares the page cache, so it is the better default otherwise).
NO_MMAP_WIN = 0.9
# A concurrency level is kept while the aggregate decode speed stays within this share of one
# sequence's: batching that does not cost throughput still shortens everyone's wait in the queue.
CONCURRENCY_KEEP = 0.95


def derive_runtime(bench: BenchResult, artifact_name: str, defaults: dict[str, Any]) -> dict[str, Any]:
    """The runtime.toml values the bench supports for `artifact_name`; `defaults` are the recipe's."""
    entry = bench.artifacts.get(artifact_name)
    if not entry or "skipped" in entry or entry.get("decode_tok_s") is None:
        reason = entry.get("skipped", "no measurement") if entry else "not benchmarked"
        return {"derived_from": f"{defaults.get('derived_from', 'recipe defaults')}; bench: {reason}"}
    machine = bench.machine or {}
    values: dict[str, Any] = {"n_threads": entry["n_threads"], "n_threads_batch": entry["n_threads_batch"]}
    reasons = [
        f"n_threads={entry['n_threads']} (best decode of the sweep: "
        + _series(entry.get("decode_tok_s_by_threads", {}), "tok/s")
        + ")",
        f"n_threads_batch={entry['n_threads_batch']} (best prompt: "
        + _series(entry.get("prompt_tok_s_by_threads", {}), "tok/s")
        + ")",
    ]
    no_mmap = entry.get("no_mmap_over_mmap_cold_first_token")
    values["use_mmap"] = not (no_mmap is not None and no_mmap < NO_MMAP_WIN)
    if no_mmap is not None:
        reasons.append(f"use_mmap={str(values['use_mmap']).lower()} (cold first token without/with mmap ×{no_mmap})")
    by_sequences = {int(c): v for c, v in (entry.get("decode_tok_s_by_sequences") or {}).items() if v}
    limit = int(defaults.get("max_concurrent", 4))
    if by_sequences and 1 in by_sequences:
        kept = [c for c, v in by_sequences.items() if c <= limit and v >= by_sequences[1] * CONCURRENCY_KEEP]
        values["max_concurrent"] = max(kept or [1])
        reasons.append(
            f"max_concurrent={values['max_concurrent']} (aggregate decode by sequences: "
            + _series({str(c): v for c, v in sorted(by_sequences.items())}, "tok/s")
            + ")"
        )
    values["numa"] = "auto"
    values["derived_from"] = (
        f"edgekit bench on {machine.get('cpu_model', 'this machine')} ({machine.get('physical_cores', '?')} physical "
        f"cores, {machine.get('numa_nodes', 1)} NUMA node(s)), {bench.created or ''}: " + "; ".join(reasons)
    )
    return values


def _series(values: dict[str, Any], unit: str) -> str:
    shown = [f"{k}: {v:.1f}" for k, v in values.items() if isinstance(v, int | float)]
    return ", ".join(shown) + f" {unit}" if shown else "not measured"
