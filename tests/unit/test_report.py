"""report.md / report.html rendering from a report dict, and the pieces of the sign-off logic."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgekit.report import plots as report_plots
from edgekit.report.model import kld_distribution, nominal_bits, order_findings
from edgekit.report.plots import bench_series
from edgekit.report.render import render, write_human_reports
from edgekit.signoff.gates import judge_artifact
from tests.support.sample_report import artifact, sample_report


def test_render_shows_every_artifact_verdict_interval_and_the_signoff(tmp_path: Path) -> None:
    report = sample_report()
    write_human_reports(tmp_path, report)
    md, html = (tmp_path / "report.md").read_text(), (tmp_path / "report.html").read_text()
    for name in ("size_vs_kld", "kld_distribution", "perplexity", "tensor_types"):
        assert f"(plots/{name}.png)" in md and (tmp_path / "plots" / f"{name}.png").stat().st_size > 5000
    for text in (md, html):
        assert "gguf-Q4_K_M" in text and "noise floor (bfloat16 reference)" in text
        assert "[0.0437, 0.0483]" in text  # mean KLD with its interval
        assert "cdcd" in text and "efef" in text  # recipe and source hashes
        assert "Reference reconstructed from a quantized file" in text
        assert "Reproduce the figures" in text
        assert "one decoder layer at a time" in text and "1,900 MiB available, RLIMIT_DATA" in text
        assert "reference 1,234 + 321" in text and "this build 1,300 + 2,100" in text
    assert "## gguf-Q5_K_M <x>: FAIL" in md
    assert "gguf-Q5_K_M &lt;x&gt;" in html and "<x>" not in html  # escaped
    assert len(re.findall(r'<img src="data:image/png;base64,', html)) == 4
    assert not re.search(r'(src|href)="(?!data:|#)', html) and "<script" not in html
    assert "Benchmark" not in md  # no bench stage, no bench section


def test_findings_flag_a_more_precise_scheme_that_is_worse() -> None:
    arts = [artifact("a-Q4_K_M", "Q4_K_M", 0.046, "pass"), artifact("a-Q5_K_M", "Q5_K_M", 0.073, "fail")]
    (finding,) = order_findings(arts)
    assert finding["artifacts"] == ["a-Q5_K_M", "a-Q4_K_M"] and "do not overlap" in finding["text"]
    close = [artifact("a-Q4_K_M", "Q4_K_M", 0.046, "pass"), artifact("a-Q5_K_M", "Q5_K_M", 0.047, "pass")]
    assert order_findings(close) == []  # overlapping intervals: no claim
    assert nominal_bits("Q8_0") == 8 and nominal_bits("F16") == 16 and nominal_bits("int4_asym") == 4


@pytest.mark.parametrize(
    "bench",
    [
        {
            "artifacts": {
                "gguf-Q4_K_M": {
                    "decode_tok_s": {"1": 50.0, "2": 80.0, "4": 110.0},
                    "ttft_ms": 40.0,
                    "peak_rss_mib": 210.0,
                    "new_thing": {"deep": [1, 2]},
                }
            },
            "bandwidth_gbs": 12.5,
            "machine": {"cores": 2},
        },
        {
            "artifacts": [
                {"name": "gguf-Q4_K_M", "thread_sweep": [{"threads": 1, "tok_s": 30}, {"threads": 2, "tok_s": 50}]}
            ]
        },
        {"something_else": "entirely"},
        {},
    ],
)
def test_bench_section_tolerates_any_layout(bench: dict[str, Any]) -> None:
    report = sample_report(bench)
    figure = report_plots.bench(report)
    md, html = render(report, {"bench": ("Benchmark", figure)} if figure else {})
    if bench:
        assert "Benchmark" in md and 'id="bench"' in html
    for key in ("bandwidth_gbs", "something_else", "thread_sweep", "new_thing"):  # unknown keys: shown as they are
        if key in str(bench):
            assert key in md and key in html, key
    if "peak_rss_mib" in str(bench):  # known keys: shown with their label
        assert "peak RSS (MiB)" in md and "peak RSS (MiB)" in html
    if "decode_tok_s" in str(bench):
        assert bench_series(bench)["decode_tok_s"]["gguf-Q4_K_M"] == [(1.0, 50.0), (2.0, 80.0), (4.0, 110.0)]
        assert figure and figure[:4] == b"\x89PNG" and 'alt="Benchmark"' in html


def test_kld_distribution_accounts_for_every_token(tmp_path: Path) -> None:
    kld = np.concatenate([np.full(10, -1e-5), np.logspace(-7, 1.5, 1000), [0.0]])
    np.savez(tmp_path / "tokens.npz", kld=kld.astype(np.float32))
    dist = kld_distribution(tmp_path / "tokens.npz")
    assert sum(dist["counts"]) + dist["below"] + dist["above"] == dist["n"] == len(kld)
    assert dist["negative"] == 10 and dist["quantiles"]["0.5"] == pytest.approx(np.quantile(kld, 0.5), rel=1e-5)


def test_no_gates_is_not_a_pass() -> None:
    from edgekit.signoff.gates import Gates, Summary

    judged = judge_artifact(Summary({}, {}), Gates())
    assert judged.verdict == "inconclusive" and "no accuracy gates" in judged.reasons[0]


def test_reference_uses_fp16_on_cuda_and_fp32_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA path cannot run here; check the choice it makes with a torch that reports a GPU."""
    from edgekit.errors import UsageError
    from edgekit.reference.torch_runner import resolve_device

    def fake_torch(has_cuda: bool) -> types.ModuleType:
        torch = types.ModuleType("torch")
        torch.cuda = types.SimpleNamespace(is_available=lambda: has_cuda, get_device_name=lambda i: "NVIDIA A10G")  # type: ignore[attr-defined]
        return torch

    def resolved(device: str, dtype: str) -> tuple[str, str]:
        chosen = resolve_device(device, dtype)
        return chosen.device, chosen.dtype

    monkeypatch.setitem(sys.modules, "torch", fake_torch(True))
    assert resolve_device("auto", "auto").name == "NVIDIA A10G"
    assert resolved("auto", "auto") == ("cuda", "float16")
    assert resolved("auto", "bfloat16") == ("cuda", "bfloat16")
    assert resolved("cpu", "auto") == ("cpu", "float32")
    monkeypatch.setitem(sys.modules, "torch", fake_torch(False))
    assert resolved("auto", "auto") == ("cpu", "float32")
    with pytest.raises(UsageError, match="no CUDA device"):
        resolve_device("cuda", "auto")


