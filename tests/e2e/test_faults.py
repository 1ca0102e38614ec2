"""Faults on real builds of a tiny model: SIGKILL at every stage, two builds at once, a full disk.

The model is a 2-layer random Llama with SmolLM2's tokenizer, made in the test (tests/support/tiny_project.py),
so a whole build takes well under a minute. Each scenario has its own fresh stage cache; builds are real
`python -m edgekit build` processes. `paused_edgekit.py STAGE FLAG build …` (the CLI with one seam patched)
makes a build stop at the worst moment of a stage — its output complete in a temp folder, not yet renamed into the cache
(or, for "bundle", the new bundle complete beside dist/<name>/, not yet swapped in) — and the test
kills it there with SIGKILL. One kill point is not a pause: the build is killed while llama.cpp's
converter runs as its child process.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from edgekit._util.hashing import sha256_file
from edgekit.manifest import verify_bundle
from edgekit.store.cache import ENTRY_FILE
from tests.support import SUPPORT
from tests.support.processes import wait_until
from tests.support.tiny_project import TINY_RECIPE, build_env, make_project

STAGES = ("fetch", "convert", "quantize", "reference", "validate")
KILL_POINTS = ("fetch", "converter running", "convert", "quantize", "reference", "validate", "bundle")


PAUSED = SUPPORT / "paused_edgekit.py"


def start_build(
    project: Path, cache: Path, llama_cpp_dir: Path, *args: str, pause: tuple[str, Path] | None = None, **popen: object
) -> subprocess.Popen[str]:
    edgekit = [sys.executable, str(PAUSED), pause[0], str(pause[1])] if pause else [sys.executable, "-m", "edgekit"]
    return subprocess.Popen(
        [*edgekit, "build", "recipe.toml", *args],
        cwd=project,
        env=build_env(cache, llama_cpp_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[arg-type]
    )


def finish(proc: subprocess.Popen[str], timeout: float = 900) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def converter_children(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if any("convert_hf_to_gguf" in part for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def kill_at(point: str, project: Path, cache: Path, llama_cpp_dir: Path, *args: str) -> dict[str, object]:
    """Start a build (with `args`), SIGKILL it at `point`; return what was seen."""
    seen: dict[str, object] = {}
    if point == "converter running":
        proc = start_build(project, cache, llama_cpp_dir, *args)
        wait_until(lambda: converter_children(proc), proc, "the converter started")
        orphans = converter_children(proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        _, alive = psutil.wait_procs(orphans, timeout=5)  # SIGKILLed with its parent: gone at once
        seen["orphans_alive"] = len(alive)
        for p in alive:
            p.kill()
    else:
        flag = project.parent / f"paused-{point}"
        flag.unlink(missing_ok=True)
        proc = start_build(project, cache, llama_cpp_dir, *args, pause=(point, flag))
        wait_until(flag.exists, proc, f"the pause at {point}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    proc.stdout.close()  # type: ignore[union-attr]
    proc.stderr.close()  # type: ignore[union-attr]
    seen["returncode"] = proc.returncode
    return seen


# --- what a cache and a dist folder hold ----------------------------------------------------------


def cache_entries(cache: Path) -> dict[tuple[str, str], int]:
    """Complete entries, (stage, key) → entry.json's mtime (unchanged = reused, not rewritten)."""
    found = {}
    for stage in (*STAGES, "bench"):
        for entry in sorted((cache / stage).glob("*")) if (cache / stage).is_dir() else []:
            if not entry.name.startswith("."):
                found[(stage, entry.name)] = (entry / ENTRY_FILE).stat().st_mtime_ns
    return found


