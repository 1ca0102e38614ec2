"""The levers on the default model (SmolLM2-135M): an importance-matrix Q4_K_M against the plain one in the same
build, and scheme = "auto" on the default gguf ladder. One session build (`levers_build`), sharing the default
build's conversion, reference and plain Q4_K_M through the cache."""

from __future__ import annotations

import json

import gguf

from edgekit.pipeline.build import BuildResult


def _report(build: BuildResult) -> dict:
    return json.loads((build.bundle / "report.json").read_text())


def test_imatrix_and_plain_q4_k_m_are_validated_in_the_same_build(levers_build: BuildResult) -> None:
    report = _report(levers_build)
    by_target = {c["target"]: c for c in report["comparisons"]}
    assert by_target.keys() == {"gguf-Q4_K_M-imatrix", "gguf-auto"}  # the ladder kept the matrix candidate too
    c = by_target["gguf-Q4_K_M-imatrix"]
    assert c["scheme"] == "Q4_K_M" and c["lever"] == "imatrix"
    same = by_target["gguf-auto"]  # the same two artifacts (same cache keys), judged by the ladder's own gates
    assert same["difference"] == c["difference"] and same["without"]["verdict"] == "fail"
    scored = report["reference"]["scored_tokens"]
    for side in ("with", "without"):
        for metric in ("kld_mean", "top1"):
            estimate = c[side]["metrics"][metric]
            assert estimate["ci95"][0] <= estimate["value"] <= estimate["ci95"][1], (side, metric)
    assert scored == 4080
    # the importance matrix is in the artifact as llama-quantize writes it: 30 layers × 7 weight matrices
    reader = gguf.GGUFReader(levers_build.bundle / "models" / "gguf-Q4_K_M-imatrix.gguf")
    assert reader.fields["quantize.imatrix.entries_count"].contents() == 210
    assert reader.fields["quantize.imatrix.chunks_count"].contents() == 32
    html = (levers_build.bundle / "report.html").read_text()
    assert "Importance matrix: with and without" in html


def test_auto_on_the_default_model_climbs_to_the_importance_matrix(levers_build: BuildResult) -> None:
    report = _report(levers_build)
    (ladder,) = report["ladders"]
    assert [c["label"] for c in ladder["candidates"]] == ["Q4_K_M", "Q4_K_M+imatrix", "Q5_K_M", "Q6_K", "Q8_0"]
    kept = next(i for i, c in enumerate(ladder["candidates"]) if c["kept"])
    assert ladder["passed"] and ladder["candidates"][kept]["verdict"] == "pass"
    assert all(c["verdict"] != "pass" for c in ladder["candidates"][:kept])
    assert all(c["verdict"] == "not built" for c in ladder["candidates"][kept + 1 :])
    auto = next(a for a in report["artifacts"] if a["name"] == "gguf-auto")
    assert auto["verdict"] == "pass" and auto["scheme"] == ladder["candidates"][kept]["scheme"]
    assert levers_build.verdicts["gguf-auto"] == "pass" and "first candidate, cheapest first" in ladder["reason"]
    # held to a mean KLD of 0.04: the plain Q4_K_M (0.046) fails, the importance-matrix one (0.030) is kept
    assert [(c["label"], c["verdict"]) for c in ladder["candidates"][:2]] == [("Q4_K_M", "fail"),
                                                                               ("Q4_K_M+imatrix", "pass")]  # fmt: skip
    assert "cheaper candidates failed: Q4_K_M: kld_mean" in ladder["reason"]
