"""What a person sees in a terminal and a script sees in a pipe, on real fresh-cache builds of the tiny model.

A terminal (a pseudo-terminal, as a shell gives) shows edgekit's own progress and nothing any other
library printed; the same build piped to a file gives one plain line per stage start and end, no
escape codes, and `--json` on stdout; between them, each step that knows its total (windows, tensors, jobs)
writes done/total and an ETA at every tenth. What the libraries printed is in the bundle's logs/.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import jsonschema
import pytest

from edgekit.cli.common import load_schema
from tests.support.tiny_project import build_env, make_project

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
# Every line edgekit itself writes during a build, on a terminal: progress rows (a spinner, the stage
# and its step, a bar, a count, the time, and the time left where the step has a total), rich's log lines,
# warnings that matter, the verdict table, the final line.
OWN_LINES = (
    re.compile(
        r"^\S?\s*(fetch|convert|quantize|reference|validate|smoke|bench|bundle)\s\s?\S.*"
        r"\d+:\d\d:\d\d( (\d+|-):[\d-]{2}:[\d-]{2})?$"
    ),
    re.compile(r"^\[\d\d:\d\d:\d\d\] (plan: \d+ tasks|\S.*: reused from the cache)"),
    re.compile(r"^warning: \S"),
    re.compile(r"^(accuracy sign-off|[┏┃┡│└].*)$"),
    re.compile(r"^bundle: \S+ +\(\d+\.\d s\); the reasons"),
)
# What the libraries print when they reach the terminal (transformers, tqdm, the converter, llama.cpp).
FOREIGN = re.compile(r"Writing:|%\||it/s|torch_dtype|legacy behaviour|llama_model_loader|UserWarning|FutureWarning|"
                     r"^INFO|^WARNING|Traceback")  # fmt: skip


def run_in_terminal(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> tuple[int, str]:
    """Run `args` with stdin, stdout and stderr on a pseudo-terminal (250 columns); return its exit code and output."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=timeout), b"".join(chunks).decode("utf-8", errors="replace")


def terminal_env(cache: Path, llama_cpp_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in build_env(cache, llama_cpp_dir).items() if k not in ("CI", "NO_COLOR", "COLUMNS")}
    return {**env, "TERM": "xterm-256color"}


def screen_lines(output: str) -> list[str]:
    """Every distinct line the terminal showed, escape codes removed (a redraw is a line too)."""
    lines = [line.strip() for line in re.split(r"[\r\n]+", ANSI.sub("", output))]
    return list(dict.fromkeys(line for line in lines if line))


def test_a_terminal_shows_only_edgekits_own_lines(tmp_path: Path, tiny_model: Path, llama_cpp_dir: Path) -> None:
    project = make_project(tmp_path / "project", tiny_model)
    env = terminal_env(tmp_path / "cache", llama_cpp_dir)
    code, output = run_in_terminal([sys.executable, "-m", "edgekit", "build", "recipe.toml"], project, env)
    assert code == 0, output
    assert "\x1b[" in output  # it was a terminal: colours and live redraws
    lines = screen_lines(output)
    assert any(line.startswith("bundle: ") for line in lines), lines
    foreign = [line for line in lines if FOREIGN.search(line) or not any(p.search(line) for p in OWN_LINES)]
    assert foreign == [], foreign
    logs = project / "dist" / "tiny" / "logs"
    assert "Writing:" in (logs / "convert-gguf" / "stage.log").read_text()  # gguf-py's bar: in the log, not lost
    assert (logs / "convert-gguf" / "convert.log").read_text().strip()  # the converter's own output
    assert (logs / "build.log").is_file() and (logs / "quantize-gguf-Q8_0" / "quantize.log").is_file()


