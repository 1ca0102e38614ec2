"""A whole report.json as the build writes it (two GGUF artifacts, one failing), for the report's unit tests."""

from __future__ import annotations

from typing import Any

from edgekit.report.model import order_findings


def est(value: float, low: float | None, high: float | None, n: int = 4000, unit: str = "tokens") -> dict[str, Any]:
    return {"value": value, "ci95": [low, high], "n": n, "unit": unit}


def metrics(kld: float, width: float) -> dict[str, Any]:
    return {
        "ppl_reference": est(29.8, 26.8, 33.4),
        "ppl": est(29.8 * (1 + kld), 27.0, 34.0),
        "ppl_ratio": est(1 + kld, 1 + kld - width, 1 + kld + width),
        "kld_mean": est(kld, kld - width, kld + width),
        "kld_median": est(kld * 0.7, kld * 0.6, kld * 0.8),
        "kld_p99": est(kld * 5, kld * 4, kld * 6),
        "kld_max": est(kld * 20, None, None),
        "top1": est(0.9, 0.89, 0.91),
        "dp_rms": est(0.03, 0.028, 0.032),
        "tail_mass_mean": est(0.12, None, None),
    }


def artifact(name: str, scheme: str, kld: float, verdict: str, **extra: Any) -> dict[str, Any]:
    gates = {"kld_mean_max": 0.05, "kld_p99_max": None, "ppl_ratio_max": 1.1, "top1_min": 0.8, "task_drop_max": 0.1}
    return {
        "name": name,
        "backend": "gguf",
        "scheme": scheme,
        "size": 100 * 2**20 * (1 + kld),
        "sha256": "ab" * 32,
        "bits_per_weight": 6.2,
        "tensor_types": {"Q5_0": {"tensors": 10, "params": 800, "bytes": 500}, "F32": {"tensors": 2, "params": 10}},
        "details": {"note": f"{name} fell back"},
        "required": True,
        "metrics": metrics(kld, kld / 20),
        "tasks": {
            "cloze": {
                "kind": "cloze",
                "questions": 135,
                "reference": est(0.24, 0.17, 0.31, 135, "items"),
                "candidate": est(0.22, 0.16, 0.30, 135, "items"),
                "drop": est(0.02, -0.01, 0.04, 135, "items"),
            }
        },
        "checks": [
            {
                "gate": "kld_mean_max",
                "metric": "kld_mean",
                "threshold": 0.05,
                "direction": "max",
                "value": kld,
                "ci95": [kld * 0.95, kld * 1.05],
                "n": 4000,
                "verdict": verdict,
            }
        ],
        "verdict": verdict,
        "reasons": [] if verdict == "pass" else [f"kld_mean = {kld} > 0.05"],
        "gates": gates,
        "gate_sources": {"kld_mean_max": "default for gguf " + scheme},
        "notes": [f"{name} fell back"],
        "kld_distribution": {
            "n": 4000,
            "edges": [1e-4, 1e-3, 1e-2, 1e-1, 1],
            "counts": [100, 900, 2000, 1000],
            "below": 0,
            "above": 0,
            "negative": 0,
            "mean": kld,
            "max": kld * 20,
            "quantiles": {"0.5": kld * 0.7, "0.99": kld * 5},
        },
        **extra,
    }


def sample_report(bench: Any = None) -> dict[str, Any]:
    arts = [artifact("gguf-Q4_K_M", "Q4_K_M", 0.046, "pass"), artifact("gguf-Q5_K_M <x>", "Q5_K_M", 0.073, "fail")]
    return {
        "schema_version": 1,
        "bundle": "demo",
        "created": "2026-01-01T00:00:00Z",
        "signoff": {
            "date": "2026-01-01T00:00:00Z",
            "recipe": {"path": "/r.toml", "sha256": "cd" * 32},
            "source": {
                "uri": "pkg://x/y.gguf",
                "revision": None,
                "reconstructed_from": "GGUF Q4_1",
                "files": [{"path": "y.gguf", "size": 10, "sha256": "ef" * 32}],
                "notes": ["dequantized"],
            },
            "reference_statement": "The reference was reconstructed from a quantized file (GGUF Q4_1).",
            "artifacts": [
                {"name": a["name"], "sha256": a["sha256"], "verdict": a["verdict"], "excluded": False} for a in arts
            ],
            "versions": {"torch": "2.13.0", "llama.cpp": "abc"},
            "reference": {"device": "cpu", "dtype": "float32", "device_name": "CPU"},
            "eval_data": {
                "origin": "pkg://edgekit/data/botchan.txt",
                "sha256": "12" * 32,
                "tokens": 8192,
                "scored_tokens": 4080,
                "windows": 16,
                "context_length": 512,
                "cloze_items": 135,
                "tasks": [],
            },
            "thresholds": {a["name"]: a["gates"] for a in arts},
            "policy": {"on_inconclusive": "warn", "exclude_failed": False, "required": ["gguf-Q4_K_M"]},
            "verdicts": {a["name"]: a["verdict"] for a in arts},
            "statistics": {
                "interval": "95% percentile block bootstrap",
                "block_tokens": 64,
                "resamples": 1000,
                "seed": 0,
                "top_k": 64,
                "tail_samples": 64,
            },
            "command": "edgekit build",
            "reproduce": "edgekit build",
        },
        "reference": {
            "device": "cpu",
            "dtype": "float32",
            "scored_tokens": 4080,
            "reused": True,
            "entry_seconds": 52.7,
            "memory": {
                "requested": "auto",
                "mode": "stream",
                "estimate_full_mib": 5120,
                "estimate_stream_mib": 1100,
                "available_mib": 1900,
                "limited_by": "RLIMIT_DATA",
            },
        },
        "noise_floor": {"dtype": "bfloat16", "metrics": metrics(0.001, 0.0001), "tasks": {}},
        "artifacts": arts,
        "findings": order_findings(arts),
        "bench": bench,
        "memory": {
            "sampled_every_seconds": 0.05,
            "stages": {
                "reference": {
                    "tasks": 1,
                    "reused": False,
                    "rss_anon_peak_mib": 1234,
                    "rss_file_peak_mib": 321,
                    "rss_peak_mib": 1500,
                }
            },
            "build": {"rss_anon_peak_mib": 1300, "rss_file_peak_mib": 2100, "rss_peak_mib": 3000},
        },
    }