def test_bench_stage_output_renders_with_labels() -> None:
    """A real result of the bench stage (tests/fixtures/bench_result.json, measured on a 2-core box)."""
    bench = json.loads((Path(__file__).parent.parent / "fixtures" / "bench_result.json").read_text())
    report = sample_report(bench)
    figure = report_plots.bench(report)
    md, html = render(report, {"bench": ("Benchmark", figure)} if figure else {})
    assert figure and figure[:4] == b"\x89PNG"
    for text in (md, html):
        assert "decode, one sequence (tok/s)" in text and "decode ÷ bandwidth roof" in text
        assert "decode_tok_s_by_sequences" in text and "machine.cpu_model" in text
    decode = bench["artifacts"]["gguf-Q8_0"]["decode_tok_s"]
    assert "| decode, one sequence (tok/s) |" in md and f"{decode:.4g}" in md


def test_tensor_type_histograms_as_bare_counts_render() -> None:
    """Folder artifacts (OpenVINO IR) may record {precision: params} instead of GGUF's {tensors, params, bytes}."""
    report = sample_report()
    report["artifacts"].append(
        artifact("openvino-int8", "int8", 0.004, "pass", tensor_types={"i8": 1000, "f32": 10}, size=None)
    )
    figure = report_plots.tensor_types(report)
    md, html = render(report, {"tensor_types": ("Tensor-type mix", figure)} if figure else {})
    assert figure and "| i8 | — | 1,000 | 99.0% | — |" in md and "openvino-int8" in html


def test_a_build_without_validation_renders_and_says_so(tmp_path: Path) -> None:
    report = sample_report()
    report["reference"] = None
    report["noise_floor"] = None
    report["findings"] = []
    report["signoff"]["reference"] = None
    report["signoff"]["eval_data"] = None
    for a in report["artifacts"]:
        a.update(verdict="not validated", metrics=None, tasks=None, checks=[], reasons=[], gates=None)
    write_human_reports(tmp_path, report)
    for name in ("report.md", "report.html"):
        text = (tmp_path / name).read_text()
        assert "Validation was disabled" in text and "gguf-Q4_K_M" in text
