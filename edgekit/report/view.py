"""The report's display model: report.json turned into rows of formatted figures for the templates.

Depends only on the report dict (and `edgekit.report.text`); the templates in report/templates lay it out.
"""

from __future__ import annotations

import base64
from typing import Any

from edgekit.report.bench_view import bench_view
from edgekit.report.levers_view import levers_view
from edgekit.report.sections import (
    differences_view,
    engine_text,
    memory_view,
    repairs_view,
    sequential_text,
    to_decide_text,
)
from edgekit.report.text import anchor, fmt, fmt_ci, metric_cell, mib, sample_size, type_mix_text, type_params

# key, label, what it is, format ("g" significant digits, "%" percentage)
METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("kld_mean", "mean KLD", "mean KL(reference ‖ artifact) per scored token, nats", "g"),
    ("kld_median", "median KLD", "median per-token KLD", "g"),
    ("kld_p99", "KLD p99", "99th percentile of per-token KLD: the bad tail", "g"),
    ("kld_max", "KLD max", "largest per-token KLD (no interval: a maximum has none worth reporting)", "g"),
    ("kld_coarse_mean", "top-k KLD, mean", "KL over the reference's top-k tokens + one bucket for the rest", "g"),
    ("kld_coarse_p99", "top-k KLD, p99", "99th percentile of that exact per-token lower bound", "g"),
    ("ppl", "perplexity", "exp(mean NLL of the actual next token)", "g"),
    ("ppl_ratio", "PPL ratio", "PPL(artifact) / PPL(reference), paired over the same tokens", "g"),
    ("top1", "top-1 agreement", "share of positions where artifact and reference pick the same token", "%"),
    ("dp_rms", "RMS Δp", "root-mean-square change of p(actual next token)", "g"),
    ("tail_mass_mean", "ref. mass outside top-k", "reference probability covered by the sampled tail estimate", "%"),
)
GATE_LABELS = {
    "kld_mean_max": "mean KLD ≤",
    "kld_p99_max": "KLD p99 ≤",
    "ppl_ratio_max": "PPL ratio ≤",
    "top1_min": "top-1 agreement ≥",
    "task_drop_max": "task accuracy drop ≤",
}
PLOTS_DIR = "plots"


def _metric_rows(metrics: dict[str, Any], gates: dict[str, Any] | None) -> list[dict[str, str]]:
    gated = {
        "kld_mean": "kld_mean_max",
        "kld_coarse_p99": "kld_p99_max",
        "ppl_ratio": "ppl_ratio_max",
        "top1": "top1_min",
    }
    rows = []
    for key, label, desc, kind in METRICS:
        if key not in metrics:
            continue
        est = metrics[key]
        gate = gated.get(key)
        threshold = (gates or {}).get(gate) if gate else None
        rows.append(
            {
                "key": key,
                "label": label,
                "desc": desc,
                "value": fmt(est.get("value"), kind),
                "ci": fmt_ci(est, kind) or "—",
                "n": sample_size(est),
                "gate": f"{GATE_LABELS[gate]} {fmt(threshold, kind)}" if gate and threshold is not None else "",
                "estimator": est.get("estimator") or "",
            }
        )
    return rows


def _task_rows(tasks: dict[str, Any]) -> list[dict[str, str]]:
    rows = []
    for name, t in tasks.items():
        for variant, data in (("acc", t), ("acc_norm", t.get("acc_norm"))):
            if not data or "candidate" not in data:
                continue
            rows.append(
                {
                    "name": name if variant == "acc" else f"{name} (acc_norm)",
                    "kind": "" if t.get("kind") == name else t.get("kind", ""),
                    "questions": f"{t.get('questions', data['candidate'].get('n', 0)):,}",
                    "reference": f"{fmt(data['reference']['value'], '%')} {fmt_ci(data['reference'], '%')}",
                    "artifact": f"{fmt(data['candidate']['value'], '%')} {fmt_ci(data['candidate'], '%')}",
                    "drop": f"{fmt(data['drop']['value'], 'pp')} "
                    + (fmt_ci(data["drop"], "pp").replace(" pp", "") if fmt_ci(data["drop"]) else ""),
                }
            )
    return rows