def test_a_pipe_gets_plain_lines_for_stages_and_steps_with_their_etas_and_json_on_stdout(
    tmp_path: Path, tiny_model: Path, llama_cpp_dir: Path
) -> None:
    project = make_project(tmp_path / "project", tiny_model)
    env = {**build_env(tmp_path / "cache", llama_cpp_dir), "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    args = [sys.executable, "-m", "edgekit", "--debug", "build", "recipe.toml", "--json"]
    proc = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stderr + proc.stdout
    result = json.loads(proc.stdout)
    jsonschema.validate(result, load_schema("build"))
    stages = [s["id"] for s in result["stages"]] + [f"bundle {result['bundle']}"]
    everything = proc.stderr.splitlines()
    steps = [line for line in everything if STEP_LINE.fullmatch(line)]
    lines = [line for line in everything if line not in steps]
    assert len(lines) == 1 + 2 * len(stages), lines  # the plan line, then each stage's start and end
    _check_step_lines(steps)
    assert re.fullmatch(r"\d\d:\d\d:\d\d plan: \d+ tasks \(\d+\.\d s\)", lines[0]), lines[0]
    for stage in stages:
        starts = [line for line in lines if re.fullmatch(rf"\d\d:\d\d:\d\d start  {re.escape(stage)}", line)]
        ends = [line for line in lines if re.fullmatch(rf"\d\d:\d\d:\d\d done   {re.escape(stage)}  \d+\.\d s", line)]
        assert len(starts) == 1 and len(ends) == 1, (stage, lines)
    assert not any(FOREIGN.search(line) for line in lines), lines
    report = json.loads((project / "dist" / "tiny" / "report.json").read_text())
    # `--debug` before the command name is not part of it (the reproduce command once read `edgekit build build`)
    assert report["signoff"]["command"] == "edgekit build recipe.toml", report["signoff"]["command"]
    _check_json_commands(project / "dist" / "tiny", project, env)


# `<step>  40% (4/10 windows)  elapsed 1m02s  ETA 1m33s`, the first without an ETA, the last ending in "done"
STEP_LINE = re.compile(r"\d\d:\d\d:\d\d (?P<step>\S.*?)  (?P<percent>\d+)% "
                       r"\((?P<done>\d+)/(?P<total>\d+) (?P<unit>\w+)\)"
                       r"  elapsed \d+(s|m\d\ds|h\d\dm)(?P<end>  ETA \d+(s|m\d\ds|h\d\dm)|  done)?")  # fmt: skip


def _check_step_lines(lines: list[str]) -> None:
    """The reference's and validation's windows, the quantizer's tensors, the converter's MiB: each step a line when
    it starts, one at each further tenth with an ETA, one when it is done; never more than 12."""
    found = [STEP_LINE.fullmatch(line) for line in lines]
    by_step: dict[str, list[re.Match[str]]] = {}
    for m in found:
        assert m is not None
        by_step.setdefault(m["step"], []).append(m)
    for unit, stage in (("windows", "reference"), ("windows", "validate"), ("tensors", "quantize"), ("MiB", "convert")):
        shown = [ms for name, ms in by_step.items() if name.startswith(f"{stage}  ") and ms[0]["unit"] == unit]
        assert shown, (stage, unit, lines)
        for ms in shown:
            total = int(ms[0]["total"])
            assert ms[0]["done"] == "0" and ms[0]["end"] is None, [m[0] for m in ms]  # the start: nothing to go by
            assert ms[-1]["done"] == ms[-1]["total"] and ms[-1]["end"] == "  done", [m[0] for m in ms]
            middle = ms[1:-1]
            assert all(m["end"].startswith("  ETA ") for m in middle), [m[0] for m in ms]
            percents = [int(m["percent"]) for m in ms]
            assert percents == sorted(set(percents)) and len(ms) <= 12, [m[0] for m in ms]  # no tenth twice
            if unit == "windows" and total >= 2:
                assert middle, [m[0] for m in ms]  # done/total and an ETA before the end


def _check_json_commands(bundle: Path, project: Path, env: dict[str, str]) -> None:
    """verify, inspect, numa and reference --json on the bundle just built: each validates against its schema."""
    for name, args in {
        "verify": ["verify", str(bundle), "--json"],
        "inspect": ["inspect", str(bundle), "--json"],
        "numa": ["numa", str(bundle), "--json"],
        "reference": ["reference", "recipe.toml", "--json"],
    }.items():
        proc = subprocess.run([sys.executable, "-m", "edgekit", *args], cwd=project, env=env, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 0, (name, proc.stderr)
        document = json.loads(proc.stdout)
        jsonschema.validate(document, load_schema(name))
        assert document["schema"] == f"edgekit.{name}"
    assert document["reused"] is True  # the reference the build made


@pytest.mark.parametrize("when", ["NO_COLOR", "TERM=dumb", "CI"])
def test_no_color_dumb_terminals_and_ci_get_plain_text_on_a_terminal(
    when: str, tmp_path: Path, tiny_bundle: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR")}
    env.update({"TERM": "xterm-256color", **dict([when.split("=") if "=" in when else (when, "1")])})
    code, output = run_in_terminal([sys.executable, "-m", "edgekit", "inspect", str(tiny_bundle)], tmp_path, env)
    assert code == 0, output
    assert "gguf-Q8_0" in output and "\x1b[" not in output, output
