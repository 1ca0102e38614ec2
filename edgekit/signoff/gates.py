"""Accuracy gates and verdicts: a threshold per metric, judged against the metric's 95% interval.

A gate passes when the whole interval is on the good side of its threshold, fails when the whole
interval is on the bad side, and is inconclusive otherwise. An artifact with no gates at all is
inconclusive, never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from edgekit.signoff.metrics import Estimate


class Verdict(StrEnum):
    """What the sign-off says of an artifact (the text report.json and manifest.json hold)."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    NOT_VALIDATED = "not validated"  # validation is off: nothing was measured
    NOT_BUILT = "not built"  # an optional target its backend cannot take, or a ladder candidate never reached


Direction = Literal["max", "min"]  # "max": passes when the metric is at most the threshold

# gate name → (metric, direction): "max" passes when the metric is at most the threshold. The p99 gate
# judges the exact coarse-grained KLD: the sampled-tail per-token KLD is an estimate whose noise inflates
# quantiles and is not in their interval (see edgekit.signoff.metrics).
GATE_METRICS: dict[str, tuple[str, Direction]] = {
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


class Measured(Protocol):
    """What the gates judge: the metrics with their intervals and the task accuracies (`Estimate.to_dict()` each)."""

    @property
    def metrics(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def tasks(self) -> Mapping[str, Mapping[str, Any]]: ...


@dataclass
class Summary:
    """Metrics and task accuracies with their intervals (`edgekit.signoff.scoring.summarise`); after sequential
    looks, how far they went (`sequential`)."""

    metrics: dict[str, dict[str, Any]]
    tasks: dict[str, dict[str, Any]]
    sequential: dict[str, Any] | None = None


@dataclass(frozen=True)
class Check:
    """One gate judged against one metric's interval."""

    gate: str
    metric: str  # the metric's label: "kld_mean", "task_drop[cloze]"
    threshold: float
    direction: Direction
    value: float
    low: float | None
    high: float | None
    n: int
    unit: str
    verdict: Verdict
    level: float | None = None  # the interval's coverage when it is not 95% (sequential looks)
    n_to_decide: int | None = None  # inconclusive: the sample size that would decide it at this effect

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gate": self.gate, "metric": self.metric, "threshold": self.threshold,
                               "direction": self.direction, "value": self.value, "ci95": [self.low, self.high],
                               "n": self.n, "unit": self.unit, "verdict": self.verdict}  # fmt: skip
        if self.level is not None:
            out["level"] = self.level
        if self.verdict == Verdict.INCONCLUSIVE:
            out["n_to_decide"] = self.n_to_decide
        return out


@dataclass
class Judgement:
    """Every gate's check, the artifact's verdict and, for each check that did not pass, why."""

    verdict: Verdict
    checks: list[Check] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"checks": [c.to_json() for c in self.checks], "verdict": self.verdict, "reasons": list(self.reasons)}


def judge(estimate: Estimate, threshold: float, direction: Direction) -> Verdict:
    """pass / fail when the whole 95% interval is on one side of the threshold, else inconclusive."""
    low = estimate.low if estimate.low is not None else estimate.value
    high = estimate.high if estimate.high is not None else estimate.value
    if direction == "max":
        if high <= threshold:
            return Verdict.PASS
        return Verdict.FAIL if low > threshold else Verdict.INCONCLUSIVE
    if low >= threshold:
        return Verdict.PASS
    return Verdict.FAIL if high < threshold else Verdict.INCONCLUSIVE


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


def overall_verdict(checks: list[Check]) -> Verdict:
    verdicts = {c.verdict for c in checks}
    if Verdict.FAIL in verdicts:
        return Verdict.FAIL
    if Verdict.INCONCLUSIVE in verdicts:
        return Verdict.INCONCLUSIVE
    return Verdict.PASS


def _estimates(measured: Measured, metric: str) -> list[tuple[str, Mapping[str, Any]]]:
    if metric == "task_drop":
        return [(f"task_drop[{name}]", t["drop"]) for name, t in measured.tasks.items()]
    return [(metric, measured.metrics[metric])]


def judge_artifact(measured: Measured, gates: Gates) -> Judgement:
    """Every gate's check and the artifact's verdict, from a validate result (or a look's summary)."""
    checks = []
    for gate, threshold in gates.model_dump().items():
        if threshold is None:
            continue
        metric, direction = GATE_METRICS[gate]
        for label, est in _estimates(measured, metric):
            checks.append(_check(gate, label, threshold, direction, est))
    if not checks:
        # No threshold means nothing was checked: that is not a pass.
        reason = "no accuracy gates are set for this scheme; set [validation.gates] or [targets.gates]"
        return Judgement(Verdict.INCONCLUSIVE, [], [reason])
    return Judgement(overall_verdict(checks), checks, _reasons(checks))


def _check(gate: str, metric: str, threshold: float, direction: Direction, est: Mapping[str, Any]) -> Check:
    e = Estimate(est["value"], est["ci95"][0], est["ci95"][1], est["n"], est.get("unit", "tokens"))
    verdict = judge(e, threshold, direction)
    more = sample_to_decide(e, threshold) if verdict == Verdict.INCONCLUSIVE else None
    return Check(gate, metric, threshold, direction, e.value, e.low, e.high, e.n, e.unit, verdict,
                 est.get("level"), more)  # fmt: skip


def counts_as_failed(verdict: Verdict, on_inconclusive: str) -> bool:
    return verdict == Verdict.FAIL or (verdict == Verdict.INCONCLUSIVE and on_inconclusive == "fail")


def _reasons(checks: list[Check]) -> list[str]:
    reasons = []
    for c in checks:
        level = f"{100 * (c.level or 0.95):.4g}%"
        span = f"{level} CI {c.low:.4g}–{c.high:.4g}, n={c.n}" if c.low is not None else f"n={c.n}"
        if c.verdict == Verdict.FAIL:
            sign = ">" if c.direction == "max" else "<"
            reasons.append(f"{c.metric} = {c.value:.4g} ({span}) {sign} {c.threshold:g}")
        elif c.verdict == Verdict.INCONCLUSIVE:
            decide = (
                f"; about {c.n_to_decide:,} {c.unit} would decide it at this effect"
                if c.n_to_decide
                else "; the value sits on the threshold"
            )
            reasons.append(f"{c.metric} = {c.value:.4g}: its {span} straddles the threshold {c.threshold:g}{decide}")
    return reasons
