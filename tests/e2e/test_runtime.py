"""The edge-box side on the default bundle (real SmolLM2-135M): bench figures in report.json, `edgekit bench`,
`run`, `serve` (OpenAI endpoints, 400/429, disconnects, metrics, load test), `tune`, run.sh and Dockerfile.edge.

Timings are never asserted (the machine is shared): tests check that the measurements exist and that the
JSON is well formed.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import pytest

from edgekit import __version__
from edgekit.cli.common import load_schema
from edgekit.manifest import verify_bundle
from edgekit.pipeline.build import BuildResult
from edgekit.runtime.bench.schema import schema_problems
from edgekit.runtime.config import LOCAL_FILE, load_runtime_config
from tests.support.stage_cache import linked_copy

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TINY_BENCH = [
    "--runs",
    "1",
    "--prompt-tokens",
    "8",
    "--gen-tokens",
    "4",
    "--threads",
    "1",
    "--concurrency",
    "1,2",
    "--bandwidth-mib",
    "16",
]


def edgekit(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgekit", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- report.json and runtime.toml from the build ------------------------------------------------------


def test_report_has_the_bench_of_every_artifact(default_build: BuildResult) -> None:
    report = json.loads((default_build.bundle / "report.json").read_text())
    bench = report["bench"]
    assert schema_problems(bench) == []
    assert bench["machine"]["physical_cores"] >= 1 and bench["bandwidth"]["best_gib_s_by_processes"]["1"] > 0
    assert bench["settings"]["runs"] == 3 and bench["settings"]["concurrency"] == [1, 2, 4]
    for name in ("gguf-Q4_K_M", "gguf-Q5_K_M", "gguf-Q8_0"):
        a = bench["artifacts"][name]
        assert set(a["decode_tok_s_by_threads"]) == {str(t) for t in bench["settings"]["threads_swept"]}
        assert set(a["decode_tok_s_by_sequences"]) == {"1", "2", "4"}
        assert a["ttft_ms"] > 0 and a["peak_rss_mib"] > 100  # the weights alone are ~100 MiB
        assert a["load_ms_mmap_cold"] > 0 and a["load_ms_no_mmap_cold"] > 0 and a["no_mmap_over_mmap_cold_first_token"]
        assert a["roofline_ratio"] > 0 and abs(a["decode_tok_s"] / a["roofline_tok_s"] - a["roofline_ratio"]) < 0.01
        assert a["baseline_decode_tok_s"] > 0 and a["tuned_over_baseline_decode"] > 0
        assert a["baseline_settings"]["n_ctx"] == 512  # llama_cpp.Llama()'s own default
        assert a["spread"]["perf 1 decode_tok_s"]["n"] == 3  # medians of 3 runs
    q4 = bench["comparisons"]["q4_over_highest_precision_decode"]
    assert q4["numerator"] == "gguf-Q4_K_M" and q4["denominator"] == "gguf-Q8_0" and q4["ratio"]["n"] == 3
    assert 0.5 < q4["bytes_per_token_ratio"] < 0.9  # Q4_K_M (mostly Q5_0 here) reads ~70% of Q8_0's bytes


def test_runtime_toml_is_derived_from_the_bench(default_build: BuildResult) -> None:
    config = load_runtime_config(default_build.bundle)
    bench = json.loads((default_build.bundle / "report.json").read_text())["bench"]
    chosen = bench["artifacts"][config.artifact]
    assert config.n_threads == chosen["n_threads"] and config.n_threads_batch == chosen["n_threads_batch"]
    assert config.numa == "auto" and 1 <= config.max_concurrent <= 4
    assert config.derived_from.startswith("edgekit bench on ") and "n_threads=" in config.derived_from


# --- edgekit bench / run / tune -----------------------------------------------------------------------


def test_bench_command_on_the_bundle_with_tiny_settings(default_build: BuildResult, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = edgekit(
        "bench", str(default_build.bundle), "--artifact", "gguf-Q4_K_M", "--json", "--out", str(out), *TINY_BENCH
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    jsonschema.validate(result, load_schema("bench"))
    result = {k: v for k, v in result.items() if k not in ("schema", "version")}  # --out writes the result alone
    assert schema_problems(result) == [] and json.loads(out.read_text()) == result
    assert list(result["artifacts"]) == ["gguf-Q4_K_M"] and result["bundle"]["name"] == "smollm2-135m"
    a = result["artifacts"]["gguf-Q4_K_M"]
    assert a["load"]["mmap"]["cold"]["rss_file_mib"]["median"] > a["load"]["no_mmap"]["cold"]["rss_file_mib"]["median"]
    assert "mlock" in a["load"] or "mlock" in a["load_skipped"]


def test_run_streams_a_completion_and_a_chat_answer(default_build: BuildResult) -> None:
    proc = edgekit("run", str(default_build.bundle), "--prompt", "The capital of France is", "--max-tokens", "8")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and "prompt tokens" in proc.stderr and "gguf-Q4_K_M" in proc.stderr
    chat = edgekit("run", str(default_build.bundle), "--chat", "--prompt", "Say hello.", "--max-tokens", "12", "-q")
    assert chat.returncode == 0 and chat.stdout.strip() and "<|im" not in chat.stdout


def test_run_and_serve_refuse_a_modified_bundle_naming_the_file(default_build: BuildResult, tmp_path: Path) -> None:
    bundle = linked_copy(default_build.bundle, tmp_path / "bundle")
    target = bundle / "tokenizer" / "tokenizer.json"
    data = target.read_bytes()
    target.unlink()  # break the hard link first: the original bundle stays intact
    changed = data.replace(b'"<|im_end|>"', b'"<|im_END|>"', 1)  # same size: only the sha256 tells
    assert changed != data
    target.write_bytes(changed)
    for command in (["run", str(bundle), "--prompt", "hi"], ["serve", str(bundle), "--port", str(free_port())]):
        proc = edgekit(*command, timeout=120)
        assert proc.returncode == 4, proc.stderr
        assert "tokenizer/tokenizer.json" in proc.stderr and "Traceback" not in proc.stderr
    verify_bundle(default_build.bundle)


def test_tune_writes_runtime_local_toml_and_the_bundle_still_verifies(
    default_build: BuildResult, tmp_path: Path
) -> None:
    bundle = linked_copy(default_build.bundle, tmp_path / "bundle")
    proc = edgekit(
        "tune", str(bundle), "--runs", "1", "--prompt-tokens", "8", "--gen-tokens", "4", "--threads", "1,2", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    jsonschema.validate(result, load_schema("tune"))
    local = tomllib.loads((bundle / LOCAL_FILE).read_text())["runtime"]
    assert local["n_threads"] in (1, 2) and local["derived_from"].startswith("edgekit tune on ")
    assert set(result["sweep"]) == {"1", "2"}
    verify_bundle(bundle)  # runtime.local.toml is not part of the signed manifest
    assert load_runtime_config(bundle).n_threads == local["n_threads"]


def test_run_sh_works_from_any_directory(default_build: BuildResult, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    run_sh = default_build.bundle / "run.sh"
    proc = subprocess.run(
        ["sh", str(run_sh), "run", "--prompt", "Once upon a time", "--max-tokens", "8"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and "numa none" in proc.stderr
    numa = subprocess.run(["sh", str(run_sh), "numa"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert numa.returncode == 0 and "policy:" in numa.stdout
    bad = subprocess.run(["sh", str(run_sh), "explode"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert bad.returncode == 2 and "unknown command" in bad.stderr


# --- serve -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(default_build: BuildResult, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`edgekit serve` on a copy of the default bundle with 2 slots and a queue of 2 (so 429 is reachable)."""
    bundle = linked_copy(default_build.bundle, tmp_path_factory.mktemp("serve") / "bundle")
    (bundle / LOCAL_FILE).write_text("[runtime]\nmax_concurrent = 2\nmax_queue = 2\nmax_request_tokens = 256\n")
    port = free_port()
    log = (bundle.parent / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgekit", "serve", str(bundle), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        seen_loading = False
        while time.time() < deadline:
            assert proc.poll() is None, (bundle.parent / "serve.log").read_text()
            try:
                status = httpx.get(url + "/health", timeout=2).status_code
            except httpx.HTTPError:
                status = None
            seen_loading |= status == 503
            if status == 200:
                break
            time.sleep(0.2)
        else:
            pytest.fail("serve did not become ready:\n" + (bundle.parent / "serve.log").read_text())
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_serve_completions_chat_and_stream(server: str) -> None:
    health = httpx.get(server + "/health").json()
    assert health["status"] == "ok" and health["max_sequences"] == 2
    body = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    completion = httpx.post(server + "/v1/completions", json=body, timeout=60).json()
    assert completion["choices"][0]["text"] and completion["usage"]["completion_tokens"] <= 8
    chat = httpx.post(
        server + "/v1/chat/completions",
        timeout=60,
        json={"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 16},
    ).json()
    assert chat["choices"][0]["message"]["role"] == "assistant" and chat["choices"][0]["message"]["content"]
    with httpx.stream(
        "POST",
        server + "/v1/chat/completions",
        timeout=60,
        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "stream": True},
    ) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and json.loads(lines[0][6:])["choices"][0]["delta"]["role"] == "assistant"


def test_serve_limits_are_400_with_the_limit_in_the_message(server: str) -> None:
    too_many = httpx.post(server + "/v1/completions", json={"prompt": "hi", "max_tokens": 1000})
    assert too_many.status_code == 400 and "256" in too_many.json()["error"]["message"]
    too_big = httpx.post(server + "/v1/completions", content=b'{"prompt": "' + b"x" * (2 * 2**20) + b'"}')
    assert too_big.status_code == 400 and "limit" in too_big.json()["error"]["message"]


def test_serve_answers_429_when_the_queue_is_full(server: str) -> None:
    body = {"prompt": "Write a long story about a lighthouse keeper.", "max_tokens": 64, "temperature": 0}
    codes: list[int] = []

    def call() -> None:
        codes.append(httpx.post(server + "/v1/completions", json=body, timeout=300).status_code)

    threads = [threading.Thread(target=call) for _ in range(8)]  # 2 slots + 2 waiting: the rest must be refused
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(codes)) == [200, 429] and codes.count(200) >= 4, codes
    assert metric(server, 'edgekit_rejected_total{reason="queue_full"}') >= 1