def cache_problems(cache: Path) -> list[str]:
    """Every complete entry's files, hashed against its entry.json; no entry without one."""
    problems = []
    for stage, key in cache_entries(cache):
        entry = cache / stage / key
        try:
            meta = json.loads((entry / ENTRY_FILE).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            problems.append(f"{stage}/{key[:12]}: unreadable entry.json ({exc})")
            continue
        listed = {f["path"] for f in meta["files"]}
        present = {p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file()} - {ENTRY_FILE}
        if listed != present:
            problems.append(f"{stage}/{key[:12]}: files {sorted(listed ^ present)} differ from entry.json")
        for f in meta["files"]:
            if (entry / f["path"]).is_file() and sha256_file(entry / f["path"]) != f["sha256"]:
                problems.append(f"{stage}/{key[:12]}/{f['path']}: sha256 differs from entry.json")
    return problems


def leftovers(*folders: Path) -> list[str]:
    """Temp folders of builds (cache `.…partial`, dist `.<name>.pid….partial` / `.old`)."""
    found = []
    for folder in folders:
        if folder.is_dir():
            found += [str(p) for p in folder.rglob(".*") if p.name.endswith((".partial", ".old"))]
    return found


# --- SIGKILL at every stage, then resume -----------------------------------------------------------


@dataclass
class KillRecord:
    point: str
    returncode: object
    bundle_exists: bool
    cache_problems: list[str]
    entries_before: dict[tuple[str, str], int]
    entries_after: dict[tuple[str, str], int]
    orphans_alive: object = None


@dataclass
class Resumed:
    project: Path
    cache: Path
    kills: list[KillRecord] = field(default_factory=list)
    final_returncode: int = -1
    final_stderr: str = ""
    final_entries: dict[tuple[str, str], int] = field(default_factory=dict)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, llama_cpp_dir: Path) -> Resumed:
    """One fresh cache; the build is killed at each point in turn (each run gets one stage further), then
    run to the end. Each killed run resumes from the entries the previous runs completed."""
    root = tmp_path_factory.mktemp("killed")
    record = Resumed(make_project(root / "project", tiny_model), root / "cache")
    for point in KILL_POINTS:
        before = cache_entries(record.cache)
        seen = kill_at(point, record.project, record.cache, llama_cpp_dir)
        record.kills.append(
            KillRecord(
                point=point,
                returncode=seen["returncode"],
                bundle_exists=(record.project / "dist" / "tiny").exists(),
                cache_problems=cache_problems(record.cache),
                entries_before=before,
                entries_after=cache_entries(record.cache),
                orphans_alive=seen.get("orphans_alive"),
            )
        )
    proc = start_build(record.project, record.cache, llama_cpp_dir)
    record.final_returncode, record.final_stderr = finish(proc)
    record.final_entries = cache_entries(record.cache)
    return record


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_build_killed_at_each_point_leaves_no_bundle_and_no_broken_cache_entry(point: str, resumed: Resumed) -> None:
    kill = next(k for k in resumed.kills if k.point == point)
    assert kill.returncode == -signal.SIGKILL
    assert not kill.bundle_exists
    assert kill.cache_problems == []
    stage = "convert" if point == "converter running" else point
    if stage in STAGES:  # killed before its entry was renamed into place: there is none
        assert stage not in {s for s, _ in kill.entries_after}
    # what earlier runs completed is still there, untouched (reused, not redone)
    assert {k: v for k, v in kill.entries_after.items() if k in kill.entries_before} == kill.entries_before


def test_the_stage_each_kill_interrupted_is_completed_by_the_next_run(resumed: Resumed) -> None:
    completed = [{s for s, _ in k.entries_after} for k in resumed.kills]
    assert completed[0] == set()  # killed in fetch
    assert completed[1] == {"fetch"}  # killed while the converter ran
    assert completed[2] == {"fetch"}  # killed with the conversion complete but not yet in the cache
    assert completed[3] == {"fetch", "convert"}
    assert completed[4] == {"fetch", "convert", "quantize"}
    assert completed[5] == {"fetch", "convert", "quantize", "reference"}
    assert completed[6] == set(STAGES)  # killed with the bundle staged, not yet in place


def test_a_killed_build_does_not_leave_the_converter_running(resumed: Resumed) -> None:
    kill = next(k for k in resumed.kills if k.point == "converter running")
    assert kill.orphans_alive == 0


