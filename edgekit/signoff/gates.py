"""Accuracy gates and verdicts: a threshold per metric, judged against the metric's 95% interval.

A gate passes when the whole interval is on the good side of its threshold, fails when the whole
interval is on the bad side, and is inconclusive otherwise. An artifact with no gates at all is
inconclusive, never a pass.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict

from edgekit.signoff.metrics import Estimate

# gate name → (metric, direction): "max" passes when the metric is at most the threshold. The p99 gate
# judges the exact coarse-grained KLD: the sampled-tail per-token KLD is an estimate whose noise inflates
# quantiles and is not in their interval (see edgekit.signoff.metrics).
GATE_METRICS: dict[str, tuple[str, str]] = {
    "kld_mean_max": ("kld_mean", "max"),
    "kld_p99_max": ("kld_coarse_p99", "max"),
    "ppl_ratio_max": ("ppl_ratio", "max"),
    "top1_min": ("top1", "min"),
    "task_drop_max": ("task_drop", "max"),
}


class Gates(BaseModel):
    """Accuracy thresholds. None means 'not gated'."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kld_mean_max: float | None = None  # mean KL(reference || candidate), nats per token
    kld_p99_max: float | None = None
    ppl_ratio_max: float | None = None  # PPL(candidate) / PPL(reference)
    top1_min: float | None = None  # fraction of positions where both pick the same top token
    task_drop_max: float | None = None  # reference task accuracy minus candidate task accuracy

    def merged(self, *overrides: Gates | None) -> Gates:
        values = self.model_dump()
        for override in overrides:
            if override is not None:
                values.update(override.model_dump(exclude_unset=True))
        return Gates(**values)

    def key_form(self) -> dict[str, Any]:
        return self.model_dump()


def judge(estimate: Estimate, threshold: float, direction: str) -> str:
    """pass / fail when the whole 95% interval is on one side of the threshold, else inconclusive."""
    low = estimate.low if estimate.low is not None else estimate.value
    high = estimate.high if estimate.high is not None else estimate.value
    if direction == "max":
        if high <= threshold:
            return "pass"
        return "fail" if low > threshold else "inconclusive"
    if low >= threshold:
        return "pass"
    return "fail" if high < threshold else "inconclusive"


def sample_to_decide(estimate: Estimate, threshold: float) -> int | None:
    """The sample size at which an inconclusive gate would be decided were the observed value to hold.

    An interval's half-width shrinks as 1/√n: the side facing the threshold clears it once
    n' = n · (half-width / distance to the threshold)². None when the value sits on the threshold.
    """
    if estimate.low is None or estimate.high is None or estimate.n <= 0:
        return None
    gap = abs(threshold - estimate.value)
    if not math.isfinite(gap) or gap == 0:
        return None
    width = estimate.high - estimate.value if estimate.value < threshold else estimate.value - estimate.low
    return max(estimate.n + 1, math.ceil(round(estimate.n * (width / gap) ** 2, 6)))


def overall_verdict(checks: list[dict[str, Any]]) -> str:
    verdicts = {c["verdict"] for c in checks}
    if "fail" in verdicts:
        return "fail"
    if "inconclusive" in verdicts:
        return "inconclusive"
    return "pass"


def _estimates(result: dict[str, Any], metric: str) -> list[tuple[str, dict[str, Any]]]:
    if metric == "task_drop":
        return [(f"task_drop[{name}]", t["drop"]) for name, t in result["tasks"].items()]
    return [(metric, result["metrics"][metric])]


def judge_artifact(result: dict[str, Any], gates: Gates) -> dict[str, Any]:
    """Every gate's check and the artifact's verdict, from a validate result."""
    checks = []
    for gate, threshold in gates.model_dump().items():
        if threshold is None:
            continue
        metric, direction = GATE_METRICS[gate]
        for label, est in _estimates(result, metric):
            checks.append(_check(gate, label, threshold, direction, est))
    if not checks:
        # No threshold means nothing was checked: that is not a pass.
        return {
            "checks": [],
            "verdict": "inconclusive",
            "reasons": ["no accuracy gates are set for this scheme; set [validation.gates] or [targets.gates]"],
        }
    return {"checks": checks, "verdict": overall_verdict(checks), "reasons": _reasons(checks)}


def _check(gate: str, metric: str, threshold: float, direction: str, est: dict[str, Any]) -> dict[str, Any]:
    e = Estimate(est["value"], est["ci95"][0], est["ci95"][1], est["n"], est.get("unit", "tokens"))
    check = {
        "gate": gate,
        "metric": metric,
        "threshold": threshold,
        "direction": direction,
        "value": e.value,
        "ci95": [e.low, e.high],
        "n": e.n,
        "unit": e.unit,
        "verdict": judge(e, threshold, direction),
    }
    if est.get("level") is not None:
        check["level"] = est["level"]
    if check["verdict"] == "inconclusive":
        check["n_to_decide"] = sample_to_decide(e, threshold)
    return check


def counts_as_failed(verdict: str, on_inconclusive: str) -> bool:
    return verdict == "fail" or (verdict == "inconclusive" and on_inconclusive == "fail")


def _reasons(checks: list[dict[str, Any]]) -> list[str]:
    reasons = []
    for c in checks:
        low, high = c["ci95"]
        level = f"{100 * c.get('level', 0.95):.4g}%"
        span = f"{level} CI {low:.4g}–{high:.4g}, n={c['n']}" if low is not None else f"n={c['n']}"
        if c["verdict"] == "fail":
            sign = ">" if c["direction"] == "max" else "<"
            reasons.append(f"{c['metric']} = {c['value']:.4g} ({span}) {sign} {c['threshold']:g}")
        elif c["verdict"] == "inconclusive":
            more = c.get("n_to_decide")
            decide = (
                f"; about {more:,} {c.get('unit', 'tokens')} would decide it at this effect"
                if more
                else "; the value sits on the threshold"
            )
            reasons.append(
                f"{c['metric']} = {c['value']:.4g}: its {span} straddles the threshold {c['threshold']:g}{decide}"
            )
    return reasons