def test_a_client_that_disconnects_frees_its_slot(server: str) -> None:
    before = metric(server, "edgekit_cancelled_total")
    body = {"prompt": "Tell me everything about the history of Rome.", "max_tokens": 200, "stream": True}
    with httpx.stream("POST", server + "/v1/completions", json=body, timeout=60) as r:
        chunks = 0
        for line in r.iter_lines():
            chunks += line.startswith("data: ")
            if chunks >= 3:
                break  # leave mid-stream: the connection is closed here
    deadline = time.time() + 30
    while time.time() < deadline:
        if metric(server, "edgekit_cancelled_total") > before and metric(server, "edgekit_active_sequences") == 0:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the abandoned sequence kept its slot")


def test_bench_serve_script_loses_no_responses(server: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_serve.py"),
            "--url",
            server,
            "--clients",
            "2",
            "--requests",
            "6",
            "--max-tokens",
            "8",
            "--duration",
            "60",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["requests"]["sent"] == 6 and result["requests"]["failed"] == 0 and result["requests"]["lost"] == 0
    assert result["ttft_ms"]["p50"] is not None and result["ttft_ms"]["p99"] >= result["ttft_ms"]["p50"]
    assert result["tokens_per_s"] > 0
    assert "edgekit_completion_tokens_total" in httpx.get(server + "/metrics").text


# --- Dockerfile.edge -----------------------------------------------------------------------------------


def test_dockerfile_edge_is_well_formed_for_the_bundle(default_build: BuildResult) -> None:
    from dockerfile_parse import DockerfileParser

    bundle = default_build.bundle
    text = (bundle / "Dockerfile.edge").read_text()
    assert (REPO / "Dockerfile.edge").resolve().read_text() == text  # one source: the top-level file is the same
    parser = DockerfileParser(fileobj=open(bundle / "Dockerfile.edge", "rb"))  # noqa: SIM115
    instructions = [(i["instruction"], i["value"]) for i in parser.structure]
    kinds = [k for k, _ in instructions]
    assert kinds.count("FROM") >= 2 and "USER" in kinds and "HEALTHCHECK" in kinds
    assert dict(instructions)["USER"] != "root"
    assert "/health" in dict(instructions)["HEALTHCHECK"]
    assert "run.sh" in dict(instructions)["ENTRYPOINT"]
    for kind, value in instructions:
        if kind != "COPY" or "--from=" in value:
            continue
        sources = [s for s in value.split()[:-1] if not s.startswith("--")]
        plain = [s for s in sources if "*" not in s]
        assert plain, f"COPY {value}: a glob alone fails when it matches nothing"
        for source in plain:
            assert (bundle / source).exists(), f"COPY source {source} is not in the bundle"
    runtime_extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["runtime"]
    llama_pin = next(r for r in runtime_extra if r.startswith("llama-cpp-python"))
    assert f"LLAMA_CPP_PYTHON={llama_pin}" in text
    assert f'EDGEKIT_SPEC="edgekit[runtime]=={__version__}"' in text and "GGML_NATIVE=OFF" in text
    check = re.search(r'python -c "import ([^"]+)"', text)
    assert check, "the image build checks its runtime imports"
    for module in check.group(1).split(", "):  # a module that moved must not break the image build
        importlib.import_module(module)


def test_the_image_build_step_keeps_exactly_the_manifest(default_build: BuildResult, tmp_path: Path) -> None:
    bundle = linked_copy(default_build.bundle, tmp_path / "context")
    (bundle / "edgekit-0.1.0-py3-none-any.whl").write_bytes(b"not copied into the image")
    (bundle / LOCAL_FILE).write_text("[runtime]\nn_threads = 1\n")
    proc = subprocess.run([sys.executable, "-m", "edgekit.runtime.image", str(bundle)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not (bundle / LOCAL_FILE).exists() and not (bundle / "edgekit-0.1.0-py3-none-any.whl").exists()
    verify_bundle(bundle)