def _check_rows(
    checks: list[dict[str, Any]], sources: dict[str, str], per_window: tuple[int, int] | None
) -> list[dict[str, str]]:
    rows = []
    for c in checks:
        kind = "%" if c["metric"] == "top1" else ("pp" if c["metric"].startswith("task_drop") else "g")
        op = "≤" if c["direction"] == "max" else "≥"
        est = {"ci95": c["ci95"]}
        rows.append(
            {
                "gate": c["gate"],
                "metric": c["metric"],
                "rule": f"{c['metric']} {op} {fmt(c['threshold'], kind).replace('+', '')}",
                "value": fmt(c["value"], kind),
                "ci": fmt_ci(est, kind) or "—",
                "n": f"{c['n']:,}",
                "verdict": c["verdict"],
                "source": sources.get(c["gate"], ""),
                "decide": to_decide_text(c, per_window),
            }
        )
    return rows


def _type_rows(tensor_types: dict[str, Any]) -> list[dict[str, str]]:
    total_params = sum(type_params(v) for v in tensor_types.values()) or 1
    rows = []
    for t, v in sorted(tensor_types.items(), key=lambda kv: -type_params(kv[1])):
        detail = v if isinstance(v, dict) else {}
        tensors, size = detail.get("tensors"), detail.get("bytes")
        rows.append(
            {
                "type": t,
                "tensors": f"{int(tensors):,}" if isinstance(tensors, int | float) else "—",
                "params": f"{type_params(v):,}",
                "share": f"{type_params(v) / total_params:.1%}",
                "mib": f"{size / 2**20:,.1f}" if isinstance(size, int | float) else "—",
            }
        )
    return rows


def _summary_row(name: str, kind: str, verdict: str, metrics: dict[str, Any], **extra: Any) -> dict[str, Any]:
    cloze = extra.pop("cloze", None)
    return {
        "name": name,
        "kind": kind,
        "verdict": verdict,
        "kld_mean": metric_cell(metrics, "kld_mean"),
        "kld_p99": metric_cell(metrics, "kld_p99"),
        "top1": metric_cell(metrics, "top1", "%"),
        "ppl_ratio": metric_cell(metrics, "ppl_ratio"),
        "dp_rms": metric_cell(metrics, "dp_rms"),
        "cloze_drop": {"value": fmt(cloze["drop"]["value"], "pp"), "ci": fmt_ci(cloze["drop"], "pp")}
        if cloze
        else {"value": "—", "ci": ""},
        "n": sample_size(metrics.get("kld_mean")),
        "n_tokens": f"{metrics['kld_mean']['n']:,}" if metrics.get("kld_mean") else "—",
        **extra,
    }


def _quantile_rows(dist: dict[str, Any] | None) -> list[dict[str, str]]:
    if not dist:
        return []
    rows = [{"label": f"p{float(q) * 100:g}", "value": fmt(v)} for q, v in (dist.get("quantiles") or {}).items()]
    rows.append({"label": "max", "value": fmt(dist.get("max"))})
    rows.append({"label": "tokens with KLD < 1e-6 (incl. negative estimates)", "value": f"{dist.get('below', 0):,}"})
    return rows


def _artifact_view(a: dict[str, Any], per_window: tuple[int, int] | None) -> dict[str, Any]:
    metrics = a.get("metrics") or {}
    types = a.get("tensor_types") or {}
    task_gated = (a.get("gates") or {}).get("task_drop_max") is not None
    return {
        "name": a["name"],
        "anchor": "artifact-" + anchor(a["name"]),
        "backend": a.get("backend", ""),
        "scheme": a.get("scheme", ""),
        "verdict": a.get("verdict", "not validated"),
        "required": a.get("required"),
        "excluded": bool(a.get("excluded")),
        "size": mib(a.get("size")),
        "bits_per_weight": fmt(a.get("bits_per_weight")) if a.get("bits_per_weight") else "—",
        "type_mix": type_mix_text(types) if types else "—",
        "sha256": a.get("sha256") or "—",
        "reasons": a.get("reasons") or [],
        "notes": a.get("notes") or [],
        "fallbacks": (a.get("details") or {}).get("fallbacks") or {},
        "checks": _check_rows(a.get("checks") or [], a.get("gate_sources") or {}, per_window),
        "metrics": _metric_rows(metrics, a.get("gates")),
        "tasks": _task_rows(a.get("tasks") or {}),
        "tasks_gated": task_gated,
        "engine": engine_text(a.get("engine")),
        "sequential": sequential_text(a.get("sequential")),
        "differences": differences_view(a),
        "types": _type_rows(types),
        "quantiles": _quantile_rows(a.get("kld_distribution")),
        "tokenizer": a.get("tokenizer_check") or {},
    }