def test_the_next_build_completes_reusing_every_stage_that_finished(resumed: Resumed) -> None:
    assert resumed.final_returncode == 0, resumed.final_stderr
    manifest = verify_bundle(resumed.project / "dist" / "tiny")
    assert [a["name"] for a in manifest["artifacts"]] == ["gguf-Q8_0"]
    last_kill = resumed.kills[-1].entries_after
    assert resumed.final_entries == last_kill  # one entry per stage, none rewritten
    assert sorted(s for s, _ in resumed.final_entries) == sorted(STAGES)
    assert cache_problems(resumed.cache) == []
    assert leftovers(resumed.cache, resumed.project / "dist") == []  # the last run cleaned what kills left
    assert sorted(p.name for p in (resumed.project / "dist").iterdir()) == ["tiny"]


def test_a_kill_while_replacing_a_bundle_keeps_the_previous_one(resumed: Resumed, llama_cpp_dir: Path) -> None:
    project, cache = resumed.project, resumed.cache
    code, err = finish(start_build(project, cache, llama_cpp_dir, "--out", "replace"))  # every stage reused
    assert code == 0, err
    bundle = project / "replace" / "tiny"
    before = (bundle / "manifest.json").read_bytes()
    recipe = project / "recipe.toml"
    recipe.write_text(TINY_RECIPE + "\n[bundle.runtime]\nn_ctx = 1024\n")  # only the bundle changes
    try:
        kill_at("bundle", project, cache, llama_cpp_dir, "--out", "replace")
        assert (bundle / "manifest.json").read_bytes() == before
        verify_bundle(bundle)  # the previous bundle, complete and intact
        code, err = finish(start_build(project, cache, llama_cpp_dir, "--out", "replace"))
        assert code == 0, err
        verify_bundle(bundle)
        assert "n_ctx = 1024" in (bundle / "runtime.toml").read_text()
        assert sorted(p.name for p in (project / "replace").iterdir()) == ["tiny"]  # nothing left beside it
    finally:
        recipe.write_text(TINY_RECIPE)


# --- two builds at once ----------------------------------------------------------------------------


@dataclass
class Pair:
    project: Path
    cache: Path
    results: list[tuple[int, str]]


@pytest.fixture(scope="module")
def concurrent(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, llama_cpp_dir: Path) -> Pair:
    """Two builds of the same recipe started together, one fresh cache, separate output folders."""
    root = tmp_path_factory.mktemp("concurrent")
    project, cache = make_project(root / "project", tiny_model), root / "cache"
    procs = [start_build(project, cache, llama_cpp_dir, "--out", f"out{i}") for i in (1, 2)]
    return Pair(project, cache, [finish(p) for p in procs])


def test_two_builds_at_once_both_succeed_and_share_one_cache_entry_per_stage(concurrent: Pair) -> None:
    for code, err in concurrent.results:
        assert code == 0, err
    manifests = [verify_bundle(concurrent.project / f"out{i}" / "tiny") for i in (1, 2)]
    assert manifests[0]["artifacts"][0]["sha256"] == manifests[1]["artifacts"][0]["sha256"]
    entries = cache_entries(concurrent.cache)
    assert sorted(s for s, _ in entries) == sorted(STAGES)  # each stage produced once, not twice
    assert cache_problems(concurrent.cache) == []
    assert leftovers(concurrent.cache, concurrent.project) == []


# --- the same recipe, built twice from scratch -------------------------------------------------------

# What legitimately differs between two builds of the same recipe (docs/faults.md's rebuild note says the same):
# only report fields that record when, how long, from which folder and command the build ran, and whether a
# stage came from the cache.
# Peak memory (report.memory, measured while each entry was made) and the memory the reference found
# available (report.reference.memory) depend on the machine's state, like timings; so does a decode speed.
MEMORY_FIELDS = {"rss_anon_peak_mib", "rss_file_peak_mib", "rss_peak_mib", "process_max_rss_mib",
                 "children_max_rss_mib", "available_mib", "limited_by"}  # fmt: skip
SPEED_FIELDS = {"decode_tok_s"}  # a ladder's candidates as the bench timed them
REPORT_FIELDS_THAT_DIFFER = {"created", "date", "command", "path", "reproduce", "reused"} | MEMORY_FIELDS | SPEED_FIELDS


