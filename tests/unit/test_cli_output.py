"""What commands print: versioned JSON documents that validate against their schema files, plain lines for pipes,
the reproduce command as typed, `--version` with the backends, `doctor`, and `inspect` on every report shape."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import jsonschema
import pytest
from rich.console import Console

from edgekit.cli.build import build
from edgekit.cli.common import SCHEMAS, command_line, console_options, load_schema, schema_names
from edgekit.diagnose.doctor import cpu_checks, llama_cpp_tools, memory_checks
from edgekit.observe.progress import PlainProgressReporter
from edgekit.plan.describe import PLAN_SCHEMA_VERSION
from tests.support.cli_in_process import edgekit
from tests.support.fake_bundle import make_runnable_bundle


@pytest.mark.parametrize("name", schema_names())
def test_every_schema_file_is_a_valid_versioned_json_schema(name: str) -> None:
    schema = load_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"] == {"const": f"edgekit.{name}"} and schema["title"] and schema["description"]
    assert isinstance(schema["properties"]["version"]["const"], int)
    assert {"schema", "version"} <= set(schema["required"])
    code, out, _ = edgekit("schema", name)
    assert code == 0 and json.loads(out) == schema


def test_the_plan_schema_has_the_version_describe_writes() -> None:
    assert load_schema("plan")["properties"]["version"]["const"] == PLAN_SCHEMA_VERSION
    assert {p.stem for p in SCHEMAS.glob("*.json")} >= {"build", "verify", "inspect", "plan", "doctor", "error"}


@pytest.mark.parametrize(
    ("tensor_types", "metrics"),
    [
        ({"Q8_0": 1200, "F32": 30}, {"kld_mean": 0.01, "top1": 0.9}),  # bare counts, bare numbers
        ({"Q8_0": {"tensors": 1, "params": 10, "bytes": 11}}, {"kld_mean": {"value": None}}),  # no estimate
        ([["Q8_0", 12]], None),  # not a mapping at all
        ({}, {}),
    ],
)
def test_inspect_reads_every_shape_the_report_allows(tensor_types: object, metrics: object, tmp_path: Path) -> None:
    bundle = make_runnable_bundle(tmp_path / "b", tensor_types=tensor_types, metrics=metrics)
    code, out, err = edgekit("inspect", str(bundle))
    assert code == 0 and "Traceback" not in err and "m *" in out, (out, err)
    code, out, _ = edgekit("inspect", str(bundle), "--json")
    document = json.loads(out)
    jsonschema.validate(document, load_schema("inspect"))
    assert document["artifacts"][0]["name"] == "m" and document["runtime_config"]["artifact"] == "m"


def test_inspect_gives_the_tensor_mix_and_metrics_as_numbers(tmp_path: Path) -> None:
    code, out, _ = edgekit("inspect", str(make_runnable_bundle(tmp_path / "b")), "--json")
    row = json.loads(out)["artifacts"][0]
    assert code == 0 and row["type_mix"] == "Q8_0 98%, F32 2%" and row["kld_mean"] == 0.01 and row["top1"] == 0.97


def test_numa_verify_and_doctor_documents_validate(tmp_path: Path) -> None:
    bundle = make_runnable_bundle(tmp_path / "b")
    for name, args in {"numa": ["numa", str(bundle)], "verify": ["verify", str(bundle)], "doctor": ["doctor"]}.items():
        code, out, err = edgekit(*args, "--json")
        assert code == 0, err
        jsonschema.validate(json.loads(out), load_schema(name))


def test_toolchain_json_names_a_given_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "llama.cpp"
    (checkout / "gguf-py").mkdir(parents=True)
    (checkout / "convert_hf_to_gguf.py").write_text("# the converter\n")
    code, out, err = edgekit("toolchain", "--llama-cpp-dir", str(checkout), "--json")
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, load_schema("toolchain"))
    assert document["converter"] == str(checkout / "convert_hf_to_gguf.py")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["r.toml"], "edgekit build r.toml"),
        (["r.toml", "--out", "my out", "--threads", "2", "--json"], "edgekit build r.toml --out 'my out' --threads 2"),
        ([], "edgekit build"),
    ],
)
def test_the_reproduce_command_is_rebuilt_from_what_was_parsed(args: list[str], expected: str) -> None:
    with build.make_context("build", list(args)) as ctx:
        assert command_line(ctx) == expected


def test_version_lists_each_backends_packages() -> None:
    code, out, _ = edgekit("--version")
    assert code == 0 and out.startswith("edgekit ")
    for backend, package in (("gguf", "llama-cpp-python"), ("openvino", "openvino"), ("onnxruntime", "onnxruntime")):
        assert re.search(rf"^  {backend}: .*{package} \d", out, re.M), out


def test_plain_progress_is_one_line_per_stage_start_and_end_without_escapes() -> None:
    stream = io.StringIO()  # not a terminal
    reporter = PlainProgressReporter(Console(file=stream, soft_wrap=True, **console_options(stream)))
    reporter.stage_started("convert gguf")
    with reporter.task("convert  a step inside") as step:
        step.advance()
    reporter.warn("tokenizer: something that matters")
    reporter.stage_finished("convert gguf", 12.34, reused=False)
    reporter.stage_finished("reference", 0.01, reused=True, made_seconds=53)
    lines = stream.getvalue().splitlines()
    assert [line[9:] for line in lines] == [
        "start  convert gguf",
        "warning: tokenizer: something that matters",
        "done   convert gguf  12.3 s",
        "reused reference (it took 53 s to make)",
    ]
    assert all(re.match(r"\d\d:\d\d:\d\d ", line) for line in lines) and "\x1b" not in stream.getvalue()


def test_doctor_names_the_kernel_flags_of_each_architecture() -> None:
    x86 = {c.name: c for c in cpu_checks("x86_64", frozenset({"avx2", "avx512_vnni"}), "a CPU")}
    assert x86["AVX2"].status == "ok" and x86["AVX-VNNI"].value == "avx512_vnni"
    assert x86["AVX-512"].status == "missing" and x86["AMX"].fix
    arm = {c.name: c for c in cpu_checks("aarch64", frozenset({"asimd", "asimddp"}), "Neoverse")}
    assert arm["NEON"].status == arm["dotprod"].status == "ok" and arm["i8mm"].status == "missing"
    none = {c.name: c for c in cpu_checks("x86_64", frozenset(), "old")}
    assert none["AVX2"].status == "warn" and "slower" in (none["AVX2"].fix or "")


def test_doctor_reads_memory_and_huge_pages_and_finds_built_llama_tools(tmp_path: Path) -> None:
    meminfo = "MemTotal: 8000000 kB\nMemAvailable: 1000000 kB\nHugePages_Total: 4\nHugepagesize: 2048 kB\n"
    memory, pages = memory_checks(meminfo, "always madvise [never]")
    assert memory.status == "warn" and pages.status == "warn" and "madvise" in (pages.fix or "")
    tool = tmp_path / "llama.cpp-tools" / "build" / "bin" / "llama-bench"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    found = llama_cpp_tools(tmp_path)
    assert found["llama-bench"] == tool and found["llama-quantize"] is None


def test_shell_completion_as_getting_started_sets_it_up(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from edgekit.cli import cli

    monkeypatch.setenv("_EDGEKIT_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "edgekit schema b")
    monkeypatch.setenv("COMP_CWORD", "2")
    with pytest.raises(SystemExit):
        cli.main([], prog_name="edgekit")
    assert capsys.readouterr().out.split() == ["plain,bench", "plain,build"]