def _artifact_summary(a: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    return _summary_row(
        a["name"],
        "artifact",
        entry["verdict"],
        a.get("metrics") or {},
        size=entry["size"],
        bits_per_weight=entry["bits_per_weight"],
        required=a.get("required"),
        excluded=entry["excluded"],
        anchor=entry["anchor"],
        cloze=(a.get("tasks") or {}).get("cloze"),
    )


def _noise_views(noise: dict[str, Any] | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the noise floor's summary row, its section), or (None, None) without a noise floor."""
    if not noise or not noise.get("metrics"):
        return None, None
    label = f"noise floor ({noise.get('dtype')} reference)"
    row = _summary_row(label, "noise", "reference", noise["metrics"], size="—", bits_per_weight="—", required=None,
                       excluded=False, anchor="noise-floor", cloze=(noise.get("tasks") or {}).get("cloze"))  # fmt: skip
    section = {
        "label": label,
        "dtype": noise.get("dtype"),
        "metrics": _metric_rows(noise["metrics"], None),
        "tasks": _task_rows(noise.get("tasks") or {}),
        "quantiles": _quantile_rows(noise.get("kld_distribution")),
    }
    return row, section


def _required_failed(artifacts: list[dict[str, Any]], on_inconclusive: str | None) -> list[str]:
    def failed(verdict: str) -> bool:
        return verdict == "fail" or (verdict == "inconclusive" and on_inconclusive == "fail")

    return [a["name"] for a in artifacts if a["required"] and not a["excluded"] and failed(a["verdict"])]


def _figures(plots: dict[str, tuple[str, bytes]] | None) -> list[dict[str, str]]:
    return [
        {
            "name": name,
            "title": title,
            "file": f"{PLOTS_DIR}/{name}.png",
            "data_uri": "data:image/png;base64," + base64.b64encode(png).decode("ascii"),
        }
        for name, (title, png) in (plots or {}).items()
    ]


def _ppl_reference(report: dict[str, Any]) -> dict[str, str] | None:
    found = next(((a.get("metrics") or {}).get("ppl_reference") for a in report.get("artifacts", [])
                  if (a.get("metrics") or {}).get("ppl_reference")), None)  # fmt: skip
    return {"value": fmt(found["value"]), "ci": fmt_ci(found), "n": sample_size(found)} if found else None


def view(report: dict[str, Any], plots: dict[str, tuple[str, bytes]] | None = None) -> dict[str, Any]:
    """Everything the templates show, formatted."""
    signoff = report.get("signoff") or {}
    rows = report.get("artifacts", [])
    ref = report.get("reference") or {}
    per_window = None
    if ref.get("context_length") and ref.get("first_scored") is not None:
        per_window = (ref["context_length"] - 1 - ref["first_scored"], ref["context_length"])
    artifacts = [_artifact_view(a, per_window) for a in rows]
    summary = [_artifact_summary(a, entry) for a, entry in zip(rows, artifacts, strict=True)]
    noise_row, noise_view = _noise_views(report.get("noise_floor"))
    summary += [noise_row] if noise_row else []
    verdicts = [a["verdict"] for a in artifacts]
    required_failed = _required_failed(artifacts, (signoff.get("policy") or {}).get("on_inconclusive"))
    return {
        "bundle": report.get("bundle"),
        "created": report.get("created"),
        "artifacts": artifacts,
        "summary": summary,
        "noise": noise_view,
        "reference": report.get("reference") or {},
        "ppl_reference": _ppl_reference(report),
        "findings": [f["text"] for f in report.get("findings") or []],
        "figures": _figures(plots),
        "signoff": signoff,
        "versions": sorted((signoff.get("versions") or {}).items()),
        "counts": {v: verdicts.count(v) for v in ("pass", "fail", "inconclusive") if verdicts.count(v)},
        "required_failed": required_failed,
        "outcome": "FAILED" if required_failed else "OK",
        "bench": bench_view(report.get("bench")),
        "speed_only": report.get("speed_only"),
        "repairs": repairs_view(report.get("cache_repairs")),
        "memory": memory_view(report.get("memory"), (report.get("reference") or {}).get("memory")),
        "box_benches": [
            {"box": box, "anchor": anchor(box), "bench": bench_view(bench)}
            for box, bench in sorted((report.get("benches") or {}).items())
        ],
        "gate_labels": GATE_LABELS,
        "fmt": fmt,
        **levers_view(report),
    }