def json_differences(a: object, b: object, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(a.keys() | b.keys()) for d in json_differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in json_differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def test_two_fresh_builds_give_identical_artifacts(resumed: Resumed, concurrent: Pair) -> None:
    """`resumed` and `concurrent` built the same recipe from the same model in two different fresh caches."""
    first, second = resumed.project / "dist" / "tiny", concurrent.project / "out1" / "tiny"
    a = {f["path"]: f["sha256"] for f in json.loads((first / "manifest.json").read_text())["files"]}
    b = {f["path"]: f["sha256"] for f in json.loads((second / "manifest.json").read_text())["files"]}
    assert a.keys() == b.keys()
    differ = {path for path in a if a[path] != b[path]}
    logs = {path for path in a if path.startswith("logs/")}  # what libraries printed, with its timings and temp paths
    assert differ <= {"report.json", "report.md", "report.html"} | logs, differ  # models, tokenizer, runtime: identical
    reports = [json.loads((bundle / "report.json").read_text()) for bundle in (first, second)]
    unexplained = [
        p
        for p in json_differences(*reports)
        if p.rsplit(".", 1)[-1] not in REPORT_FIELDS_THAT_DIFFER and not p.endswith("seconds")
    ]
    assert unexplained == []


# --- a full disk ------------------------------------------------------------------------------------


def _run_cli_in_process(project: Path, cache: Path, llama_cpp_dir: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """`edgekit build recipe.toml --out full` in this process (whose disk the test patched), on `cache`."""
    from edgekit.cli import main

    for key, value in {"EDGEKIT_LLAMA_CPP_DIR": str(llama_cpp_dir), "HF_HUB_OFFLINE": "1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "argv", ["edgekit", "build", "recipe.toml", "--out", "full", "--cache-dir", str(cache)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return int(exit_info.value.code)  # type: ignore[arg-type]


def _disk_with_free(free: int, under: Path) -> object:
    real = shutil.disk_usage

    def disk_usage(path: str | os.PathLike[str]) -> object:
        usage = real(path)
        return usage._replace(free=free) if Path(path).resolve().is_relative_to(under) else usage

    return disk_usage


def test_a_full_output_disk_fails_the_bundle_with_exit_3_and_writes_nothing(
    concurrent: Pair, llama_cpp_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = concurrent.project / "full"
    out.mkdir()
    monkeypatch.setattr(shutil, "disk_usage", _disk_with_free(50 * 2**20, out))
    code = _run_cli_in_process(concurrent.project, concurrent.cache, llama_cpp_dir, monkeypatch)
    err = capsys.readouterr().err
    assert code == 3, err
    assert "not enough disk space in" in err and "MiB free" in err and "nothing was written" in err
    assert list(out.iterdir()) == []


def test_a_full_cache_disk_fails_the_first_stage_with_exit_3_and_leaves_no_entry(
    tmp_path: Path,
    tiny_model: Path,
    llama_cpp_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project, cache = make_project(tmp_path / "project", tiny_model), tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setattr(shutil, "disk_usage", _disk_with_free(260 * 2**20, cache))  # below margin + checkpoint
    code = _run_cli_in_process(project, cache, llama_cpp_dir, monkeypatch)
    err = capsys.readouterr().err
    assert code == 3, err
    assert f"not enough disk space in {cache}" in " ".join(err.split())
    assert cache_entries(cache) == {} and leftovers(cache) == []
    assert not (project / "full").exists()


def test_a_write_that_fails_midway_exits_3_and_keeps_nothing_half_written(
    concurrent: Pair, llama_cpp_dir: Path
) -> None:
    """A real failed write, not a prediction: the file-size limit makes the bundle's model copy fail (EFBIG)."""

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 * 2**20, 2 * 2**20))

    proc = start_build(
        concurrent.project, concurrent.cache, llama_cpp_dir, "--out", "limited", preexec_fn=limit_file_size
    )
    code, err = finish(proc)
    assert code == 3, err
    assert "File too large" in err and "free some space" in err and "Traceback" not in err
    assert not (concurrent.project / "limited" / "tiny").exists()
    assert leftovers(concurrent.project / "limited") == []
